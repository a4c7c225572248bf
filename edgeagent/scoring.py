"""How an agent scores its own node for a pod: the scorer seam and the heuristic.

A :class:`Scorer` scores the agent's one-row node table for a pod; the learned policy
(:mod:`edgeagent.policy`, federated's runtime) and the heuristic fallback are
interchangeable. An :class:`Assessment` carries the score and, for the learned policy, the
exact model inputs that produced it: what the experience log records for training
(:mod:`federated.runtime.experience`). The heuristic is best fit (fuller after placement is
better, busy nodes a little worse); the same function, vectorised (:func:`estimate`), lets
an agent estimate its peers' scores from their gossiped node states and hold back when it
is clearly not among the best candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedapi.workloadcontext import WorkloadContext
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI, GpuRequest, Resources
from fedcore.scheduling.framework import OldestFirst, QueueSortPlugin

LOAD_PENALTY = 10.0


@dataclass(frozen=True, slots=True)
class Assessment:
    """A score and, when a model produced it, the model's inputs and the node's fragmentation before the claim."""

    score: float
    pod_x: np.ndarray | None = None
    node_x: np.ndarray | None = None
    frag_before: float = 0.0


class Scorer(Protocol):
    """Scores the agent's own node (row 0 of its table) for a pod; higher is better, finite."""

    @property
    def version(self) -> str: ...

    @property
    def artifact(self) -> str:
        """The model artifact's name (its registry version), empty for the heuristic."""
        ...

    @property
    def canary(self) -> str:
        """The artifact on trial for a share of the decisions (a weighted canary), empty when none."""
        ...

    def score(self, pod: Pod, table: NodeTable) -> float: ...

    def assess(self, pod: Pod, table: NodeTable) -> Assessment: ...

    def devices(self, pod: Pod, table: NodeTable) -> tuple[int, ...] | None:
        """The GPU devices the pod should take on our node (None: the node table's best fit)."""
        ...

    def fragmentation(self, table: NodeTable) -> float:
        """Expected GPU fragmentation of our node as it stands (milli-GPU; 0 where the scorer has no pod types)."""
        ...

    def set_context(self, context: WorkloadContext) -> None:
        """Score for this workload profile (the control plane's workload context for our cluster) from now on."""
        ...

    @property
    def queue(self) -> QueueSortPlugin:
        """Which pending pod to claim next when several are due (the model artifact's order; oldest first without one)."""
        ...


def device_summary(table: NodeTable, row: int = 0) -> tuple[int, int]:
    """(wholly free devices, most milli free on one device) of a node: what :func:`estimate` needs of its GPUs."""
    devices = table.gpu_free[row, : int(table.gpu_count[row])]
    return int((devices == MILLI).sum()), int(devices.max(initial=0))


def estimate(request: Resources, free: np.ndarray, capacity: np.ndarray, load: np.ndarray,
             gpu: GpuRequest | None = None, devices: np.ndarray | None = None) -> np.ndarray:
    """Heuristic scores of many nodes at once (rows of free/capacity as (cpu, mem, disk, gpu)); -inf where it does not fit.

    ``devices`` rows (wholly free devices, most milli free on one device; -1 = unknown) refine
    the GPU fit for a pod of shape ``gpu``: without them a node whose free milli is spread
    thin looks like the best fit for a whole GPU it cannot give.
    """
    req = np.array(request.as_tuple(), dtype=np.float64)
    after = free - req
    fits = (after >= 0).all(axis=1)
    if gpu is not None and gpu.count and devices is not None:
        column, need = (1, gpu.milli_each) if gpu.milli_each < MILLI else (0, gpu.count)
        fits &= (devices[:, column] < 0) | (devices[:, column] >= need)
    dims = [0, 1, 3] if request.gpu_milli else [0, 1]
    cap = np.maximum(capacity[:, dims], 1.0)
    fullness = 1.0 - (after[:, dims] / cap).mean(axis=1)
    scores = 100.0 * fullness - LOAD_PENALTY * load
    if not request.gpu_milli:  # keep GPU nodes for GPU pods
        scores -= 20.0 * (capacity[:, 3] > 0)
    return np.where(fits, scores, -np.inf)


class HeuristicScorer:
    """Best fit (:func:`estimate` on our own row): the fallback when no policy model loads (armv7: always)."""

    version = "heuristic"
    artifact = ""
    canary = ""
    queue: QueueSortPlugin = OldestFirst()

    def __init__(self, load: Callable[[], float] = lambda: 0.0) -> None:
        self.load = load

    def assess(self, pod: Pod, table: NodeTable) -> Assessment:
        return Assessment(self.score(pod, table))

    def devices(self, pod: Pod, table: NodeTable) -> tuple[int, ...] | None:
        return None

    def fragmentation(self, table: NodeTable) -> float:
        return 0.0

    def set_context(self, context: WorkloadContext) -> None:
        """Best fit reads no workload context."""

    def score(self, pod: Pod, table: NodeTable) -> float:
        free = np.array([[table.cpu_free[0], table.mem_free[0], 0, table.gpu_free_total()[0]]], dtype=np.float64)
        cap = np.array([[table.cpu_cap[0], table.mem_cap[0], 0, table.gpu_count[0] * 1000]], dtype=np.float64)
        request = Resources(pod.cpu_milli, pod.memory_mib, 0, pod.gpu.total_milli)
        return float(estimate(request, free, cap, np.array([self.load()]))[0])
