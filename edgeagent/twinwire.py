"""fedapi's twin cluster API messages to and from the agent's domain types.

Decoding is the trust boundary: a message that does not make a valid pod or node
(negative requests, unknown enum values, bad GPU shapes) raises
:class:`edgeagent.clusters.ClusterUnavailable` — garbage from the back end is a
failed call, never a crash or a half-applied update.
"""

from __future__ import annotations

from fedapi import common_pb2, twincluster_pb2 as pb
from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, Toleration
from fedcore.resources import GpuRequest

from edgeagent.clusters import BindOutcome, BindResult, ClusterUnavailable, Phase, PodUpdate

_PHASES = {pb.POD_PENDING: Phase.PENDING, pb.POD_RUNNING: Phase.RUNNING, pb.POD_SUCCEEDED: Phase.SUCCEEDED,
           pb.POD_FAILED: Phase.FAILED}
_PB_PHASES = {v: k for k, v in _PHASES.items()}
_OUTCOMES = {pb.BIND_BOUND: BindOutcome.BOUND, pb.BIND_ALREADY_BOUND: BindOutcome.ALREADY_BOUND,
             pb.BIND_STALE_EPOCH: BindOutcome.STALE_EPOCH, pb.BIND_DUPLICATE: BindOutcome.DUPLICATE,
             pb.BIND_REJECTED: BindOutcome.REJECTED}
_PB_OUTCOMES = {v: k for k, v in _OUTCOMES.items()}


def update_from_pb(event: pb.PodEvent) -> PodUpdate:
    p = event.pod
    try:
        spec = p.spec
        pod = Pod(
            uid=p.name, cpu_milli=p.requests.cpu_milli, memory_mib=p.requests.memory_mib, disk_mib=p.requests.disk_mib,
            gpu=GpuRequest(spec.gpu_count, spec.gpu_milli_each), gpu_model=spec.gpu_model, priority=spec.priority,
            archs=frozenset(Arch(a) for a in spec.archs), node_selector=dict(spec.node_selector),
            tolerations=tuple(_toleration(t) for t in spec.tolerations), workload=p.workload,
            max_per_node=spec.max_per_node,
        )
        phase = Phase.DELETED if event.type == pb.EVENT_DELETED else _PHASES[p.phase]
    except (KeyError, ValueError) as exc:
        raise ClusterUnavailable(f"malformed pod {p.name!r:.80} from the cluster: {exc!r:.200}") from exc
    if not p.name or p.epoch < 1:
        raise ClusterUnavailable(f"malformed pod from the cluster: name {p.name!r:.80}, epoch {p.epoch}")
    return PodUpdate(pod, p.epoch, phase, p.node)


def update_to_pb(update: PodUpdate, workload: str = "") -> pb.PodEvent:
    pod = update.pod
    spec = pb.PodSpec(
        gpu_count=pod.gpu.count, gpu_milli_each=pod.gpu.milli_each, gpu_model=pod.gpu_model,
        archs=sorted(a.value for a in pod.archs), node_selector=pod.node_selector, max_per_node=pod.max_per_node,
        priority=pod.priority,
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


def node_from_pb(n: pb.Node) -> Node:
    try:
        return Node(
            name=n.name, cpu_milli=n.capacity.cpu_milli, memory_mib=n.capacity.memory_mib, disk_mib=n.capacity.disk_mib,
            gpus=n.gpus, gpu_model=n.gpu_model, arch=Arch(n.arch or "amd64"), cluster=n.cluster or "c0",
            zone=n.zone or "z0", region=n.region or "r0", labels=dict(n.labels),
            taints=tuple(Taint(t.key, t.value, TaintEffect(t.effect)) for t in n.taints),
        )
    except ValueError as exc:
        raise ClusterUnavailable(f"malformed node {n.name!r:.80} from the cluster: {exc}") from exc


def node_to_pb(node: Node, ready: bool = True) -> pb.Node:
    cap = node.capacity
    return pb.Node(
        name=node.name, ready=ready, arch=node.arch.value, labels=node.labels, gpus=node.gpus,
        gpu_model=node.gpu_model, cluster=node.cluster, zone=node.zone, region=node.region,
        capacity=common_pb2.ResourceVector(cpu_milli=cap.cpu_milli, memory_mib=cap.memory_mib, disk_mib=cap.disk_mib,
                                           gpu_milli=cap.gpu_milli),
        taints=[pb.Taint(key=t.key, value=t.value, effect=t.effect.value) for t in node.taints],
    )


def result_from_pb(r: pb.BindPodResponse) -> BindResult:
    outcome = _OUTCOMES.get(r.outcome)
    if outcome is None:
        raise ClusterUnavailable(f"unknown bind outcome {r.outcome} from the cluster")
    return BindResult(outcome, r.node, r.epoch, r.reason)


def result_to_pb(result: BindResult) -> pb.BindPodResponse:
    return pb.BindPodResponse(outcome=_PB_OUTCOMES[result.outcome], node=result.node, epoch=result.epoch,
                              reason=result.reason)


def _toleration(t: common_pb2.Toleration) -> Toleration:
    return Toleration(t.key, t.value or None, TaintEffect(t.effect) if t.effect else None)
