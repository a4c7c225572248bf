"""The agent's gossip records: one node-state record, and one claims record per pod.

Keys: ``n`` holds this node's state (free resources, GPU devices, load, model version), ``c/<pod>``
holds our own claim records for that pod as a :mod:`crdt.wire` delta (withdrawn
``placement.compact_after`` seconds after the pod is compacted). Values from peers are
untrusted: :func:`decode_node_state` raises ValueError on anything malformed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedcore.resources import Resources

NODE_KEY = "n"
CLAIM_PREFIX = "c/"


def claim_key(pod: str) -> str:
    return CLAIM_PREFIX + pod


def pod_of(key: str) -> str | None:
    """The pod uid a claims key names, or None for any other key."""
    return key[len(CLAIM_PREFIX):] if key.startswith(CLAIM_PREFIX) else None


@dataclass(frozen=True, slots=True)
class NodeState:
    """What a peer tells the cluster about its node; used to estimate who should claim first."""

    node: str
    capacity: Resources
    free: Resources
    load: float
    model: str
    arch: str
    gpus_whole: int = -1
    """Devices wholly free (-1: not reported); with ``gpu_share`` it tells peers whether a GPU pod fits."""
    gpu_share: int = -1
    """The most milli-GPU free on any one device (-1: not reported): summed free milli can hide
    that no single device holds a share, or that too few devices are whole."""


def published_load(load: float) -> float:
    """The load as peers see it: three decimals, so sampling noise below that is not news."""
    return round(load, 3)


def encode_node_state(state: NodeState) -> dict[str, Any]:
    return {
        "node": state.node, "cap": list(state.capacity.as_tuple()), "free": list(state.free.as_tuple()),
        "load": published_load(state.load), "model": state.model, "arch": state.arch,
        "dev": [state.gpus_whole, state.gpu_share],
    }


def decode_node_state(value: Any) -> NodeState:
    """Parse a peer's node-state record; raises ValueError naming the bad field."""
    if not isinstance(value, dict):
        raise ValueError(f"node state must be a map, got {type(value).__name__}")
    try:
        node, cap, free, load = value["node"], value["cap"], value["free"], value["load"]
        model, arch = value.get("model", ""), value.get("arch", "")
    except KeyError as exc:
        raise ValueError(f"node state lacks {exc.args[0]!r}") from None
    if not isinstance(node, str) or not node or not isinstance(model, str) or not isinstance(arch, str):
        raise ValueError("node state: node, model and arch must be strings")
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0 <= load <= 1e6:
        raise ValueError(f"node state: bad load {load!r:.40}")
    dev = value.get("dev", [-1, -1])
    if not isinstance(dev, list) or len(dev) != 2 or not all(type(v) is int and v >= -1 for v in dev):
        raise ValueError(f"node state: dev must be 2 integers >= -1, got {dev!r:.60}")
    return NodeState(node, _resources(cap, "cap"), _resources(free, "free"), float(load), model, arch, dev[0], dev[1])


def _resources(value: Any, name: str) -> Resources:
    if not isinstance(value, list) or len(value) != 4 or not all(type(v) is int for v in value):
        raise ValueError(f"node state: {name} must be 4 integers, got {value!r:.60}")
    return Resources(*value)
