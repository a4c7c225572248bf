"""The loop's fleet metric: GPU allocation of a held-out workload on the twin, scored as the agents score.

Held out: the openb pods after the first 80% (never trained on, :mod:`federated.splits`),
submitted in the openb protocol's order to 100% arrived GPU load on the first ``nodes`` GPU nodes
of the openb fleet, for two disjoint sets of seeds: the loop *judges* candidates (canary,
promotion) on seeds ``JUDGE_SEEDS_FROM..+k-1`` and *reports* every figure on seeds ``0..k-1``, so
a reported metric is never the one a model was selected on (keeping the best of noisy
candidates biases the selecting measurement upward, not an independent one).
A model is judged through the int8 ONNX runtime the agents load (the ``learned`` profile over
:class:`federated.runtime.scorer.PolicyRuntime`); a canary is judged on a *mixed* fleet, where
the canary share of nodes scores with the candidate and every other node with the current model,
in one score comparison: the fleet as it runs during a canary, which is also where one score
scale across versions matters. Heuristics run the same protocol on the same nodes and seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Profile
from fedcore.scheduling.profiles import ProfileContext
from fedcore.traces import locate, openb
from fedcore.twin import submission
from federated import splits
from federated.runtime.canary import takes_canary
from federated.runtime.plugin import LearnedScore, normalize, profile_for
from federated.runtime.scorer import PolicyRuntime

NAME = "gpu_alloc_heldout"
HIGHER_IS_BETTER = True
JUDGE_SEEDS_FROM = 100
"""First judging seed: the report seeds ``0..k-1`` stay disjoint from the judging seeds for ``k`` up to this."""


@dataclass(frozen=True, slots=True)
class HeldOut:
    """The held-out scenario: nodes, pods and seeds."""

    nodes: list[Node]
    pods: list[Pod]
    seeds: tuple[int, ...]
    types: PodTypes
    """Typical pod shapes of the training pods: what a published model's manifest carries for the agents."""

    @classmethod
    def load(cls, traces: str | None, nodes: int, seeds: int) -> HeldOut:
        folder = locate.traces_dir(traces or None)
        fleet = submission.gpu_nodes(openb.load_nodes(folder / locate.OPENB_NODES))
        pods = openb.load_pods(folder / locate.OPENB_PODS)
        train = splits.openb_train_pods(pods)
        return cls(fleet[:nodes] if nodes else fleet, pods[len(train):], tuple(range(seeds)), PodTypes.from_pods(train))

    def judging(self) -> HeldOut:
        """The same pods and nodes on the judging seeds (disjoint from this scenario's report seeds ``0..k-1``)."""
        if len(self.seeds) > JUDGE_SEEDS_FROM:
            raise ValueError(f"at most {JUDGE_SEEDS_FROM} evaluation seeds keep judging and report seeds disjoint, got {len(self.seeds)}")
        return replace(self, seeds=tuple(JUDGE_SEEDS_FROM + s for s in self.seeds))

    def describe(self) -> str:
        return (f"GPU allocation ratio at 100% arrived GPU load: held-out openb pods (last {1 - splits.TRAIN_FRACTION:.0%}, "
                f"{len(self.pods)} pods) on {len(self.nodes)} openb GPU nodes, report seeds {list(self.seeds)}, mean; "
                "models scored through the agents' int8 ONNX runtime")

    def _mean(self, profile: object) -> float:
        return float(np.mean([submission.run(self.nodes, self.pods, profile, seed).gpu_alloc_ratio  # type: ignore[arg-type]
                              for seed in self.seeds]))

    def heuristic(self, name: str) -> float:
        return self._mean(name)

    def model(self, model_dir: Path) -> float:
        """The fleet metric with every node scoring through ``model_dir``'s int8 model."""
        return self._mean(lambda ctx: profile_for(_runtime(model_dir, ctx), ctx.workload))

    def mixed(self, current: Path, candidate: Path, share: float, weight: float = 1.0) -> float:
        """The fleet metric while a ``share`` of nodes (spread evenly) runs ``candidate`` on the ``weight`` share of
        decisions :func:`takes_canary` routes to it, and ``current`` everywhere else."""
        canary = np.zeros(len(self.nodes), dtype=bool)
        count = max(1, round(share * len(self.nodes)))
        canary[np.linspace(0, len(self.nodes) - 1, count).round().astype(int)] = True
        return self._mean(lambda ctx: _mixed_profile(_runtime(current, ctx), _runtime(candidate, ctx), canary, weight, ctx))


def _runtime(model_dir: Path, ctx: ProfileContext) -> PolicyRuntime:
    return PolicyRuntime(model_dir, "int8", PodTypes.from_pods(ctx.workload))


class _MixedScore(LearnedScore):
    """Canary rows score the pods :func:`takes_canary` routes to ``candidate`` with it, the rest with the current
    runtime; one normalisation for all."""

    def __init__(self, current: PolicyRuntime, candidate: PolicyRuntime, canary: np.ndarray, weight: float,
                 workload: list[Pod]) -> None:
        super().__init__(current, workload)
        self.candidate = candidate
        self.canary = canary
        self.weight = weight
        self._candidate_prepared: NodeTable | None = None

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if self._prepared is not table:
            self.runtime.prepare(table, self.workload)
            self._prepared = table
        if self._candidate_prepared is not table:
            self.candidate.prepare(table, self.workload)
            self._candidate_prepared = table
        current = self.runtime.scores(pod, table, rows)
        if not takes_canary(pod.uid, self.weight):
            return normalize(current)
        return normalize(np.where(self.canary[rows], self.candidate.scores(pod, table, rows), current))


def _mixed_profile(current: PolicyRuntime, candidate: PolicyRuntime, canary: np.ndarray, weight: float,
                   ctx: ProfileContext) -> Profile:
    plugin = _MixedScore(current, candidate, canary, weight, list(ctx.workload))
    base = profile_for(current, ctx.workload)
    return Profile("learned-canary", base.filters, [(plugin, 1.0)], devices=plugin)
