"""TEST HARNESS — fedapi's TwinCluster service over an :class:`InMemoryCluster`, for tests and the learning loop.

The real twin cluster API is served by the control plane process (which the agent
package may not import), and ``fedplane bench agent`` runs against that service; this
double serves the same messages on the same twin link (:mod:`fedapi.agentlink`), so the
agents under test use their production client (:mod:`edgeagent.planeclient`). Its user
runs it in its own process and drives pods on the cluster object directly (submit,
finish), which is also its ground truth: decision latencies, refused binds, over-commits.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

from controlplane import learninglink
from controlplane.experienceinbox import ExperienceInbox
from edgeagent import linkcodec
from edgeagent.clusters import (
    BindResult,
    ClusterUnavailable,
    Phase,
    PodUpdate,
    UnknownNode,
)
from fedapi import common_pb2
from fedapi import controlplane_pb2 as cp
from fedapi import twincluster_pb2 as pb
from fedapi.linkserver import Context, Gate, LinkServer
from fedcore.nodes import Node
from fedcore.pods import class_of
from federated.flower.shelf import ModelShelf
from fedplane.lab.doubles.memcluster import InMemoryCluster

REPORT_INTERVAL_MS = 5000


@functools.lru_cache(maxsize=4096)
def _encoded(update: PodUpdate) -> pb.PodEvent:
    """One message per change, shared by every watcher (each watch would otherwise rebuild it)."""
    return update_to_pb(update)


_PB_PHASES = {phase: pb.PodPhase.ValueType(number) for number, phase in linkcodec.PHASES.items()}
_PB_OUTCOMES = {outcome: pb.BindOutcome.ValueType(number) for number, outcome in linkcodec.OUTCOMES.items()}


def update_to_pb(update: PodUpdate, workload: str = "") -> pb.PodEvent:
    pod = update.pod
    spec = pb.PodSpec(
        gpu_count=pod.gpu.count, gpu_milli_each=pod.gpu.milli_each, gpu_model=pod.gpu_model,
        archs=sorted(a.value for a in pod.archs), node_selector=pod.node_selector, max_per_node=pod.max_per_node,
        priority=pod.priority, qos=class_of(pod.qos),
        tolerations=[common_pb2.Toleration(key=t.key, value=t.value or "", effect=t.effect.value if t.effect else "")
                     for t in pod.tolerations],
    )
    deleted = update.phase is Phase.DELETED
    message = pb.Pod(
        name=pod.uid, workload=workload or pod.workload, epoch=update.epoch,
        phase=pb.POD_SUCCEEDED if deleted else _PB_PHASES[update.phase], node=update.node,
        requests=common_pb2.ResourceVector(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, disk_mib=pod.disk_mib,
                                           gpu_milli=pod.gpu.total_milli),
        spec=spec, ready=update.phase is Phase.RUNNING,
    )
    return pb.PodEvent(type=pb.EVENT_DELETED if deleted else pb.EVENT_MODIFIED, pod=message)


def node_to_pb(node: Node, ready: bool = True) -> pb.Node:
    cap = node.capacity
    return pb.Node(
        name=node.name, ready=ready, arch=node.arch.value, labels=node.labels, gpus=node.gpus,
        gpu_model=node.gpu_model, cluster=node.cluster, zone=node.zone, region=node.region,
        capacity=common_pb2.ResourceVector(cpu_milli=cap.cpu_milli, memory_mib=cap.memory_mib, disk_mib=cap.disk_mib,
                                           gpu_milli=cap.gpu_milli),
        taints=[pb.Taint(key=t.key, value=t.value, effect=t.effect.value) for t in node.taints],
    )


def result_to_pb(result: BindResult) -> pb.BindPodResponse:
    return pb.BindPodResponse(outcome=_PB_OUTCOMES[result.outcome], node=result.node, epoch=result.epoch,
                              reason=result.reason)


class _Servicer:
    def __init__(self, cluster: InMemoryCluster, name: str, shelf: ModelShelf | None = None, inbox: ExperienceInbox | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.reports: dict[str, cp.AgentReport] = {}
        self.shelf, self.inbox = shelf, inbox

    async def WatchPods(self, request: pb.WatchPodsRequest, context: Context) -> AsyncIterator[pb.PodEvent]:
        await self._check(request.cluster, context)
        try:
            async for update in self.cluster.watch():
                yield _encoded(update)
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))

    async def BindPod(self, request: pb.BindPodRequest, context: Context) -> pb.BindPodResponse:
        await self._check(request.cluster, context)
        try:
            return result_to_pb(await self.cluster.bind(request.pod, request.node, request.epoch,
                                                                         tuple(request.gpus)))
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))
            raise

    async def ReportNodeStatus(self, request: pb.NodeStatusReport, context: Context) -> pb.NodeStatusAck:
        await self._check(request.cluster, context)
        try:
            return pb.NodeStatusAck(pods_released=await self.cluster.report_node(request.node, request.ready))
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))
            raise

    async def CompletePod(self, request: pb.CompletePodRequest, context: Context) -> pb.BindPodResponse:
        await self._check(request.cluster, context)
        result = await self.cluster.complete(request.pod, request.epoch, request.succeeded)
        return result_to_pb(result)

    async def DescribeNode(self, request: pb.DescribeNodeRequest, context: Context) -> pb.Node:
        await self._check(request.cluster, context)
        try:
            return node_to_pb(await self.cluster.describe_node(request.node))
        except UnknownNode as exc:
            await context.abort("NOT_FOUND", str(exc))
            raise
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))
            raise

    async def ReportAgent(self, request: cp.AgentReport, context: Context) -> cp.AgentAck:
        """Kept (newest per agent) for tests to read; no control plane here, so agents are asked to report rarely."""
        await self._check(request.cluster, context)
        self.reports[request.node] = request
        return cp.AgentAck(accepted=True, report_interval_ms=REPORT_INTERVAL_MS)

    async def FetchModel(self, request: pb.FetchModelRequest, context: Context) -> pb.ModelOffer:
        """As the plane answers (:mod:`controlplane.learninglink`): models from the loop's shelf over the link."""
        await self._check(request.cluster, context)
        return await learninglink.fetch_model(self.shelf, request, context)

    async def ShipExperience(self, request: pb.ExperienceBatch, context: Context) -> pb.ExperienceAck:
        await self._check(request.cluster, context)
        return await learninglink.ship_experience(self.inbox, request, context)

    async def _check(self, cluster: str, context: Context) -> None:
        if cluster != self.name:
            await context.abort("NOT_FOUND", f"no cluster {cluster!r} here (this is {self.name!r})")


class TwinHarness:
    """Serves one in-memory cluster to agent processes."""

    def __init__(self, cluster: InMemoryCluster, name: str = "c0", bind: str = "127.0.0.1:0", shelf: ModelShelf | None = None,
                 inbox: ExperienceInbox | None = None, gate: Gate | None = None) -> None:
        """``shelf``, ``inbox``: models and experience over the link, as the plane's (None: agents get
        UNIMPLEMENTED, as from a plane started without them); ``gate``: the plane's credential check (None: none)."""
        self.cluster = cluster
        self.name = name
        host, _, port = bind.rpartition(":")
        self.servicer = _Servicer(cluster, name, shelf, inbox)
        self._server = LinkServer(self.servicer, host, int(port), gate=gate)

    async def start(self) -> str:
        """Listen; returns ``host:port``."""
        port = await self._server.start()
        return f"{self._server.host}:{port}"

    async def stop(self) -> None:
        self.cluster.close_watches()
        await self._server.stop()
