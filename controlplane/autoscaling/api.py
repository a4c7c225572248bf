"""The ``Autoscaler`` gRPC service: enable, read and disable a workload's autoscaling.

Messages map to :class:`~controlplane.autoscaling.specs.AutoscaleSpec` and
:class:`~controlplane.autoscaling.actuating.Status`; errors map as the ControlPlane service's do
(bad input -> INVALID_ARGUMENT, unknown workload -> NOT_FOUND).
"""

from __future__ import annotations

import grpc

from controlplane.autoscaling import series as sr
from controlplane.autoscaling.actuating import Status
from controlplane.autoscaling.specs import AutoscaleSpec
from controlplane.runtime import ControlPlane
from controlplane.service import _run
from fedapi import autoscale_pb2 as pb, autoscale_pb2_grpc


def spec_from(m: pb.AutoscaleSpec) -> AutoscaleSpec:
    """The spec a client asked for; out-of-bounds values (and a series of more than
    :data:`~controlplane.autoscaling.series.MAX_SAMPLES` samples) raise ValueError."""
    if len(m.values) > sr.MAX_SAMPLES:  # before copying them out of the message
        raise sr.SeriesError(f"series {m.series[:60]!r}: {len(m.values)} samples, at most {sr.MAX_SAMPLES}")
    d = AutoscaleSpec("x")
    return AutoscaleSpec(
        m.workload, m.series or d.series, m.stride_s, m.policy or d.policy, m.min_replicas or d.min_replicas,
        m.max_replicas or d.max_replicas, m.startup_s if m.HasField("startup_s") else d.startup_s,
        m.peak_replicas or d.peak_replicas, m.speed or d.speed, values=tuple(m.values),
    )


def spec_to(s: AutoscaleSpec) -> pb.AutoscaleSpec:
    return pb.AutoscaleSpec(workload=s.workload, series=s.series, stride_s=s.stride_s, policy=s.policy, min_replicas=s.min_replicas,
                            max_replicas=s.max_replicas, startup_s=s.startup_s, peak_replicas=s.peak_replicas, speed=s.speed)


def status_to(s: Status) -> pb.AutoscaleStatus:
    return pb.AutoscaleStatus(spec=spec_to(s.spec), fallback=s.fallback, demand=s.demand, forecast=s.forecast, desired=s.desired,
                              ready=s.ready, replicas=s.replicas, reason=s.reason, enabled_at=s.spec.enabled_at)


class AutoscalerService(autoscale_pb2_grpc.AutoscalerServicer):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def _enable(self, m: pb.AutoscaleSpec) -> Status:
        spec = spec_from(m)  # ValueError -> INVALID_ARGUMENT
        now = self.plane.clock()
        scaler = self.plane.autoscaling.prepare(spec, now)  # the slow part, outside the reconcile lock
        with self.plane.lock:
            return self.plane.autoscaling.enable(spec, now, scaler)

    def _disable(self, workload: str) -> Status:
        with self.plane.lock:
            return self.plane.autoscaling.disable(workload, self.plane.clock())

    def _get(self, workload: str) -> list[Status]:
        with self.plane.lock:
            a = self.plane.autoscaling
            return [a.status(workload)] if workload else a.statuses()

    async def EnableAutoscale(self, request: pb.EnableAutoscaleRequest, context: grpc.aio.ServicerContext) -> pb.AutoscaleStatus:
        return status_to(await _run(context, self._enable, request.spec))

    async def DisableAutoscale(self, request: pb.DisableAutoscaleRequest, context: grpc.aio.ServicerContext) -> pb.AutoscaleStatus:
        return status_to(await _run(context, self._disable, request.workload))

    async def GetAutoscale(self, request: pb.GetAutoscaleRequest, context: grpc.aio.ServicerContext) -> pb.GetAutoscaleResponse:
        return pb.GetAutoscaleResponse(autoscalers=[status_to(s) for s in await _run(context, self._get, request.workload)])
