"""FGD's fragmentation drop for every candidate node as one table lookup per decision, not a recount.

Same quantity as :class:`fedcore.scheduling.fragmentation.Fragmentation` (tests prove it), but
arranged for the learned policy's hot path. Three facts make it cheap:

* Fragmentation depends on a node's GPU devices only through their free amounts as a multiset,
  so each row maps to a *device state* (its free milli per device, sorted) and a fleet has few
  distinct states: hundreds, against thousands of rows. Values are computed per state, once.
  A used-up device (0 free) weighs exactly as no device in every sum (no fragment, fits nothing,
  no free milli, not whole), so a state keys it as absent (:func:`state_of`): a node whose GPUs
  whole pods took meets the state of a smaller or GPU-less node, not a new one (openb: 33 of the
  202 new states of the bench's 2,000-decision episode).
* It depends on the node's free CPU only through *which* typical pod types still fit it. With
  the types sorted by CPU that set is a prefix, numbered by ``searchsorted(cpu_sorted, cpu_left)``.
* So for a GPU request shape the lowest fragmentation after placement over its device choices is
  a (CPU bracket, device state) table: a decision gathers one value per row, and the value before
  placement is kept per row (it changes only with the row). A placement changes one row, which can
  add at most one new state, computed at once for every request shape of the workload in one
  vectorised batch (measured: cheaper per decision than extending each shape's table lazily when
  next asked for, which costs a call nearly every decision).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np

from fedcore.nodetable import NO_DEVICE, NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes

GpuKey = tuple[int, int]
"""A GPU request shape: (milli per device, device count); (0, 0) for CPU-only pods."""
CPU_ONLY: GpuKey = (0, 0)
COMPACT_AT = 64
"""States kept (beyond 4 per row) before those no row holds any more are dropped: a long replay
visits many, and an edge agent's one-row table makes a new one at every placement."""
ROOM = 1024
"""New states the tables have room for when laid out, beyond the live ones: growing copies every state's values
(milliseconds on openb, many decisions' worth), and a fleet meets a few hundred new states per thousand
placements. Never more than the compaction bound (an edge agent's one-row table keeps at most 64)."""
CHUNK = 64
"""States computed together when the tables are laid out: bounds the temporaries (~165 placement
choices x 30 pod types per state on openb) however many states a fleet holds."""


@functools.lru_cache(maxsize=4)
def _in_order(n: int) -> bytes:
    return np.arange(n, dtype=np.intp).tobytes()


def state_of(free: list[int]) -> tuple[int, ...]:
    """A row's device state from its free milli per device: largest first, a used-up device as an absent one."""
    return tuple(sorted((amount or NO_DEVICE for amount in free), reverse=True))


def all_rows(rows: np.ndarray, n: int) -> bool:
    """True when ``rows`` is exactly 0..n-1 in order (as indices, np.intp), so per-row arrays can be used without a gather.

    One byte comparison: a decision over the whole fleet asks this every time.
    """
    return rows.size == n and rows.dtype == np.intp and rows.tobytes() == _in_order(n)


class FragmentDrops:
    """Expected-fragmentation drop (before - best after, milli-GPU) per candidate row, for one node table."""

    def __init__(self, types: PodTypes) -> None:
        gpu = types.milli > 0
        order = np.argsort(types.cpu[gpu], kind="stable")
        self.cpu_sorted = types.cpu[gpu][order]
        weight = types.weight[gpu][order]
        shares, share_of_type = np.unique(types.milli[gpu][order], return_inverse=True)
        # Weight of types that can never use the node's GPU given k types fit on CPU: CPU-only types plus types k.. .
        self.rest = float(types.weight[~gpu].sum()) + weight.sum() - np.concatenate([[0.0], np.cumsum(weight)])
        self._shapes: set[GpuKey] = {CPU_ONLY}
        # CPU bracket by free CPU + 1 (a gather, several times cheaper than a binary search per row); index 0 is
        # "negative". A lookup clips: more CPU than the largest type's reads the last entry (every type fits), so
        # the table stops there (48 KiB on openb, not 256) and most rows read the same cache line.
        self._bracket_of = np.searchsorted(self.cpu_sorted, np.arange(-1, int(self.cpu_sorted.max(initial=0)) + 1), side="right").astype(np.int16)
        # Every device sum in one row of columns: fragment milli per share (free < share), fitting devices per
        # share, free milli, wholly free devices. Per free amount they are read from one table (rows 0..1000,
        # then -1 = no device: a take reads a negative amount from the end), so a state's sums are one gather
        # and one sum, and taking a share from a device swaps its row.
        m = shares.size
        amounts = np.append(np.arange(MILLI + 1), NO_DEVICE)[:, None]
        self._of_amount = np.concatenate(
            [np.where((amounts >= 0) & (amounts < shares), amounts, 0), amounts >= shares, np.maximum(amounts, 0), amounts == MILLI],
            axis=1,
        ).astype(np.int64)
        self._free_col, self._whole_col = 2 * m, 2 * m + 1
        # Types in CPU order behind a pseudo-type of weight 0 (any share, always hosted): the running sum over
        # types then starts with the exact 0 of bracket 0 (no type fits the CPU left) without a column to fill.
        self._count = np.concatenate([[0], types.count[gpu][order]])
        self._weight = np.concatenate([[0.0], weight])
        self._type_cols = np.concatenate([[0], share_of_type, [m], m + share_of_type])  # each type's share: its fragment, then its fits
        # A wholly free device taken: it was never a fragment, and it no longer fits any share nor adds free milli.
        self._whole_unit = np.concatenate([np.zeros(m, dtype=np.int64), np.ones(m, dtype=np.int64), [MILLI, 1]])
        self._table: NodeTable | None = None
        # Per table (set on first sight of it): the device states and their ids, each row's state id.
        self._states: np.ndarray
        self._sid: np.ndarray

    @staticmethod
    def key(pod: Pod) -> GpuKey:
        return (pod.gpu.milli_each, pod.gpu.count) if pod.gpu.count else CPU_ONLY

    # -- the maths (any number of device states at once) ------------------------------
    def _sums(self, free: np.ndarray) -> np.ndarray:
        """Device sums (the table's columns) of each state: (..., devices) -> (..., columns)."""
        sums: np.ndarray = self._of_amount.take(free.astype(np.intp, copy=False), axis=0).sum(axis=-2)
        return sums

    def _shared(self, sums: np.ndarray, amounts: np.ndarray, milli: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sums after a share of each ``milli`` is taken from a device holding each of ``amounts``, and where it fits.

        (states, columns), (states, amounts) -> (states, milli, amounts, columns) and (states, milli, amounts).
        Only the chosen device changes, so its row of the table is swapped for its row after: no
        recount over every device. A share that does not fit leaves a negative amount below -1,
        which reads some other row: those sums mean nothing, and the mask says so.
        """
        after = (amounts[:, None, :] - milli[:, None]).astype(np.intp, copy=False)
        swapped = self._of_amount.take(after, axis=0) - self._of_amount.take(amounts.astype(np.intp, copy=False), axis=0)[:, None]
        swapped += sums[:, None, None]
        return swapped, after >= 0

    def _brackets(self, sums: np.ndarray) -> np.ndarray:
        """Expected fragmentation per CPU bracket from device sums: (..., columns) -> (..., brackets).

        A type counts its share's fragment where enough devices host it, all free GPU where none
        does; bracket k is the node with the k cheapest-CPU types still fitting its CPU.
        """
        types = self._count.size
        per_type = sums.take(self._type_cols, axis=-1)
        total = sums[..., self._free_col, None]
        out = np.cumsum(np.where(per_type[..., types:] >= self._count, per_type[..., :types], total) * self._weight, axis=-1)
        out += total * self.rest
        return out

    def _compute(self, free: np.ndarray) -> np.ndarray:
        """Lowest fragmentation after placing each registered shape, over its device choices: (shapes, states, brackets).

        Every choice of every shape goes through one :meth:`_brackets` call: a CPU-only pod leaves
        the devices as they are, a sharing pod takes its share from one device, a whole-GPU pod
        turns ``count`` wholly free devices to 0 (which ones does not matter).
        """
        states, columns, brackets = len(free), self._of_amount.shape[1], self.rest.size
        sums = self._sums(free)
        # Devices with equal free milli are equal choices: one state (the usual case) tries each amount that can take a share once.
        amounts = np.array([sorted({a for a in free[0].tolist() if a > 0})], dtype=np.int64) if states == 1 else free
        shared, fit = self._shared(sums, amounts, self._milli)
        fit = fit.reshape(-1)
        # Rows: the states as they are, every whole-GPU choice, and only the sharing choices that fit (half on openb).
        frag = self._brackets(np.concatenate([sums, (sums[:, None] - self._whole_cost).reshape(-1, columns), shared.reshape(-1, columns)[fit]]))
        end = states * (1 + self._whole.size)
        whole = frag[states:end].reshape(states, self._whole.size, brackets)
        whole[sums[:, self._whole_col, None] < self._whole] = np.inf
        sharing = np.full((fit.size, brackets), np.inf)
        sharing[fit] = frag[end:]
        sharing_best = sharing.reshape(states, self._milli.size, amounts.shape[1], brackets).min(axis=2, initial=np.inf)
        return np.concatenate([frag[None, :states], sharing_best.transpose(1, 0, 2), whole.transpose(1, 0, 2)])

    # -- the per-table state ------------------------------------------------------------
    def _layout(self) -> None:
        """Order the registered shapes (CPU-only, sharing, whole GPUs) and compute every live state for them.

        Dead states are dropped first: every state is recomputed here, in chunks of :data:`CHUNK`,
        so the temporaries stay small (an agent held ~10^2 dead states and spiked by 20 MiB).
        """
        self._compact_states()
        sharing = sorted(k for k in self._shapes if k != CPU_ONLY and k[0] < MILLI)
        whole = sorted(k for k in self._shapes if k != CPU_ONLY and k[0] >= MILLI)
        self._milli = np.array([m for m, _ in sharing], dtype=np.int64)
        self._whole = np.array([c for _, c in whole], dtype=np.int64)
        self._whole_cost = self._whole[:, None] * self._whole_unit
        self._index = {key: i for i, key in enumerate([CPU_ONLY, *sharing, *whole])}
        # (shape, state, bracket): a new state's values are one contiguous run per shape, not a scatter. The states
        # themselves live at the head of a buffer of the same capacity: adding one writes a row, it copies none.
        capacity = min(self._bound(), 2 * len(self._states) + ROOM)
        self._values = np.empty((len(self._index), capacity, self.rest.size))
        self._room = np.empty((capacity, self._states.shape[1]), dtype=np.int64)
        self._room[: len(self._states)] = self._states
        self._states = self._room[: len(self._states)]
        for start in range(0, len(self._states), CHUNK):
            chunk = self._states[start : start + CHUNK]
            self._values[:, start : start + len(chunk)] = self._compute(chunk)
        self._follow(range(len(self._sid)))

    def _reset(self, table: NodeTable) -> None:
        """Map every row of a newly seen table to its device state (free milli per device, sorted) and compute them."""
        self._table, self._changes = table, table.changes
        # Largest first, used-up and absent devices (-1) last: the same keys as state_of.
        canonical = -np.sort(-np.where(table.gpu_free == 0, NO_DEVICE, table.gpu_free), axis=1)
        self._states, sid = np.unique(canonical, axis=0, return_inverse=True)
        self._sid = sid.reshape(-1).astype(np.int64)
        self._ids = {state: i for i, state in enumerate(map(tuple, self._states.tolist()))}
        self._offset = np.empty(len(table), dtype=np.int64)
        self._cpu_index = np.empty(len(table), dtype=np.int64)
        self._before = np.empty(len(table))
        self._layout()

    def _follow(self, rows: Iterable[int]) -> None:
        """Refresh what a decision reads per row and would otherwise redo for every row: where its state's
        values start, its free CPU (+1, the bracket index), and its fragmentation as it stands.

        Row by row in plain Python: a placement changes one row, where numpy calls cost more than the work.
        """
        assert self._table is not None
        cpu_cap, cpu_used = self._table.cpu_cap, self._table.cpu_used
        now = self._values[self._index[CPU_ONLY]].ravel()
        last = self._bracket_of.size - 1
        for row in rows:
            offset = int(self._sid[row]) * self.rest.size
            cpu = int(cpu_cap[row] - cpu_used[row]) + 1
            self._offset[row], self._cpu_index[row] = offset, cpu
            self._before[row] = now[offset + int(self._bracket_of[min(max(cpu, 0), last)])]

    def _sync(self, table: NodeTable) -> None:
        """Bring row -> state ids up to date with the rows the table changed (a placement: one row, at most one new state)."""
        if self._table is not table:
            self._reset(table)
            return
        rows = table.changed_since(self._changes)
        if rows.size == 0:
            return
        self._changes = table.changes
        if len(self._states) + rows.size > self._bound():
            self._compact()  # before new ids are handed out: compaction renumbers
        known = len(self._states)
        fresh: list[tuple[int, ...]] = []
        changed = rows.tolist()
        for row in changed:
            state = state_of(table.gpu_free[row].tolist())
            sid = self._ids.setdefault(state, len(self._ids))
            if sid >= known + len(fresh):
                fresh.append(state)
            self._sid[row] = sid
        if fresh:
            self._add(fresh)
        self._follow(changed)

    def _add(self, states: list[tuple[int, ...]]) -> None:
        """Append new device states and their values for every shape."""
        start, end = len(self._states), len(self._states) + len(states)
        if end > len(self._room):  # by doubling, up to the bound: compaction keeps the states within it
            capacity = min(self._bound(), 2 * end)
            values = np.empty((len(self._index), capacity, self.rest.size))
            values[:, :start] = self._values[:, :start]
            room = np.empty((capacity, self._room.shape[1]), dtype=np.int64)
            room[:start] = self._states
            self._values, self._room = values, room
        self._room[start:end] = states
        self._states = self._room[:end]
        self._values[:, start:end] = self._compute(self._states[start:])

    def _bound(self) -> int:
        """States kept before those no row holds any more are dropped (:data:`COMPACT_AT`, or 4 per row)."""
        return max(COMPACT_AT, 4 * len(self._sid))

    def _compact(self) -> None:
        """Keep only the states some row holds now, and their values, renumbered in order."""
        live = self._compact_states()
        self._values[:, : live.size] = self._values[:, live]
        self._room[: live.size] = self._states
        self._states = self._room[: live.size]
        self._follow(range(len(self._sid)))

    def _compact_states(self) -> np.ndarray:
        """Drop the states no row holds; returns the kept states' old ids."""
        live, sid = np.unique(self._sid, return_inverse=True)
        self._states, self._sid = self._states[live], sid.reshape(-1).astype(np.int64)
        self._ids = {state: i for i, state in enumerate(map(tuple, self._states.tolist()))}
        return live

    def _shape(self, key: GpuKey) -> np.ndarray:
        """The (state, bracket) table of ``key``, registering a shape never seen before."""
        index = self._index.get(key)
        if index is None:
            self._shapes.add(key)
            self._layout()
            index = self._index[key]
        values: np.ndarray = self._values[index]
        return values

    # -- what callers use -----------------------------------------------------------
    def prepare(self, table: NodeTable, pods: Iterable[Pod]) -> None:
        """Register every GPU request shape in ``pods`` and compute their tables now (once per fleet, not per decision)."""
        self._shapes |= {self.key(pod) for pod in pods}
        self._sync(table)
        if set(self._index) != self._shapes:
            self._layout()

    def _at(self, values: np.ndarray, cpu_left_plus_one: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """One shape's value per row: the row's state (``offset`` into the flat table) at its CPU bracket."""
        # Indices as np.intp: numpy 1.24 on 32-bit ARM refuses int64 ones for take (a no-op on 64-bit).
        brackets = self._bracket_of.take(cpu_left_plus_one.astype(np.intp, copy=False), mode="clip")
        at: np.ndarray = values.ravel().take((offset + brackets).astype(np.intp, copy=False))
        return at

    def drop(self, pod: Pod, table: NodeTable, rows: np.ndarray, whole: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(before - after, after) per row in milli-GPU; the drop is FGD's score before its sigmoid; after is inf where nothing fits.

        ``whole`` says ``rows`` is every row in order, when the caller already knows.
        """
        self._sync(table)
        values = self._shape(self.key(pod))  # first: a new shape lays the tables out again (and renumbers states)
        whole = all_rows(rows, len(table)) if whole is None else whole
        if whole:
            offset, cpu, before = self._offset, self._cpu_index, self._before
        else:
            offset, cpu, before = self._offset[rows], self._cpu_index[rows], self._before[rows]
        after = self._at(values, cpu - pod.cpu_milli, offset)
        return before - after, after

    def best_device(self, pod: Pod, table: NodeTable, node: int) -> int:
        """FGD's device pick for a sharing ``pod`` on ``node``: the best integer score, the lowest index among equals."""
        drop, after = self.drop(pod, table, np.array([node], dtype=np.intp))
        before = float(drop[0] + after[0])
        free = table.gpu_free[node][None]
        shared, fit = self._shared(self._sums(free), free, np.array([pod.gpu.milli_each]))
        frag = self._brackets(shared[0, 0])
        bracket = int(self._bracket_of.take(np.intp(table.cpu_free[node] - pod.cpu_milli + 1), mode="clip"))
        with np.errstate(over="ignore"):
            scores = np.floor(100.0 / (1.0 + np.exp(-(before - frag[:, bracket]) / MILLI)))
        return int(np.argmax(np.where(fit[0, 0], scores, -1.0)))


class FragmentationGradient:
    """FGD score and device picker: prefer the node and device whose expected fragmentation grows least.

    Reads the drop from a :class:`FragmentDrops` cache (the reference :class:`Fragmentation`
    recounted every row per decision: 23 s per openb episode against 5 s).
    """

    name = "FGD"

    def __init__(self, types: PodTypes) -> None:
        self.drops = FragmentDrops(types)

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        drop, _ = self.drops.drop(pod, table, rows)
        with np.errstate(over="ignore"):
            return 100.0 / (1.0 + np.exp(-drop / MILLI))

    def pick(self, pod: Pod, table: NodeTable, node: int) -> tuple[int, ...]:
        """The device with the best integer score, the lowest index among equals (as the published simulator)."""
        if not pod.gpu.is_sharing:
            return table.pick_gpus(pod, node)
        return (self.drops.best_device(pod, table, node),)
