"""Twin cluster API messages (as twin-link maps) to and from the agent's domain types.

The maps carry ``fedplane.v1.TwinCluster``'s fields by their proto names (see
:mod:`fedapi.agentlink`); the enum numbers below are the proto's, which a test checks.
Decoding is the trust boundary: a message that does not make a valid pod or node
(missing fields, wrong types, negative requests, unknown enum values, bad GPU shapes)
raises :class:`edgeagent.clusters.ClusterUnavailable` — garbage from the back end is a
failed call, never a crash or a half-applied update.
"""

from __future__ import annotations

from typing import Any

from edgeagent.clusters import (
    BindOutcome,
    BindResult,
    ClusterUnavailable,
    Phase,
    PodUpdate,
)
from fedapi.agentlink import Wire
from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, Toleration, qos_of
from fedcore.resources import GpuRequest

PHASES = {1: Phase.PENDING, 2: Phase.RUNNING, 3: Phase.SUCCEEDED, 4: Phase.FAILED}
"""PodPhase numbers (POD_PENDING...)."""
EVENT_DELETED = 3
"""EventType EVENT_DELETED."""
OUTCOMES = {1: BindOutcome.BOUND, 2: BindOutcome.ALREADY_BOUND, 3: BindOutcome.STALE_EPOCH, 4: BindOutcome.DUPLICATE,
            5: BindOutcome.REJECTED}
"""BindOutcome numbers (BIND_BOUND...)."""
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def update_from_wire(event: Wire) -> PodUpdate:
    p: Any = event.get("pod")
    name = p.get("name") if isinstance(p, dict) else None
    try:
        spec, requests = p["spec"], p["requests"]
        pod = Pod(
            uid=p["name"], cpu_milli=_int(requests["cpu_milli"]), memory_mib=_int(requests["memory_mib"]),
            disk_mib=_int(requests["disk_mib"]), gpu=GpuRequest(_int(spec["gpu_count"]), _int(spec["gpu_milli_each"])),
            gpu_model=spec["gpu_model"], priority=_int(spec["priority"]), archs=frozenset(Arch(a) for a in spec["archs"]),
            node_selector=dict(spec["node_selector"]), tolerations=tuple(_toleration(t) for t in spec["tolerations"]),
            workload=p["workload"], max_per_node=_int(spec["max_per_node"]), qos=qos_of(spec.get("qos") or "online"),
        )
        phase = Phase.DELETED if event["type"] == EVENT_DELETED else PHASES[p["phase"]]
        epoch, node = p["epoch"], p["node"]
        if not isinstance(epoch, int) or not isinstance(node, str) or not isinstance(pod.uid, str):
            raise TypeError(f"epoch {epoch!r:.20}, node {node!r:.80}")
    except _MALFORMED as exc:
        raise ClusterUnavailable(f"malformed pod {name!r:.80} from the cluster: {exc!r:.200}") from exc
    if not pod.uid or epoch < 1:
        raise ClusterUnavailable(f"malformed pod from the cluster: name {pod.uid!r:.80}, epoch {epoch}")
    return PodUpdate(pod, epoch, phase, node)


def node_from_wire(n: Wire) -> Node:
    try:
        cap = n["capacity"]
        return Node(
            name=n["name"], cpu_milli=_int(cap["cpu_milli"]), memory_mib=_int(cap["memory_mib"]),
            disk_mib=_int(cap["disk_mib"]), gpus=_int(n["gpus"]), gpu_model=n["gpu_model"], arch=Arch(n["arch"] or "amd64"), cluster=n["cluster"] or "c0",
            zone=n["zone"] or "z0", region=n["region"] or "r0", labels=dict(n["labels"]),
            taints=tuple(Taint(t["key"], t["value"], TaintEffect(t["effect"])) for t in n["taints"]),
        )
    except _MALFORMED as exc:
        raise ClusterUnavailable(f"malformed node {n.get('name')!r:.80} from the cluster: {exc!r:.200}") from exc


def node_to_wire(node: Node, ready: bool = True) -> Wire:
    cap = node.capacity
    return {
        "name": node.name, "ready": ready, "arch": node.arch.value, "labels": dict(node.labels), "gpus": node.gpus,
        "gpu_model": node.gpu_model, "cluster": node.cluster, "zone": node.zone, "region": node.region,
        "capacity": {"cpu_milli": cap.cpu_milli, "memory_mib": cap.memory_mib, "disk_mib": cap.disk_mib,
                     "gpu_milli": cap.gpu_milli},
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in node.taints],
    }


def result_from_wire(r: Wire) -> BindResult:
    outcome = OUTCOMES.get(r.get("outcome"))  # type: ignore[arg-type]
    if outcome is None:
        raise ClusterUnavailable(f"unknown bind outcome {r.get('outcome')!r:.40} from the cluster")
    node, epoch, reason = r.get("node"), r.get("epoch"), r.get("reason")
    if not isinstance(node, str) or not isinstance(epoch, int) or not isinstance(reason, str):
        raise ClusterUnavailable(f"malformed bind result from the cluster: {r!r:.200}")
    return BindResult(outcome, node, epoch, reason)


def _int(value: object) -> int:
    """Numbers from the wire are checked, not trusted: a string or a float is a malformed message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r:.40}")
    return value


def _toleration(t: Wire) -> Toleration:
    return Toleration(t["key"], t["value"] or None, TaintEffect(t["effect"]) if t["effect"] else None)
