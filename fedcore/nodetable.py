"""The fleet's live state as a struct of numpy arrays, so filters and scores run over all nodes at once.

One row per node; GPUs are a (nodes x max_gpus) matrix of free milli per device, with -1
marking devices a node does not have. Allocation and release are the only mutators of usage
and they check every dimension, so a node or a GPU device can never be over-committed. Every
mutator stamps the rows it changed, so caches built over the table (the learned policy's
features) find what changed since they last looked without comparing whole arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedcore.nodes import Arch, Node, TaintEffect
from fedcore.pods import Pod
from fedcore.resources import MILLI

NO_DEVICE = -1
UNTRACKED = np.iinfo(np.int64).max // 4
"""Capacity used for a dimension a node does not report (e.g. disk in the openb node list)."""


class OvercommitError(RuntimeError):
    """An allocation would exceed a node's or a device's capacity: a scheduler bug, never an expected outcome."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod runs: node row and the GPU devices (with milli taken from each)."""

    node: int
    gpus: tuple[int, ...] = ()
    gpu_milli: int = 0


class NodeTable:
    """Capacities and usage of every node in a fleet, vectorised."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise ValueError("a fleet needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.nodes: list[Node] = list(nodes)
        self.index: dict[str, int] = {name: i for i, name in enumerate(names)}
        n = len(nodes)
        self.cpu_cap = np.array([x.cpu_milli for x in nodes], dtype=np.int64)
        self.mem_cap = np.array([x.memory_mib for x in nodes], dtype=np.int64)
        self.disk_cap = np.array([x.disk_mib or UNTRACKED for x in nodes], dtype=np.int64)
        self.gpu_count = np.array([x.gpus for x in nodes], dtype=np.int64)
        self.max_gpus = max(1, int(self.gpu_count.max()))
        self.gpu_free = np.full((n, self.max_gpus), NO_DEVICE, dtype=np.int64)
        for i, x in enumerate(nodes):
            self.gpu_free[i, : x.gpus] = MILLI
        self.cpu_used = np.zeros(n, dtype=np.int64)
        self.mem_used = np.zeros(n, dtype=np.int64)
        self.disk_used = np.zeros(n, dtype=np.int64)
        self.alive = np.ones(n, dtype=bool)
        self.slow = np.zeros(n, dtype=bool)
        models = sorted({x.gpu_model for x in nodes})
        self.model_codes = {m: i for i, m in enumerate(models)}
        # Category codes index other arrays: np.intp, which numpy 1.24 on 32-bit ARM requires of indices.
        self.gpu_model = np.array([self.model_codes[x.gpu_model] for x in nodes], dtype=np.intp)
        self.arch = np.array([list(Arch).index(x.arch) for x in nodes], dtype=np.intp)
        self.clusters = sorted({x.cluster for x in nodes})
        self.cluster = np.array([self.clusters.index(x.cluster) for x in nodes], dtype=np.intp)
        self.regions = sorted({x.region for x in nodes})
        self.region = np.array([self.regions.index(x.region) for x in nodes], dtype=np.intp)
        self.tainted = np.array(
            [i for i, x in enumerate(nodes) if any(t.effect != TaintEffect.PREFER_NO_SCHEDULE for t in x.taints)],
            dtype=np.int64,
        )
        self.per_workload: dict[str, np.ndarray] = {}
        self.changes = 0
        """How many row changes the table has seen; ``stamp[row]`` is the count at the row's last change."""
        self.stamp = np.zeros(n, dtype=np.int64)
        self._last: int | None = None
        """The row of the latest change when it was one row: a cache one change behind (every decision after a placement) needs no scan."""

    def __len__(self) -> int:
        return len(self.nodes)

    # -- derived views ---------------------------------------------------
    @property
    def cpu_free(self) -> np.ndarray:
        return self.cpu_cap - self.cpu_used

    @property
    def mem_free(self) -> np.ndarray:
        return self.mem_cap - self.mem_used

    @property
    def disk_free(self) -> np.ndarray:
        return self.disk_cap - self.disk_used

    def gpu_free_total(self) -> np.ndarray:
        """Free milli-GPU per node summed over its devices."""
        return np.where(self.gpu_free > 0, self.gpu_free, 0).sum(axis=1)

    def workload_count(self, workload: str) -> np.ndarray:
        counts = self.per_workload.get(workload)
        if counts is None:
            counts = self.per_workload[workload] = np.zeros(len(self), dtype=np.int64)
        return counts

    # -- mutators ----------------------------------------------------------
    def changed_since(self, changes: int) -> np.ndarray:
        """Rows changed after the table's change count was ``changes``, in order."""
        if changes >= self.changes:
            return np.empty(0, dtype=np.int64)
        if changes == self.changes - 1 and self._last is not None:
            return np.array([self._last], dtype=np.int64)
        return np.flatnonzero(self.stamp > changes)

    def _touch(self, rows: int | np.ndarray) -> None:
        self.changes += 1
        self.stamp[rows] = self.changes
        self._last = int(rows) % len(self) if isinstance(rows, (int, np.integer)) else None

    def set_slow(self, rows: np.ndarray, slow: bool) -> None:
        """Mark ``rows`` slow (degraded) or healthy again."""
        self.slow[rows] = slow
        self._touch(rows)

    def pick_gpus(self, pod: Pod, node: int) -> tuple[int, ...]:
        """Best-fit devices on ``node``: the fullest device that still fits a share, or k wholly free devices."""
        row = self.gpu_free[node]
        if pod.gpu.count == 0:
            return ()
        if pod.gpu.milli_each < MILLI:
            fits = np.flatnonzero(row >= pod.gpu.milli_each)
            if fits.size == 0:
                raise OvercommitError(f"no device on node {node} has {pod.gpu.milli_each} milli free")
            return (int(fits[np.argmin(row[fits])]),)
        whole = np.flatnonzero(row == MILLI)
        if whole.size < pod.gpu.count:
            raise OvercommitError(f"node {node} has {whole.size} free GPUs, pod wants {pod.gpu.count}")
        return tuple(int(g) for g in whole[: pod.gpu.count])

    def device_problem(self, node: int, gpus: tuple[int, ...]) -> str:
        """Why ``gpus`` cannot name devices of ``node`` ("" if they can), for binders that chose devices themselves.

        :meth:`allocate` indexes the device matrix directly, so a negative or foreign index would
        book another device and a repeat would book one device twice; count and room it checks itself.
        """
        spec = self.nodes[node]
        foreign = sorted({g for g in gpus if not 0 <= g < spec.gpus})
        if foreign:
            return f"devices {foreign} are not on node {spec.name} (it has {spec.gpus})"
        repeated = sorted({g for g in gpus if gpus.count(g) > 1})
        if repeated:
            return f"devices {repeated} are named more than once"
        return ""

    def allocate(self, pod: Pod, node: int, gpus: tuple[int, ...] | None = None) -> Placement:
        """Reserve ``pod`` on ``node`` (devices chosen best-fit unless given); raises OvercommitError if it does not fit."""
        if gpus is None:
            gpus = self.pick_gpus(pod, node)
        if len(gpus) != pod.gpu.count:
            raise OvercommitError(f"pod {pod.uid} needs {pod.gpu.count} devices, got {len(gpus)}")
        if (
            self.cpu_used[node] + pod.cpu_milli > self.cpu_cap[node]
            or self.mem_used[node] + pod.memory_mib > self.mem_cap[node]
            or self.disk_used[node] + pod.disk_mib > self.disk_cap[node]
        ):
            raise OvercommitError(f"pod {pod.uid} does not fit node {self.nodes[node].name}")
        for g in gpus:
            if self.gpu_free[node, g] < pod.gpu.milli_each:
                raise OvercommitError(f"device {g} of node {self.nodes[node].name} is too full for {pod.uid}")
        for g in gpus:
            self.gpu_free[node, g] -= pod.gpu.milli_each
        self.cpu_used[node] += pod.cpu_milli
        self.mem_used[node] += pod.memory_mib
        self.disk_used[node] += pod.disk_mib
        if pod.workload:
            self.workload_count(pod.workload)[node] += 1
        self._touch(node)
        return Placement(node, gpus, pod.gpu.milli_each)

    def release(self, pod: Pod, placement: Placement) -> None:
        """Give back what :meth:`allocate` took."""
        node = placement.node
        for g in placement.gpus:
            self.gpu_free[node, g] += placement.gpu_milli
        self.cpu_used[node] -= pod.cpu_milli
        self.mem_used[node] -= pod.memory_mib
        self.disk_used[node] -= pod.disk_mib
        if pod.workload:
            self.workload_count(pod.workload)[node] -= 1
        self._touch(node)

    # -- aggregate ratios ----------------------------------------------------
    def alloc_ratios(self) -> dict[str, float]:
        """Allocated share of the fleet's CPU, memory and GPU (0-1)."""
        gpu_cap = int(self.gpu_count.sum()) * MILLI
        gpu_used = gpu_cap - int(self.gpu_free_total().sum())
        return {
            "cpu": float(self.cpu_used.sum() / max(1, self.cpu_cap.sum())),
            "mem": float(self.mem_used.sum() / max(1, self.mem_cap.sum())),
            "gpu": gpu_used / gpu_cap if gpu_cap else 0.0,
        }
