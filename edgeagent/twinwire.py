"""msgpack forms of pods, nodes and bind results for the twin cluster API harness.

Interim wire: ``fedapi`` will define the twin cluster API in protobuf; until then the
harness (:mod:`edgeagent.twinharness`) and its client (:mod:`edgeagent.twinclient`)
speak gRPC with these msgpack bodies. Decoding is the trust boundary: anything
malformed raises :class:`edgeagent.clusters.ClusterUnavailable` (garbage from the
back end is a failed call, never a crash or a half-applied update).
"""

from __future__ import annotations

from typing import Any

import msgpack

from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, Toleration
from fedcore.resources import GpuRequest

from edgeagent.clusters import BindOutcome, BindResult, ClusterUnavailable, Phase, PodUpdate

SERVICE = "fedplane.twin.v0.Cluster"


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack's many error types mean one thing here
        raise ClusterUnavailable(f"undecodable message from the cluster: {exc}") from exc


def pod_to_wire(pod: Pod) -> dict[str, Any]:
    return {
        "uid": pod.uid, "cpu": pod.cpu_milli, "mem": pod.memory_mib, "disk": pod.disk_mib,
        "gpu": [pod.gpu.count, pod.gpu.milli_each], "model": pod.gpu_model, "workload": pod.workload,
        "max_per_node": pod.max_per_node, "archs": sorted(a.value for a in pod.archs),
        "selector": dict(pod.node_selector),
        "tolerations": [[t.key, t.value, t.effect.value if t.effect else None] for t in pod.tolerations],
    }


def update_to_wire(update: PodUpdate) -> dict[str, Any]:
    return {"pod": pod_to_wire(update.pod), "epoch": update.epoch, "phase": update.phase.value, "node": update.node}


def update_from_wire(obj: Any) -> PodUpdate:
    try:
        p = obj["pod"]
        pod = Pod(
            uid=str(p["uid"]), cpu_milli=int(p["cpu"]), memory_mib=int(p["mem"]), disk_mib=int(p["disk"]),
            gpu=GpuRequest(int(p["gpu"][0]), int(p["gpu"][1])), gpu_model=str(p["model"]),
            workload=str(p["workload"]), max_per_node=int(p["max_per_node"]),
            archs=frozenset(Arch(a) for a in p["archs"]), node_selector={str(k): str(v) for k, v in p["selector"].items()},
            tolerations=tuple(Toleration(k, v, TaintEffect(e) if e else None) for k, v, e in p["tolerations"]),
        )
        return PodUpdate(pod, int(obj["epoch"]), Phase(obj["phase"]), str(obj["node"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ClusterUnavailable(f"malformed pod update from the cluster: {exc!r:.200}") from exc


def node_to_wire(node: Node) -> dict[str, Any]:
    return {
        "name": node.name, "cpu": node.cpu_milli, "mem": node.memory_mib, "disk": node.disk_mib, "gpus": node.gpus,
        "model": node.gpu_model, "arch": node.arch.value, "cluster": node.cluster, "labels": dict(node.labels),
        "taints": [[t.key, t.value, t.effect.value] for t in node.taints],
    }


def node_from_wire(obj: Any) -> Node:
    try:
        return Node(
            name=str(obj["name"]), cpu_milli=int(obj["cpu"]), memory_mib=int(obj["mem"]), disk_mib=int(obj["disk"]),
            gpus=int(obj["gpus"]), gpu_model=str(obj["model"]), arch=Arch(obj["arch"]), cluster=str(obj["cluster"]),
            labels={str(k): str(v) for k, v in obj["labels"].items()},
            taints=tuple(Taint(k, v, TaintEffect(e)) for k, v, e in obj["taints"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ClusterUnavailable(f"malformed node from the cluster: {exc!r:.200}") from exc


def result_to_wire(result: BindResult) -> dict[str, Any]:
    return {"outcome": result.outcome.value, "node": result.node, "epoch": result.epoch, "reason": result.reason}


def result_from_wire(obj: Any) -> BindResult:
    try:
        return BindResult(BindOutcome(obj["outcome"]), str(obj["node"]), int(obj["epoch"]), str(obj["reason"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ClusterUnavailable(f"malformed bind result from the cluster: {exc!r:.200}") from exc
