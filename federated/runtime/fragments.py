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

    prefix: np.ndarray  # (rows, choices, types+1): sum over the k cheapest-CPU types of w * (hosted ? q3 : total)
    total: np.ndarray  # (rows, choices): free milli-GPU left after the placement
    valid: np.ndarray  # (rows, choices): the device choice fits
    seen: np.ndarray  # (rows, devices): the device state the sums were computed from


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

    def _entry(self, key: GpuKey, table: NodeTable) -> _Entry:
        if self._table is not table:
            self._table, self._cache = table, {}
        entry = self._cache.get(key)
        free = table.gpu_free
        if entry is None:
            rows = np.arange(len(table))
        else:
            rows = np.flatnonzero((entry.seen != free).any(axis=1))
            if rows.size == 0:
                return entry
        after, valid = self._after_states(key, free[rows])
        prefix = self._sums(after)
        total = np.where(after > 0, after, 0).sum(axis=-1)
        if entry is None:
            entry = self._cache[key] = _Entry(prefix, total, valid, free.copy())
        else:
            entry.prefix[rows], entry.total[rows], entry.valid[rows] = prefix, total, valid
            entry.seen[rows] = free[rows]
        return entry

    def _frag(self, entry: _Entry, rows: np.ndarray, cpu_left: np.ndarray) -> np.ndarray:
        """Expected fragmentation per (row, choice) with ``cpu_left`` CPU free on each row."""
        k = np.searchsorted(self.cpu_sorted, cpu_left, side="right")
        choices = np.arange(entry.prefix.shape[1])
        prefix = entry.prefix[rows[:, None], choices, k[:, None]]  # gathers rows x choices, never copies the type axis
        return prefix + entry.total[rows] * self.rest[k][:, None]

    def before(self, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Expected fragmentation of each row as it stands."""
        return self._frag(self._entry((0, 0), table), rows, table.cpu_free[rows])[:, 0]

    def after(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Lowest expected fragmentation over the device choices of placing ``pod`` on each row (inf: no fit)."""
        entry = self._entry(self.key(pod), table)
        frag = self._frag(entry, rows, table.cpu_free[rows] - pod.cpu_milli)
        return np.where(entry.valid[rows], frag, np.inf).min(axis=1)

    def drop(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(before - after, after) per row in milli-GPU; the drop is FGD's score before its sigmoid."""
        after = self.after(pod, table, rows)
        return self.before(table, rows) - after, after

    def best_device(self, pod: Pod, table: NodeTable, node: int) -> int:
        """The device of ``node`` whose use by a sharing ``pod`` leaves expected fragmentation lowest (FGD's pick)."""
        entry = self._entry(self.key(pod), table)
        row = np.array([node])
        frag = np.where(entry.valid[row], self._frag(entry, row, table.cpu_free[row] - pod.cpu_milli), np.inf)[0]
        return int(np.argmin(frag))
