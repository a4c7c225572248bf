"""Extension points (filter, score, device pick), profiles, and the scheduling cycle that runs them.

Plugins see every node at once: a filter returns a boolean mask, a score returns a float
array for the feasible rows. Scores are truncated to integers 0-100 and weighted; ties go
to a fixed node order, never to a fresh random pick per pod: either drawn once per run
from the seed, or (``by_name``) the smallest node name, as the published openb simulator's
``selectHost`` does.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedcore.nodetable import NodeTable, Placement
from fedcore.pods import Pod


class Code(enum.Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True, slots=True)
class Status:
    """Outcome of a scheduling attempt; ``reasons`` counts, per filter, the nodes it rejected."""

    code: Code
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    def message(self, nodes: int) -> str:
        parts = ", ".join(f"{count} {name}" for name, count in sorted(self.reasons.items()))
        return f"0/{nodes} nodes are available: {parts}" if parts else "scheduled"


@dataclass(frozen=True, slots=True)
class Decision:
    """A scheduling result: ``placement`` is None exactly when the status is unschedulable."""

    status: Status
    placement: Placement | None = None
    score: float = 0.0
    seconds: float = 0.0


class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        """Boolean mask over all nodes: True where the pod may run."""
        ...


class ScorePlugin(Protocol):
    name: str

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Scores in 0-100 (higher is better) for the feasible node ``rows``."""
        ...


class DevicePicker(Protocol):
    def pick(self, pod: Pod, table: NodeTable, node: int) -> tuple[int, ...]:
        """Which GPU devices of the chosen node the pod takes."""
        ...


class BestFitDevices:
    """Default device choice: the fullest device that still fits a share; whole GPUs in index order."""

    def pick(self, pod: Pod, table: NodeTable, node: int) -> tuple[int, ...]:
        return table.pick_gpus(pod, node)


class RandomDevices:
    """The published Random policy's device choice: a uniform pick among devices that fit a share; whole GPUs in index order."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed + 1)

    def pick(self, pod: Pod, table: NodeTable, node: int) -> tuple[int, ...]:
        if not pod.gpu.is_sharing:
            return table.pick_gpus(pod, node)
        fits = np.flatnonzero(table.gpu_free[node] >= pod.gpu.milli_each)
        return (int(fits[self.rng.integers(fits.size)]),)


@dataclass(frozen=True, slots=True)
class Waiting:
    """Waiting pods that fit one node as it is now (oldest first): their requests and how long each has waited."""

    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    gpus: np.ndarray
    gpu_milli: np.ndarray
    """Per GPU (1000 = a whole GPU)."""
    waited_s: np.ndarray


class QueueSortPlugin(Protocol):
    """Which waiting pod a node that freed room serves first (Kubernetes' QueueSort extension point)."""

    name: str

    def priority(self, waiting: Waiting, table: NodeTable, node: int) -> np.ndarray:
        """Per waiting pod: higher goes first; equal priorities keep the oldest first."""
        ...


class OldestFirst:
    """Kubernetes' default queue order (PrioritySort, all pods at one priority): the longest-waiting pod first."""

    name = "oldest-first"

    def priority(self, waiting: Waiting, table: NodeTable, node: int) -> np.ndarray:
        return np.zeros(waiting.waited_s.size)


@dataclass(slots=True)
class Profile:
    """A named set of plugins with score weights, as in a KubeSchedulerConfiguration profile."""

    name: str
    filters: Sequence[FilterPlugin]
    scores: Sequence[tuple[ScorePlugin, float]]
    devices: DevicePicker = field(default_factory=BestFitDevices)
    queue: QueueSortPlugin = field(default_factory=OldestFirst)


def rank(profile: Profile, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
    """A profile's total weighted integer score of each feasible row: what a scheduling cycle compares, and what an
    edge agent placing with this profile claims its own node with (one row), so both read the same number."""
    total = np.zeros(rows.size, dtype=np.float64)
    for plugin, weight in profile.scores:
        total += weight * np.floor(np.clip(plugin.score(pod, table, rows), 0.0, 100.0))
    return total


class Scheduler:
    """Runs one scheduling cycle per pod: filter, score, pick the best row, choose devices, reserve."""

    def __init__(self, profile: Profile, table: NodeTable, seed: int = 0, by_name: bool = False) -> None:
        self.profile = profile
        self.table = table
        if by_name:
            order = np.array(sorted(range(len(table)), key=lambda i: table.nodes[i].name), dtype=np.int64)
        else:
            order = np.random.default_rng(seed).permutation(len(table))
        # rank[i] is node i's place in this run's fixed tie-break order (lower wins).
        self.tie_rank = np.empty(len(table), dtype=np.int64)
        self.tie_rank[order] = np.arange(len(table))

    def feasible(self, pod: Pod) -> np.ndarray:
        mask = self.table.alive.copy()
        for plugin in self.profile.filters:
            mask &= plugin.filter(pod, self.table)
        return mask

    def unschedulable(self, pod: Pod) -> Status:
        """Explain a failure: for each filter, how many live nodes it rejects on its own."""
        alive = self.table.alive
        reasons = {"NodeDown": int((~alive).sum())} if not alive.all() else {}
        for plugin in self.profile.filters:
            rejected = int((alive & ~plugin.filter(pod, self.table)).sum())
            if rejected:
                reasons[plugin.name] = rejected
        return Status(Code.UNSCHEDULABLE, reasons)

    def rank(self, pod: Pod, rows: np.ndarray) -> np.ndarray:
        """Total weighted integer score of each feasible row."""
        return rank(self.profile, pod, self.table, rows)

    def select(self, pod: Pod) -> tuple[int, float] | None:
        """The chosen node row and its score, or None when no node is feasible. Does not reserve."""
        rows = np.flatnonzero(self.feasible(pod))
        if rows.size == 0:
            return None
        total = self.rank(pod, rows)
        best = np.flatnonzero(total == total.max())
        winner = best[np.argmin(self.tie_rank[rows[best]])]
        return int(rows[winner]), float(total[winner])

    def schedule(self, pod: Pod, explain: bool = True) -> Decision:
        """Place ``pod`` and reserve its resources, or return why it cannot be placed.

        ``explain=False`` skips counting per-filter reasons (a retry loop that only needs yes/no).
        """
        start = time.perf_counter()
        chosen = self.select(pod)
        if chosen is None:
            status = self.unschedulable(pod) if explain else Status(Code.UNSCHEDULABLE)
            return Decision(status, None, 0.0, time.perf_counter() - start)
        node, score = chosen
        placement = self.table.allocate(pod, node, self.profile.devices.pick(pod, self.table, node))
        return Decision(Status(Code.SUCCESS), placement, score, time.perf_counter() - start)
