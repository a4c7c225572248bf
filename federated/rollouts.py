"""Teacher rollouts on the twin: run a heuristic on the openb protocol and record what it saw and chose.

Each decision keeps the pod's features and a fixed-size candidate set — the teacher's choice,
its best-scored alternatives (the hard negatives) and random feasible nodes — so imitation
trains on padded (decisions, candidates, features) arrays of bounded size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import profiles
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Scheduler
from fedcore.twin import submission
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, FeatureBuilder, pod_features


@dataclass(frozen=True, slots=True)
class Decisions:
    """Recorded decisions: candidate 0 is always the teacher's choice."""

    pods: np.ndarray  # (D, P) float32
    nodes: np.ndarray  # (D, K, F) float32
    target: np.ndarray  # (D, K) float32: the teacher's score before truncation
    mask: np.ndarray  # (D, K) bool: real candidates (False = padding)

    def __len__(self) -> int:
        return int(self.pods.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[Decisions]) -> Decisions:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("pods", "nodes", "target", "mask")))


def record(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    seed: int,
    teacher: str = "fgd",
    candidates: int = 64,
    on_pod: Callable[[], None] | None = None,
) -> Decisions:
    """One openb-protocol episode (to 100% arrived GPU) scheduled by ``teacher``, recorded."""
    table = NodeTable(submission.gpu_nodes(nodes))
    cluster_gpu = int(table.gpu_count.sum()) * 1000
    scheduler = Scheduler(profiles.make(teacher, profiles.ProfileContext(seed, pods)), table, seed)
    (plugin, _), = scheduler.profile.scores
    builder = FeatureBuilder(PodTypes.from_pods(pods))
    rng = np.random.default_rng(seed)
    out_pods, out_nodes, out_target, out_mask = [], [], [], []
    arrived = 0
    for pod in submission.workload(pods, seed, cluster_gpu):
        arrived += pod.gpu.total_milli
        rows = np.flatnonzero(scheduler.feasible(pod))
        if rows.size:
            node_x = builder(pod, table, rows)
            raw = plugin.score(pod, table, rows)
            chosen = scheduler.select(pod)
            assert chosen is not None
            first = int(np.flatnonzero(rows == chosen[0])[0])
            keep = _candidates(raw, first, candidates, rng)
            nodes_k = np.zeros((candidates, len(NODE_FEATURES)), dtype=np.float32)
            target_k = np.zeros(candidates, dtype=np.float32)
            mask_k = np.zeros(candidates, dtype=bool)
            nodes_k[: keep.size], target_k[: keep.size], mask_k[: keep.size] = node_x[keep], raw[keep], True
            out_pods.append(pod_features(pod)[0])
            out_nodes.append(nodes_k)
            out_target.append(target_k)
            out_mask.append(mask_k)
            table.allocate(pod, chosen[0], scheduler.profile.devices.pick(pod, table, chosen[0]))
        if on_pod is not None:
            on_pod()
        if arrived >= cluster_gpu:
            break
    return Decisions(
        np.array(out_pods, dtype=np.float32).reshape(-1, len(POD_FEATURES)),
        np.array(out_nodes, dtype=np.float32).reshape(-1, candidates, len(NODE_FEATURES)),
        np.array(out_target, dtype=np.float32).reshape(-1, candidates),
        np.array(out_mask, dtype=bool).reshape(-1, candidates),
    )


def _candidates(raw: np.ndarray, chosen: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """The chosen row first, then the best-scored half of the rest, then random rows."""
    others = np.delete(np.arange(raw.size), chosen)
    if others.size <= k - 1:
        return np.concatenate([[chosen], others])
    top = others[np.argsort(-raw[others], kind="stable")[: (k - 1) // 2]]
    rest = np.setdiff1d(others, top)
    return np.concatenate([[chosen], top, rng.choice(rest, size=k - 1 - top.size, replace=False)])
