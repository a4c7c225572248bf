"""FGD's fragmentation drop for every candidate node, cached so a decision costs a gather, not a recount.

Same quantity as :class:`fedcore.scheduling.fragmentation.Fragmentation` (tests prove it), but
arranged for the learned policy's hot path. Two facts make it cheap:

* The fragmentation after a placement depends on the pod's CPU only through *which* typical
  pod types still fit the node's CPU. With the types sorted by CPU that set is a prefix, so
  the per-type sum becomes a cumulative sum indexed by ``searchsorted(cpu_sorted, cpu_left)``.
* Everything else depends only on the node's GPU devices and on the pod's GPU request. Those
  cumulative sums are cached per GPU request shape and recomputed only for rows whose devices
  changed since (a placement touches one row), so a warm decision is a few vectorised gathers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes

GpuKey = tuple[int, int]
"""A GPU request shape: (milli per device, device count); (0, 0) for CPU-only pods."""


@dataclass(slots=True)
class _Entry:
    """Cached after-placement sums for one GPU request shape over every row of a table."""

    # Choice-major layouts, so the per-decision gather and the min over choices run along whole rows.
    prefix: np.ndarray  # (choices, types+1, rows): sum over the k cheapest-CPU types of w * (hosted ? q3 : total)
    total: np.ndarray  # (choices, rows): free milli-GPU left after the placement
    valid: np.ndarray  # (choices, rows): the device choice fits
    seen: np.ndarray  # (rows, devices): the device state the sums were computed from


def changed_rows(now: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Rows of two same-shape arrays that differ (a flat compare: far cheaper than ``any(axis=1)``)."""
    flat = np.flatnonzero(now.ravel() != seen.ravel())
    if flat.size <= 1 or now.ndim == 1:
        return flat // (now.size // now.shape[0])
    return np.unique(flat // now.shape[1])


def all_rows(rows: np.ndarray, n: int) -> bool:
    """True when ``rows`` is exactly 0..n-1 in order, so per-row arrays can be used without a gather."""
    return rows.size == n and bool(rows[0] == 0) and bool(rows[-1] == n - 1) and bool((rows[1:] > rows[:-1]).all())


class FragmentDrops:
    """Expected-fragmentation drop (before - best after, milli-GPU) per candidate row, for one node table."""

    def __init__(self, types: PodTypes) -> None:
        gpu = types.milli > 0
        order = np.argsort(types.cpu[gpu], kind="stable")
        self.cpu_sorted = types.cpu[gpu][order]
        self.count = types.count[gpu][order]
        weight = types.weight[gpu][order]
        self.shares, self.share_of_type = np.unique(types.milli[gpu][order], return_inverse=True)
        self.weight = weight
        # Weight of types that can never use the node's GPU given k types fit on CPU: CPU-only types plus types k.. .
        self.rest = float(types.weight[~gpu].sum()) + weight.sum() - np.concatenate([[0.0], np.cumsum(weight)])
        self._table: NodeTable | None = None
        self._cache: dict[GpuKey, _Entry] = {}
        self._before: tuple[_Entry, np.ndarray, np.ndarray] | None = None  # (entry it came from, cpu_free seen, values)

    @staticmethod
    def key(pod: Pod) -> GpuKey:
        return (pod.gpu.milli_each, pod.gpu.count) if pod.gpu.count else (0, 0)

    def _sums(self, free: np.ndarray) -> np.ndarray:
        """Prefix sums over CPU-sorted types for device states ``free`` (..., devices) -> (..., types+1)."""
        total = np.where(free > 0, free, 0).sum(axis=-1)
        f = free[..., None]
        q3 = np.where((f >= 0) & (f < self.shares), f, 0).sum(axis=-2)
        fits = (f >= self.shares).sum(axis=-2)
        hosted = fits[..., self.share_of_type] >= self.count
        frag = np.where(hosted, q3[..., self.share_of_type], total[..., None]) * self.weight
        out = np.zeros(frag.shape[:-1] + (frag.shape[-1] + 1,))
        np.cumsum(frag, axis=-1, out=out[..., 1:])
        return out

    def _after_states(self, key: GpuKey, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Device states after the placement for every choice: (rows, choices, devices) and which choices fit."""
        milli, count = key
        if count == 0:
            return free[:, None, :], np.ones((free.shape[0], 1), dtype=bool)
        if milli < MILLI:
            eye = np.eye(free.shape[1], dtype=free.dtype) * milli
            return free[:, None, :] - eye, free >= milli
        # Whole GPUs: which free devices are taken does not matter, take the first ``count``.
        whole = free == MILLI
        take = whole & (np.cumsum(whole, axis=1) <= count)
        return np.where(take, 0, free)[:, None, :], (whole.sum(axis=1) >= count)[:, None]

    def _entry(self, key: GpuKey, table: NodeTable) -> tuple[_Entry, np.ndarray]:
        """The cache entry for ``key``, brought up to date; also returns the rows that were recomputed."""
        if self._table is not table:
            self._table, self._cache, self._before = table, {}, None
        entry = self._cache.get(key)
        free = table.gpu_free
        if entry is None:
            rows = np.arange(len(table))
        else:
            rows = changed_rows(free, entry.seen)
            if rows.size == 0:
                return entry, rows
        after, valid = self._after_states(key, free[rows])
        prefix = self._sums(after).transpose(1, 2, 0)
        total = np.where(after > 0, after, 0).sum(axis=-1).T
        if entry is None:
            entry = self._cache[key] = _Entry(np.ascontiguousarray(prefix), np.ascontiguousarray(total), np.ascontiguousarray(valid.T), free.copy())
        else:
            entry.prefix[:, :, rows], entry.total[:, rows], entry.valid[:, rows] = prefix, total, valid.T
            entry.seen[rows] = free[rows]
        return entry, rows

    def prepare(self, table: NodeTable, pods: Iterable[Pod]) -> None:
        """Warm the caches for every GPU request shape in ``pods`` (once per fleet, not per decision)."""
        for key in sorted({self.key(pod) for pod in pods}):
            self._entry(key, table)
        self.before(table, np.arange(len(table)))

    def _frag(self, entry: _Entry, rows: np.ndarray, cpu_left: np.ndarray) -> np.ndarray:
        """Expected fragmentation per (choice, row) with ``cpu_left`` CPU free on each row."""
        k = np.searchsorted(self.cpu_sorted, cpu_left, side="right")
        choices, depth, width = entry.prefix.shape
        flat = (np.arange(choices) * (depth * width))[:, None] + (k * width + rows)[None, :]
        prefix = entry.prefix.ravel().take(flat)  # gathers choices x rows, never copies the type axis
        return prefix + entry.total[:, rows] * self.rest[k]

    def before(self, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Expected fragmentation of each row as it stands (kept per row; recomputed where GPU or CPU use changed)."""
        entry, fresh = self._entry((0, 0), table)
        cpu = table.cpu_free
        if self._before is None or self._before[0] is not entry:
            every = np.arange(len(table))
            self._before = (entry, cpu.copy(), self._frag(entry, every, cpu)[0])
        else:
            _, seen, values = self._before
            moved = changed_rows(cpu, seen)
            changed = fresh if not moved.size else np.union1d(fresh, moved)
            if changed.size:
                values[changed] = self._frag(entry, changed, cpu[changed])[0]
                seen[changed] = cpu[changed]
        return self._before[2][rows]

    def after(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Lowest expected fragmentation over the device choices of placing ``pod`` on each row (inf: no fit)."""
        entry, _ = self._entry(self.key(pod), table)
        frag = self._frag(entry, rows, table.cpu_free[rows] - pod.cpu_milli)
        valid = entry.valid if all_rows(rows, entry.valid.shape[1]) else entry.valid[:, rows]
        if frag.shape[0] == 1:
            return np.where(valid[0], frag[0], np.inf)
        return np.where(valid, frag, np.inf).min(axis=0)

    def drop(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(before - after, after) per row in milli-GPU; the drop is FGD's score before its sigmoid."""
        after = self.after(pod, table, rows)
        return self.before(table, rows) - after, after

    def best_device(self, pod: Pod, table: NodeTable, node: int) -> int:
        """The device of ``node`` whose use by a sharing ``pod`` leaves expected fragmentation lowest (FGD's pick)."""
        entry, _ = self._entry(self.key(pod), table)
        row = np.array([node])
        frag = np.where(entry.valid[:, row], self._frag(entry, row, table.cpu_free[row] - pod.cpu_milli), np.inf)[:, 0]
        return int(np.argmin(frag))
