"""FGD's fragmentation drop for every candidate node as two table lookups per decision, not a recount.

Same quantity as :class:`fedcore.scheduling.fragmentation.Fragmentation` (tests prove it), but
arranged for the learned policy's hot path. Three facts make it cheap:

* Fragmentation depends on a node's GPU devices only through their free amounts as a multiset,
  so each row maps to a *device state* (its free milli per device, sorted) and a fleet has few
  distinct states: hundreds, against thousands of rows. Values are computed per state, once.
* It depends on the node's free CPU only through *which* typical pod types still fit it. With
  the types sorted by CPU that set is a prefix, numbered by ``searchsorted(cpu_sorted, cpu_left)``.
* So for a GPU request shape the lowest fragmentation after placement over its device choices is
  a (CPU bracket, device state) table: a decision gathers one value per row. A placement changes
  one row, which can add at most one new state, computed at once for every request shape of the
  workload in one vectorised batch (measured: cheaper per decision than extending each shape's
  table lazily when next asked for, which costs a call nearly every decision).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes

GpuKey = tuple[int, int]
"""A GPU request shape: (milli per device, device count); (0, 0) for CPU-only pods."""
CPU_ONLY: GpuKey = (0, 0)
COMPACT_AT = 64
"""States kept (beyond 4 per row) before those no row holds any more are dropped: a long replay
visits many, and an edge agent's one-row table makes a new one at every placement."""


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
        self._shapes: set[GpuKey] = {CPU_ONLY}
        amounts = np.arange(-1, MILLI + 1)[:, None]
        self._q3_of = np.where((amounts >= 0) & (amounts < self.shares), amounts, 0)
        self._fits_of = (amounts >= self.shares).astype(np.int64)
        self._table: NodeTable | None = None

    @staticmethod
    def key(pod: Pod) -> GpuKey:
        return (pod.gpu.milli_each, pod.gpu.count) if pod.gpu.count else CPU_ONLY

    # -- the maths (any number of device states at once) ------------------------------
    def _per_device(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per device and share: free milli that is a fragment for that share (0 <= free < share), and whether the share fits.

        Read from tables over every free amount (-1 = no device or a share that does not fit, .. 1000):
        one gather each instead of four comparisons and a select.
        """
        index = np.maximum(free, -1) + 1
        return self._q3_of.take(index, axis=0), self._fits_of.take(index, axis=0)

    def _brackets(self, q3: np.ndarray, fits: np.ndarray, total: np.ndarray) -> np.ndarray:
        """Expected fragmentation per CPU bracket from per-share sums: (..., shares) x2 and (...) -> (..., brackets).

        A type counts its share's fragment where enough devices host it, all free GPU where none
        does; bracket k is the node with the k cheapest-CPU types still fitting its CPU.
        """
        hosted = fits[..., self.share_of_type] >= self.count
        frag = np.where(hosted, q3[..., self.share_of_type], total[..., None]) * self.weight
        out = np.empty(frag.shape[:-1] + (frag.shape[-1] + 1,))
        out[..., 0] = 0.0
        np.cumsum(frag, axis=-1, out=out[..., 1:])
        return out + total[..., None] * self.rest

    def _sharing(self, free: np.ndarray, milli: np.ndarray, choices: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Per-share sums after a share of each ``milli`` is taken from each device (or each of ``choices``) of each state.

        Returns q3 and fits (states, milli, choice, shares), total and valid (states, milli, choice).
        Only the chosen device changes, so the sums are the state's own with that device's terms
        swapped: no per-choice recount over every device.
        """
        q3, fits = self._per_device(free)
        chosen = free if choices is None else free[:, choices]
        after = chosen[:, None, :] - milli[None, :, None]
        q3_after, fits_after = self._per_device(after)
        old_q3, old_fits = (q3, fits) if choices is None else (q3[:, choices], fits[:, choices])
        return (
            q3.sum(axis=1)[:, None, None, :] - old_q3[:, None] + q3_after,
            fits.sum(axis=1)[:, None, None, :] - old_fits[:, None] + fits_after,
            np.broadcast_to(np.where(free > 0, free, 0).sum(axis=-1)[:, None, None] - milli[None, :, None], after.shape),
            after >= 0,
        )

    def _compute(self, free: np.ndarray) -> np.ndarray:
        """Lowest fragmentation after placing each registered shape, over its device choices: (shapes, states, brackets).

        Every choice of every shape goes through one :meth:`_brackets` call: a CPU-only pod leaves
        the devices as they are, a whole-GPU pod turns ``count`` wholly free devices to 0 (which
        ones does not matter), a sharing pod takes its share from one device.
        """
        states = free.shape[0]
        q3, fits = self._per_device(free)
        q3, fits = q3.sum(axis=1), fits.sum(axis=1)
        total = np.where(free > 0, free, 0).sum(axis=1)
        count = self._whole[None, :, None]
        # A wholly free device taken: its fragment term stays 0, it no longer fits any share.
        parts = [
            (q3[:, None], fits[:, None], total[:, None], np.ones((states, 1), dtype=bool)),
            (np.repeat(q3[:, None], count.shape[1], axis=1), fits[:, None] - count, total[:, None] - MILLI * count[..., 0],
             (free == MILLI).sum(axis=1)[:, None] >= count[..., 0]),
        ]
        devices = 0
        if self._milli.size:
            # Devices with equal free milli are equal choices: one state (the usual case) tries each amount once.
            choices = np.unique(free[0], return_index=True)[1] if states == 1 else None
            sharing = self._sharing(free, self._milli, choices)
            devices = sharing[0].shape[2]
            parts.append(tuple(a.reshape((states, -1) + a.shape[3:]) for a in sharing))
        q3_all, fits_all, total_all, valid = (np.concatenate(p, axis=1) for p in zip(*parts))
        frag = np.where(valid[..., None], self._brackets(q3_all, fits_all, total_all), np.inf)
        single = frag[:, : 1 + self._whole.size]
        if not devices:
            return single.transpose(1, 0, 2)
        shared = frag[:, 1 + self._whole.size :].reshape(states, self._milli.size, devices, -1).min(axis=2)
        return np.concatenate([single[:, :1], shared, single[:, 1:]], axis=1).transpose(1, 0, 2)

    # -- the per-table state ------------------------------------------------------------
    def _layout(self) -> None:
        """Order the registered shapes (CPU-only, sharing, whole GPUs) and compute every live state for them.

        Dead states are dropped first: every state is recomputed here, and the temporaries
        grow with their number (an agent held ~10^2 dead states and spiked by 20 MiB).
        """
        self._compact_states()
        sharing = sorted(k for k in self._shapes if k != CPU_ONLY and k[0] < MILLI)
        whole = sorted(k for k in self._shapes if k != CPU_ONLY and k[0] >= MILLI)
        self._milli = np.array([m for m, _ in sharing], dtype=np.int64)
        self._whole = np.array([c for _, c in whole], dtype=np.int64)
        self._index = {key: i for i, key in enumerate([CPU_ONLY, *sharing, *whole])}
        # (shape, state, bracket): a new state's values are one contiguous run per shape, not a scatter.
        self._values = np.empty((len(self._index), 2 * len(self._states), self.rest.size))  # grows by doubling (an edge agent's one-row table has one state)
        self._values[:, : len(self._states)] = self._compute(self._states)

    def _reset(self, table: NodeTable) -> None:
        """Map every row of a newly seen table to its device state (free milli per device, sorted) and compute them."""
        self._table, self._changes = table, table.changes
        canonical = -np.sort(-table.gpu_free, axis=1)  # largest first; absent devices (-1) last
        self._states, sid = np.unique(canonical, axis=0, return_inverse=True)
        self._sid = sid.reshape(-1).astype(np.int64)
        self._ids = {state.tobytes(): i for i, state in enumerate(self._states)}
        # CPU bracket by free CPU + 1 (a gather, several times cheaper than a binary search per row); index 0 is "negative".
        self._bracket_of = np.searchsorted(self.cpu_sorted, np.arange(-1, int(table.cpu_cap.max()) + 1), side="right").astype(np.int16)
        self._layout()

    def _sync(self, table: NodeTable) -> None:
        """Bring row -> state ids up to date with the rows the table changed (a placement: one row, at most one new state)."""
        if self._table is not table:
            self._reset(table)
            return
        rows = table.changed_since(self._changes)
        if rows.size == 0:
            return
        self._changes = table.changes
        if len(self._states) + rows.size > max(COMPACT_AT, 4 * len(self._sid)):
            self._compact()  # before new ids are handed out: compaction renumbers
        known = len(self._states)
        fresh = []
        for row in rows:
            state = np.sort(table.gpu_free[row])[::-1].copy()  # largest first, like the canonical states
            sid = self._ids.setdefault(state.tobytes(), len(self._ids))
            if sid >= known + len(fresh):
                fresh.append(state)
            self._sid[row] = sid
        if fresh:
            self._add(np.array(fresh))

    def _add(self, states: np.ndarray) -> None:
        """Append new device states and their values for every shape."""
        start, end = len(self._states), len(self._states) + len(states)
        self._states = np.concatenate([self._states, states])
        if end > self._values.shape[1]:
            grown = np.empty((self._values.shape[0], 2 * end, self._values.shape[2]))
            grown[:, :start] = self._values[:, :start]
            self._values = grown
        self._values[:, start:end] = self._compute(states)

    def _compact(self) -> None:
        """Keep only the states some row holds now, and their values, renumbered in order."""
        live = self._compact_states()
        self._values[:, : live.size] = self._values[:, live]

    def _compact_states(self) -> np.ndarray:
        """Drop the states no row holds; returns the kept states' old ids."""
        live, sid = np.unique(self._sid, return_inverse=True)
        self._states, self._sid = self._states[live], sid.reshape(-1).astype(np.int64)
        self._ids = {state.tobytes(): i for i, state in enumerate(self._states)}
        return live

    def _shape(self, key: GpuKey) -> np.ndarray:
        """The (state, bracket) table of ``key``, registering a shape never seen before."""
        index = self._index.get(key)
        if index is None:
            self._shapes.add(key)
            self._layout()
            index = self._index[key]
        return self._values[index]

    # -- what callers use -----------------------------------------------------------
    def prepare(self, table: NodeTable, pods: Iterable[Pod]) -> None:
        """Register every GPU request shape in ``pods`` and compute their tables now (once per fleet, not per decision)."""
        self._shapes |= {self.key(pod) for pod in pods}
        self._sync(table)
        if set(self._index) != self._shapes:
            self._layout()

    def _at(self, values: np.ndarray, cpu_left_plus_one: np.ndarray, sids: np.ndarray) -> np.ndarray:
        bracket = self._bracket_of.take(cpu_left_plus_one, mode="clip")
        return values.ravel().take(sids * values.shape[1] + bracket)

    def drop(self, pod: Pod, table: NodeTable, rows: np.ndarray, whole: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(before - after, after) per row in milli-GPU; the drop is FGD's score before its sigmoid; after is inf where nothing fits.

        ``whole`` says ``rows`` is every row in order, when the caller already knows.
        """
        self._sync(table)
        values = self._shape(self.key(pod))  # first: a new shape lays the tables out again (and renumbers states)
        whole = all_rows(rows, len(table)) if whole is None else whole
        sids = self._sid if whole else self._sid[rows]
        cpu = (table.cpu_cap - table.cpu_used if whole else table.cpu_cap[rows] - table.cpu_used[rows]) + 1
        before = self._at(self._shape(CPU_ONLY), cpu, sids)
        after = self._at(values, cpu - pod.cpu_milli, sids)
        return before - after, after

    def best_device(self, pod: Pod, table: NodeTable, node: int) -> int:
        """The device of ``node`` whose use by a sharing ``pod`` leaves expected fragmentation lowest (FGD's pick)."""
        self._sync(table)
        q3, fits, total, valid = self._sharing(table.gpu_free[node][None], np.array([pod.gpu.milli_each]))
        frag = np.where(valid[..., None], self._brackets(q3, fits, total), np.inf)[0, 0]
        bracket = int(self._bracket_of.take(table.cpu_free[node] - pod.cpu_milli + 1, mode="clip"))
        return int(np.argmin(frag[:, bracket]))
