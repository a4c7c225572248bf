"""Teacher rollouts on the twin: run a heuristic and record what it saw and how it scored every candidate.

A zero-weight recording plugin rides along in the teacher's profile, so the teacher schedules
exactly as it would alone while each decision's pod features and a fixed-size candidate set —
the teacher's best-scored nodes (its choice and the hard negatives) and random feasible ones —
are kept as padded (decisions, candidates, features) arrays.

Teachers: ``fgd`` on the openb protocol (its GPU allocation is the best there) and
``kube-default`` on the DLRM replay (its p99 wait is the best there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling import profiles
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Profile, ScorePlugin, Scheduler
from fedcore.traces.dlrm import Instance
from fedcore.twin import submission
from federated import evaluating
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, FeatureBuilder


@dataclass(frozen=True, slots=True)
class Decisions:
    """Recorded decisions; ``top`` marks candidates in the teacher's best integer-score bin (its tie set)."""

    pods: np.ndarray  # (D, P) float32
    nodes: np.ndarray  # (D, K, F) float32
    target: np.ndarray  # (D, K) float32: the teacher's score on its own scale (0-100 per unit of plugin weight), see Recorder
    mask: np.ndarray  # (D, K) bool: real candidates (False = padding)
    top: np.ndarray  # (D, K) bool

    def __len__(self) -> int:
        return int(self.pods.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[Decisions]) -> Decisions:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("pods", "nodes", "target", "mask", "top")))


@dataclass
class Recorder:
    """Zero-weight score plugin that records each decision the profile's real plugins make."""

    teacher: Sequence[tuple[ScorePlugin, float]]
    builder: FeatureBuilder
    candidates: int
    rng: np.random.Generator
    every: int = 1
    name: str = "Recorder"
    rows: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    seen: int = 0

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        node_x = self.builder(pod, table, rows)  # every decision, so the load-trend state is as at run time
        self.seen += 1
        if self.seen % self.every == 0:
            scores = [(w, p.score(pod, table, rows)) for p, w in self.teacher]
            ints = sum(w * np.floor(np.clip(s, 0, 100)) for w, s in scores)
            # What decides is the teacher's integer score: one plugin's raw score has exactly that floor; a
            # sum of plugins is its integer sum, imitated half a point up so the model's floor is not on a boundary.
            target = scores[0][1] if len(scores) == 1 else ints + 0.5
            self.rows.append(self._sample(self.builder.pod(pod)[0], node_x, target, ints == ints.max()))
        return np.zeros(rows.size)

    def _sample(self, pod_x: np.ndarray, node_x: np.ndarray, target: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, ...]:
        k = self.candidates
        order = np.lexsort((-target, ~top))  # the teacher's best bin first, then by score
        if order.size > k:
            rest = self.rng.choice(order[k // 2 :], size=k - k // 2, replace=False)
            order = np.concatenate([order[: k // 2], rest])
        n = order.size
        nodes = np.zeros((k, node_x.shape[1]), dtype=np.float32)
        tgt = np.zeros(k, dtype=np.float32)
        mask = np.zeros(k, dtype=bool)
        best = np.zeros(k, dtype=bool)
        nodes[:n], tgt[:n], mask[:n], best[:n] = node_x[order], target[order], True, top[order]
        return pod_x, nodes, tgt, mask, best

    def decisions(self) -> Decisions:
        cols = list(zip(*self.rows)) or [[] for _ in range(5)]
        k, f = self.candidates, len(NODE_FEATURES)
        return Decisions(
            np.array(cols[0], dtype=np.float32).reshape(-1, len(POD_FEATURES)),
            np.array(cols[1], dtype=np.float32).reshape(-1, k, f),
            np.array(cols[2], dtype=np.float32).reshape(-1, k),
            np.array(cols[3], dtype=bool).reshape(-1, k),
            np.array(cols[4], dtype=bool).reshape(-1, k),
        )


def recording_profile(teacher: str, ctx: profiles.ProfileContext, recorder_args: dict[str, object]) -> tuple[Profile, Recorder]:
    """The teacher's profile with a recorder riding along."""
    builder = FeatureBuilder(PodTypes.from_pods(ctx.workload))
    base = profiles.make(teacher, ctx)
    recorder = Recorder(base.scores, builder, **recorder_args)  # type: ignore[arg-type]
    return Profile(base.name, base.filters, [*base.scores, (recorder, 0.0)], base.devices), recorder


def openb_episode(
    nodes: Sequence[Node], pods: Sequence[Pod], seed: int, teacher: str = "fgd", candidates: int = 64,
    on_pod: Callable[[], None] | None = None,
) -> Decisions:
    """One openb-protocol episode (to 100% arrived GPU) scheduled by ``teacher``, recorded."""
    table = NodeTable(submission.gpu_nodes(nodes))
    cluster_gpu = int(table.gpu_count.sum()) * MILLI
    profile, recorder = recording_profile(
        teacher, profiles.ProfileContext(seed, pods), {"candidates": candidates, "rng": np.random.default_rng(seed)},
    )
    scheduler = Scheduler(profile, table, seed)
    arrived = 0
    for pod in submission.workload(pods, seed, cluster_gpu):
        scheduler.schedule(pod, explain=False)
        arrived += pod.gpu.total_milli
        if on_pod is not None:
            on_pod()
        if arrived >= cluster_gpu:
            break
    return recorder.decisions()


def dlrm_episode(
    nodes: Sequence[Node], instances: Sequence[Instance], start: float, teacher: str = "kube-default",
    candidates: int = 64, every: int = 4, seed: int = 0,
) -> Decisions:
    """Replay DLRM ``instances`` from ``start`` (those alive then placed first) with ``teacher``, recording every ``every``-th decision."""
    shifted, _ = evaluating.window(instances, start)
    replay = evaluating.WindowReplay(nodes, shifted, teacher, seed)
    ctx = profiles.ProfileContext(seed, [i.pod for i in shifted])
    profile, recorder = recording_profile(teacher, ctx, {"candidates": candidates, "rng": np.random.default_rng(seed), "every": every})
    replay.scheduler.profile = profile
    replay.run()
    return recorder.decisions()
