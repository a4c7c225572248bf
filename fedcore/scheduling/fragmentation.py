"""GPU fragmentation as in FGD ("Beware of Fragmentation", ATC '23), vectorised: the reference definition.

The fragmentation of a node for a pod type is the free GPU that type could not use: all
free GPU if the type cannot be hosted at all (too little CPU, too few fitting devices,
or a CPU-only type), else the free milli on devices with less free than the type needs.
A node's fragmentation is the expectation over the workload's typical pod types; FGD
places a pod where that expectation drops most.

Only the GPU part depends on the device chosen, and it is additive per device, so the
fragmentation after every possible device choice is computed from per-device deltas in
one (rows x devices x distinct-shares) array rather than by re-evaluating each choice.
The FGD score plugin reads the same quantity from a per-fleet cache (:mod:`fedcore.scheduling.fragments`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI


SLOT_SHAPES = 3
"""How many of the workload's most common CPU-only (CPU, memory) shapes :attr:`PodTypes.slots` keeps."""


def _no_slots() -> np.ndarray:
    return np.zeros((0, 2), dtype=np.int64)


@dataclass(frozen=True, slots=True)
class PodTypes:
    """The most frequent (cpu, gpu milli per device, device count) pod shapes and their normalised weights.

    ``slots`` holds the most common CPU-only shapes as (cpu milli, memory MiB) rows: large CPU pods
    need a node with that much left on both, which the GPU-only fragmentation above cannot see.
    ``pinned`` is the share of the workload's GPU request (milli-GPU) made by pods that name GPU
    models (openb's ``gpu_spec``): only nodes of those models can take them, which no shape says.
    ``cpu_pressure`` is the workload's CPU request per requested GPU against the fleet's CPU per GPU
    (0 when no fleet is given): near 1 or above, the CPU that arrives with the GPU request is all the
    fleet has, and CPU, not GPU shape, decides how much GPU can be used.
    """

    cpu: np.ndarray
    milli: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    slots: np.ndarray = field(default_factory=_no_slots)
    pinned: float = 0.0
    cpu_pressure: float = 0.0

    @classmethod
    def from_pods(cls, pods: Iterable[Pod], coverage: float = 0.95, fleet: Iterable[Node] = ()) -> PodTypes:
        """Types by decreasing frequency until ``coverage`` of the pods is covered, weights renormalised;
        ``fleet`` (the nodes the workload runs on) gives ``cpu_pressure``."""
        pods = list(pods)
        counts = Counter((p.cpu_milli, p.gpu.milli_each, p.gpu.count) for p in pods)
        total = sum(counts.values())
        if total == 0:
            raise ValueError("no pods to learn typical pod types from")
        chosen: list[tuple[tuple[int, int, int], int]] = []
        covered = 0
        for shape, n in counts.most_common():
            chosen.append((shape, n))
            covered += n
            if covered >= coverage * total:
                break
        arr = np.array([shape for shape, _ in chosen], dtype=np.int64)
        weight = np.array([n for _, n in chosen], dtype=np.float64)
        cpu_only = Counter((p.cpu_milli, p.memory_mib) for p in pods if p.gpu.count == 0)
        slots = np.array([shape for shape, _ in cpu_only.most_common(SLOT_SHAPES)], dtype=np.int64).reshape(-1, 2)
        gpu = sum(p.gpu.total_milli for p in pods)
        pinned = sum(p.gpu.total_milli for p in pods if p.gpu_model) / gpu if gpu else 0.0
        return cls(arr[:, 0], arr[:, 1], arr[:, 2], weight / weight.sum(), slots, pinned, cpu_pressure(pods, fleet))


def cpu_pressure(pods: Sequence[Pod], fleet: Iterable[Node]) -> float:
    """CPU per GPU of ``pods``' request over CPU per GPU of ``fleet``'s GPU nodes; 0 without GPUs on either side."""
    gpu_nodes = [n for n in fleet if n.gpus]
    gpu = sum(p.gpu.total_milli for p in pods)
    fleet_gpu = sum(n.gpus for n in gpu_nodes) * MILLI
    if not gpu or not fleet_gpu:
        return 0.0
    return (sum(p.cpu_milli for p in pods) / gpu) / (sum(n.cpu_milli for n in gpu_nodes) / fleet_gpu)


class Fragmentation:
    """Expected GPU fragmentation of node states under a set of pod types."""

    def __init__(self, types: PodTypes) -> None:
        self.types = types
        gpu = types.milli > 0
        self.cpu_only_weight = float(types.weight[~gpu].sum())
        self.gpu_weight = float(types.weight[gpu].sum())
        self.shares, share_of_type = np.unique(types.milli[gpu], return_inverse=True)
        # Hostable weight per share m, by fitting-device count f and CPU bracket c:
        # table[m, f, c] = sum of weights of GPU types with share m, count <= f and cpu <= thresholds[c - 1].
        self.thresholds = np.unique(types.cpu[gpu])
        max_count = int(types.count[gpu].max(initial=1))
        self.max_fits = max_count
        table = np.zeros((self.shares.size, max_count + 1, self.thresholds.size + 1))
        for m, count, cpu, w in zip(share_of_type, types.count[gpu], types.cpu[gpu], types.weight[gpu]):
            c = int(np.searchsorted(self.thresholds, cpu)) + 1
            table[m, count:, c:] += w
        self.hostable = table
        self.share_rows = np.arange(self.shares.size)

    def _h(self, free: np.ndarray) -> np.ndarray:
        """Per device and distinct share m: free milli counted as fragment (0 <= free < m) -> (..., M)."""
        f = free[..., None]
        return np.where((f >= 0) & (f < self.shares), f, 0)

    def _ge(self, free: np.ndarray) -> np.ndarray:
        return (free[..., None] >= self.shares).astype(np.int64)

    def _expect(self, cpu_free: np.ndarray, total: np.ndarray, q3: np.ndarray, fits: np.ndarray) -> np.ndarray:
        """Combine per-share sums into the expected fragmentation; leading axes broadcast.

        Every type counts all free GPU as fragment, except the hostable ones, which count only
        their share's q3 sum: E = total * w_all + sum_m hostable_m * (q3_m - total).
        """
        bracket = np.searchsorted(self.thresholds, cpu_free, side="right")[..., None]
        host = self.hostable[self.share_rows, np.clip(fits, 0, self.max_fits), bracket]
        return total * (self.gpu_weight + self.cpu_only_weight) + (host * (q3 - total[..., None])).sum(axis=-1)

    def of_rows(self, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Expected fragmentation (milli-GPU) of each row as it stands."""
        free = table.gpu_free[rows]
        total = np.where(free > 0, free, 0).sum(axis=1)
        return self._expect(table.cpu_free[rows], total, self._h(free).sum(axis=1), self._ge(free).sum(axis=1))

    def after(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Fragmentation after placing ``pod`` on each row, per device choice: (rows, devices), inf where it does not fit.

        For a CPU-only or whole-GPU pod every fitting choice is equivalent, so column 0 holds it.
        """
        free = table.gpu_free[rows]
        total = np.where(free > 0, free, 0).sum(axis=1) - pod.gpu.total_milli
        cpu_after = table.cpu_free[rows] - pod.cpu_milli
        h = self._h(free)
        ge = self._ge(free)
        q3 = h.sum(axis=1)
        fits = ge.sum(axis=1)
        out = np.full(free.shape, np.inf)
        if not pod.gpu.is_sharing:
            # Whole GPUs go from MILLI to 0: neither value is ever a fragment, and each stops fitting every share.
            out[:, 0] = self._expect(cpu_after, total, q3, fits - pod.gpu.count)
            return out
        m = pod.gpu.milli_each
        left = free - m
        q3_choice = q3[:, None, :] - h + self._h(left)
        fits_choice = fits[:, None, :] - ge + self._ge(left)
        frag = self._expect(cpu_after[:, None], total[:, None], q3_choice, fits_choice)
        return np.where(free >= m, frag, np.inf)


def fleet_fragmentation(frag: Fragmentation, table: NodeTable) -> float:
    """Share of the fleet's free GPU that is fragment for the typical pod types (0-1)."""
    rows = np.flatnonzero(table.gpu_count > 0)
    free = float(table.gpu_free_total()[rows].sum())
    return float(frag.of_rows(table, rows).sum()) / free if free else 0.0
