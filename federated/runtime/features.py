"""The versioned feature spec of the learned policy: what it sees of a pod and of each candidate node.

One numpy implementation serves training (the twin) and run time (control plane, edge agents),
so the two can never drift. A decision's inputs are two float32 arrays, matching the ONNX
model's two inputs:

* ``pod``   (1, len(POD_FEATURES))  — the request alone, computed once per decision;
* ``nodes`` (rows, len(NODE_FEATURES)) — one row per candidate node.

Speed: everything that depends on a node alone (utilisation, capacities, health, load trend)
lives in a per-row cache that is refreshed only for the rows the table stamped as changed since
the last call (a placement touches one row), and the pod-dependent columns are a handful of whole-block
numpy operations — no Python per node.

Anything that changes the meaning, order or scaling of a feature must bump ``SPEC_VERSION``:
artifacts carry the version they were trained with and the loader refuses a mismatch. A node
feature that reads a table column the row classes (``_NodeCache.classes``) do not key on must be
added to that key: scorers copy one row's score to every row of its class.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from fedcore.nodes import Arch
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.fragments import FragmentDrops, all_rows

SPEC_VERSION = "fedplane-features/5"
"""2: adds ``kube_default``; 3: adds ``slots_lost``; 4: adds the pod feature ``workload_pinned``; 5: adds the pod
feature ``workload_cpu_bound``."""

PINNED_FULL = 0.02
"""The pinned share of a workload's GPU request at which ``workload_pinned`` reaches 1 (see :func:`pod_features`)."""

CPU_BOUND_FROM, CPU_BOUND_FULL = 0.95, 1.0
"""The workload's CPU pressure (``PodTypes.cpu_pressure``) where ``workload_cpu_bound`` leaves 0 and where it reaches 1."""

POD_FEATURES = (
    "cpu_cores_log",  # log1p(cores) / 5
    "mem_gib_log",  # log1p(GiB) / 7
    "gpu_count",  # devices / 8
    "gpu_share",  # milli per device / 1000
    "gpu_sharing",  # 1 for a fractional-GPU pod
    "priority",  # 1 for latency-sensitive / guaranteed work
    "spread_limited",  # 1 when the workload caps replicas per node
    "replicated",  # 1 for a replica of a named long-running workload (a service), 0 for a standalone job
    "workload_pinned",  # share of the workload's GPU request pinned to GPU models / PINNED_FULL, at most 1
    "workload_cpu_bound",  # the workload's CPU pressure on the fleet, 0 below CPU_BOUND_FROM .. 1 from CPU_BOUND_FULL
)

NODE_FEATURES = (
    "cpu_req",  # pod CPU / node CPU capacity
    "mem_req",
    "gpu_req",  # pod milli-GPU / node milli-GPU (0 without GPUs)
    "cpu_free_after",  # share of the node's CPU free after placement
    "mem_free_after",
    "gpu_free_after",  # (0 without GPUs)
    "cpu_util",  # share used now
    "mem_util",
    "gpu_util",
    "slow",  # 1 when the node is marked slow (health)
    "load_trend",  # the node's most recent change in CPU share (x10, clipped to +-1): rising load is risk
    "gpu_devices",  # device count / 8 (node size)
    "frag_drop",  # FGD fragmentation drop in GPUs, clipped to +-8
    "fgd_score",  # FGD's own score: sigmoid(drop), 0-1
    "frag_after",  # expected fragmentation after placement / node milli-GPU
    "bestfit",  # mean used share after placement over CPU, memory, GPU (the packing score; not the published BestFit profile)
    "balanced",  # 1 - |CPU share - memory share| / 2 after placement (BalancedAllocation / 100)
    "whole_gpus_after",  # wholly free devices left after placement / 8
    "accel_match",  # +1 GPU pod on GPU node, 0 CPU pod on CPU node, -1 CPU pod taking a GPU node's CPU
    "gpu_model_match",  # 1 when the pod names a GPU model this node has
    "arch_match",  # 1 when the node's architecture is one the pod accepts (or it names none)
    "workload_latency",  # expected RTT to the workload's other replicas, 0 (same region) .. 1 (all remote)
    "workload_on_node",  # replicas of the workload already on the node / per-node cap (or / 8)
    "kube_default",  # kube-scheduler's score, floor(LeastAllocated) + floor(BalancedAllocation), / 200
    "slots_lost",  # share of the workload's common CPU-only (CPU, memory) shapes the node hosts before and not after placement
)

ARCHS = list(Arch)
REGION_RTT_MS = (1.0, 50.0)
"""Round trip inside a region and between regions (fedcore.topology's defaults)."""

# Rows of the per-node cache (feature-major, one column per node); rows 0-5 are copied as one block into NODE_FEATURES[6:12].
# _FREE is 1 - utilisation (0 for the GPU share of a node without GPUs): what is left after placement is one subtraction.
_UTIL, _INV, _HAS_GPU, _BESTFIT_BASE, _CPU_MINUS_MEM, _WHOLE, _FREE = slice(0, 3), slice(6, 9), 9, 10, 11, 12, slice(13, 16)
_WIDTH = 16
_ONE = np.float32(1.0)


def pod_features(pod: Pod, pinned: float = 0.0, cpu_pressure: float = 0.0) -> np.ndarray:
    """The pod's input, shape (1, len(POD_FEATURES)); ``pinned`` and ``cpu_pressure`` describe the workload
    (``PodTypes.pinned``, ``PodTypes.cpu_pressure``).

    ``workload_pinned`` describes the workload the pod arrives in, not the pod: where pods name GPU
    models, preferences for node kinds (small nodes, idle nodes) steer the pods that name none onto
    the nodes the pinned ones need, and the model learns to drop them there. It saturates early
    (2% of the GPU request): on openb's gpuspec05 list (5.6% pinned) keeping a quarter of those
    preferences lost 1.3 points against dropping them all.

    ``workload_cpu_bound`` describes the workload on its fleet: where the CPU that arrives with the
    GPU request is about all the fleet has, CPU decides how much GPU can be used, and packing CPU
    (BestFit) beats FGD's GPU-only view by about 3 points (openb cpu250 on one- and eight-GPU nodes).
    It ramps from 0 at pressure 0.95 to 1 at 1.0 (the default list on the openb fleet reads 0.81).
    """
    return np.array(
        [[
            math.log1p(pod.cpu_milli / MILLI) / 5.0,
            math.log1p(pod.memory_mib / 1024.0) / 7.0,
            pod.gpu.count / 8.0,
            pod.gpu.milli_each / MILLI,
            float(pod.gpu.is_sharing),
            float(pod.priority > 0),
            float(pod.max_per_node > 0),
            float(bool(pod.workload)),
            min(1.0, pinned / PINNED_FULL),
            min(1.0, max(0.0, (cpu_pressure - CPU_BOUND_FROM) / (CPU_BOUND_FULL - CPU_BOUND_FROM))),
        ]],
        dtype=np.float32,
    )


class _NodeCache:
    """Node-only quantities (feature-major), refreshed for the rows the table stamped as changed since the last call.

    ``slots`` are the workload's common CPU-only (CPU, memory) shapes: what each node has left beyond
    each of them (``room``: free CPU and memory minus the slot's, slot x node) and whether it hosts it
    now are node-only, so ``slots_lost`` compares that room with the pod's request and counts.

    ``classes`` numbers what each row's features are made of (capacities, usage, device state, health,
    load trend, GPU model, architecture): rows of one class get bit-identical features for any pod
    whose workload has no placed replicas, so a scorer may compute one row per class and copy.
    The live classes are kept grouped as rows change (:meth:`one_per_class`): a pod shape's first
    sight scores one row of each without sorting the fleet's rows into classes again.
    """

    def __init__(self, table: NodeTable, slots: np.ndarray) -> None:
        self.table = table
        self.changes = table.changes
        v = self.values = np.zeros((_WIDTH, len(table)), dtype=np.float32)
        v[5] = table.gpu_count / 8.0
        v[6] = 1.0 / np.maximum(table.cpu_cap, 1)
        v[7] = 1.0 / np.maximum(table.mem_cap, 1)
        has_gpu = table.gpu_count > 0
        v[8] = np.where(has_gpu, 1.0 / np.maximum(table.gpu_count * MILLI, 1), 0.0)
        v[_HAS_GPU] = has_gpu
        self.caps = np.maximum(np.stack([table.cpu_cap, table.mem_cap]), 1).astype(np.float64)  # the scheduler's divisors, converted once
        # CPU and memory used beside the divisors (one operation serves both), held as float64 (exact integers):
        # kube-default's sums and divisions then run without an int64 -> float64 cast inside each ufunc.
        self.used = np.stack([table.cpu_used, table.mem_used]).astype(np.float64)
        self.set_slots(slots)
        self._scratch = (np.empty((2, 0)), np.empty((2, 0)))
        self.request = np.empty((2, 1))  # the pod's CPU and memory as kube-default's float64 column, filled per call
        self.classes = np.empty(len(table), dtype=np.intp)
        self._class_of: dict[tuple[object, ...], int] = {}
        self._keys: list[tuple[object, ...]] = [()] * len(table)
        self._static = list(zip(table.cpu_cap.tolist(), table.mem_cap.tolist(), table.gpu_model.tolist(), table.arch.tolist()))
        self.slot = np.empty(len(table), dtype=np.intp)  # per row: its class's place among the live classes
        self._chosen = np.empty(len(table), dtype=np.intp)  # per place: one row of that class
        self._members: list[set[int]] = []  # per place: the rows of that class
        self._slot_of: dict[int, int] = {}  # live class -> its place
        self._update(range(len(table)), first=True)

    def one_per_class(self) -> tuple[np.ndarray, np.ndarray]:
        """(one row of each live class, for every row the index of its class's row there): what scoring the whole
        fleet one row per class needs, kept up to date as rows change instead of recomputed per call."""
        return self._chosen[: len(self._members)], self.slot

    def _group(self) -> None:
        """Group every row by its class anew (on first sight, and when the classes are renumbered)."""
        self._members, self._slot_of = [], {}
        for row, c in enumerate(self.classes.tolist()):
            self._join(row, c)

    def _regroup(self, row: int, old: int, new: int) -> None:
        """Move ``row`` from class ``old`` to class ``new``: an emptied class's place takes the last place's class."""
        place = self._slot_of[old]
        members = self._members[place]
        members.discard(row)
        if not members:
            del self._slot_of[old]
            moved = self._members.pop()
            last = len(self._members)
            if place != last:
                self._members[place] = moved
                self._chosen[place] = self._chosen[last]
                self._slot_of[int(self.classes[self._chosen[last]])] = place
                self.slot[list(moved)] = place
        elif self._chosen[place] == row:
            self._chosen[place] = next(iter(members))
        self._join(row, new)

    def _join(self, row: int, c: int) -> None:
        """Put ``row`` in class ``c``'s place (a new place, with ``row`` as its chosen row, for a class not yet held)."""
        place = self._slot_of.setdefault(c, len(self._members))
        if place == len(self._members):
            self._members.append(set())
            self._chosen[place] = row
        self._members[place].add(row)
        self.slot[row] = place

    def set_slots(self, slots: np.ndarray) -> None:
        """Hold each row's room beyond these slot shapes (a new workload profile), from the table as it stands."""
        self.slot_list = [(int(c), int(m)) for c, m in slots.tolist()]
        free = np.stack([self.table.cpu_cap - self.table.cpu_used, self.table.mem_cap - self.table.mem_used])
        self.room = free[:, None, :] - slots.T.astype(np.int64)[:, :, None]  # (CPU, memory) free beyond each slot, per node
        self.hosts = (self.room >= 0).all(axis=0)  # the slot fits the node's free CPU and memory now
        self.covering: dict[tuple[int, int], list[int]] = {}  # per (CPU, memory) request: the slots it covers

    def scratch(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Reusable (2, rows) float64 blocks for kube-default's terms: no allocation per decision."""
        if self._scratch[0].shape[1] != rows:
            self._scratch = (np.empty((2, rows)), np.empty((2, rows)))
        return self._scratch

    def refresh(self) -> np.ndarray:
        rows = self.table.changed_since(self.changes)
        if rows.size:
            self.changes = self.table.changes
            self._update(rows.tolist())
        return self.values

    def _update(self, rows: Iterable[int], first: bool = False) -> None:
        """Recompute the node-only columns of ``rows``, one row at a time in Python floats.

        A placement changes one row, where a dozen numpy calls on one-element blocks cost several
        times the arithmetic. The float64 operations are numpy's own for these arrays (int64 times
        float32 promotes to float64), rounded to float32 once on store, so values are bit-identical.
        """
        t, v = self.table, self.values
        for row in rows:
            self.used[0, row], self.used[1, row] = cpu_used, mem_used = int(t.cpu_used[row]), int(t.mem_used[row])
            cpu_free, mem_free = int(t.cpu_cap[row]) - cpu_used, int(t.mem_cap[row]) - mem_used
            for i, (c, m) in enumerate(self.slot_list):
                self.room[0, i, row], self.room[1, i, row] = cpu_room, mem_room = cpu_free - c, mem_free - m
                self.hosts[i, row] = cpu_room >= 0 and mem_room >= 0
            cpu = cpu_used * float(v[6, row])
            mem = mem_used * float(v[7, row])
            free = t.gpu_free[row].tolist()
            has_gpu = float(v[_HAS_GPU, row])
            gpu = has_gpu - sum(f for f in free if f > 0) * float(v[8, row])  # 0 without GPUs (their inverse capacity is 0)
            v[4, row] = 0.0 if first else max(min((cpu - float(v[0, row])) * 10.0, 1.0), -1.0)
            v[0, row], v[1, row], v[2, row], v[3, row] = cpu, mem, gpu, t.slow[row]
            v[13, row], v[14, row] = _ONE - v[0, row], _ONE - v[1, row]  # float32 arithmetic, as on the whole block
            v[15, row] = _ONE - v[2, row] if has_gpu else 0.0
            v[_BESTFIT_BASE, row] = cpu + mem + (gpu if has_gpu else 1.0)
            v[_CPU_MINUS_MEM, row] = cpu - mem
            v[_WHOLE, row] = free.count(MILLI)
            # Everything a row's features read (the workload columns aside: placed replicas are never shared).
            key = self._keys[row] = (self._static[row], cpu_used, mem_used, tuple(sorted(free)), bool(t.slow[row]), float(v[4, row]))
            c = self._class_of.setdefault(key, len(self._class_of))
            if not first:
                self._regroup(row, int(self.classes[row]), c)
            self.classes[row] = c
        if len(self._class_of) > 2 * len(self._keys) + 64:  # classes no row holds any more: number the live ones anew
            self._class_of = {}
            for row, key in enumerate(self._keys):
                self.classes[row] = self._class_of.setdefault(key, len(self._class_of))
            first = True
        if first:
            self._group()


class FeatureBuilder:
    """Builds the candidate-node features for a pod; holds the caches that make it cheap per decision.

    ``types`` are the workload's typical pod shapes that define fragmentation (FGD's). Use one
    builder per fleet (node table); it follows the table's changes by itself.
    """

    def __init__(self, types: PodTypes) -> None:
        self.types = types
        self.drops = FragmentDrops(types)
        self._nodes: _NodeCache | None = None
        self._request = np.empty((3, 1), dtype=np.float32)  # the pod's CPU, memory and GPU request column, filled per call

    def set_types(self, types: PodTypes) -> None:
        """Build for another workload profile from now on (an agent told its cluster's by the control plane).

        The fragment caches are rebuilt for the new shapes (per fleet on first sight: one row on an agent); the
        node-only cache stays, load trend included, its room per slot recomputed when the slot shapes change."""
        if self._nodes is not None and not np.array_equal(types.slots, self.types.slots):
            self._nodes.set_slots(types.slots)
        self.types = types
        self.drops = FragmentDrops(types)

    def pod(self, pod: Pod) -> np.ndarray:
        """The pod's input in this builder's workload (its pinned share and CPU pressure): see :func:`pod_features`."""
        return pod_features(pod, self.types.pinned, self.types.cpu_pressure)

    def follow(self, table: NodeTable) -> _NodeCache:
        """Catch the node-only columns up with the table's changes (the load trend advances here); returns their cache.

        A new object whenever the cache was rebuilt (another table, or this one seen anew: the load
        trend restarts), so scores kept per epoch know when they no longer hold.
        """
        if self._nodes is None or self._nodes.table is not table:
            self._nodes = _NodeCache(table, self.types.slots)
        self._nodes.refresh()
        return self._nodes

    def __call__(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Features of ``pod`` on each of ``rows``, shape (rows, len(NODE_FEATURES)), float32.

        Built feature-major and returned as its transpose (a view): ``.T`` of the result is the
        contiguous feature-major buffer the ONNX model reads.
        """
        cache = self.follow(table).values
        whole = all_rows(rows, len(table))
        v = cache if whole else cache.take(rows, axis=1)  # take: a third of fancy indexing's cost on a few rows
        out = np.empty((len(NODE_FEATURES), rows.size), dtype=np.float32)
        request = self._request
        request[0, 0], request[1, 0], request[2, 0] = pod.cpu_milli, pod.memory_mib, pod.gpu.total_milli
        req = out[0:3]
        np.multiply(v[_INV], request, out=req)
        np.subtract(v[_FREE], req, out=out[3:6])
        out[6:12] = v[0:6]
        # The fragmentation columns in float64, in place (drop() returns fresh arrays), stored as float32 once.
        # The drop is negated while scaled: the sigmoid wants -drop, and the clip to +-8 is symmetric.
        drop, after = self.drops.drop(pod, table, rows, whole)
        drop *= -1.0 / MILLI
        np.minimum(drop, 8.0, out=drop)
        np.maximum(drop, -8.0, out=drop)  # no fit (drop -inf) becomes 8 here, -8 in the feature
        np.negative(drop, out=out[12])
        np.exp(drop, out=drop)
        drop += 1.0
        np.divide(1.0, drop, out=out[13])  # in float64, as FGD: float32 rounding would move scores across integer bins
        np.copyto(after, 0.0, where=after == np.inf)
        np.multiply(after, v[8], out=out[14])
        bestfit = out[15]
        np.add(v[_BESTFIT_BASE], req[0], out=bestfit)
        bestfit += req[1]
        bestfit += req[2]
        bestfit *= 1.0 / 3.0
        balanced = out[16]
        np.add(v[_CPU_MINUS_MEM], req[0], out=balanced)
        balanced -= req[1]
        np.abs(balanced, out=balanced)
        balanced *= 0.5
        np.subtract(1.0, balanced, out=balanced)
        taken = pod.gpu.count if pod.gpu.milli_each == MILLI else 0
        np.multiply(np.maximum(v[_WHOLE] - taken, 0.0) if taken else v[_WHOLE], 1.0 / 8.0, out=out[17])  # max(x - 0, 0) is x
        if pod.gpu.count:
            out[18] = v[_HAS_GPU]
        else:
            np.negative(v[_HAS_GPU], out=out[18])
        out[19] = self._model_match(pod, table, rows)
        out[20] = 1.0 if not pod.archs else np.isin(table.arch[rows], [ARCHS.index(a) for a in pod.archs])
        out[21], out[22] = self._workload(pod, table, rows)
        self._kube_default(pod, self._nodes, rows, whole, out[23])
        self._slots(pod, self._nodes, rows, whole, out[24])
        return out.T

    @staticmethod
    def _slots(pod: Pod, nodes: _NodeCache, rows: np.ndarray, whole: bool, out: np.ndarray) -> None:
        """Share of the workload's common CPU-only shapes this node could host before placing ``pod`` and not after.

        A shape the pod covers (no more CPU nor memory than it asks) is not counted: taking a slot
        with a pod at least that large is what the slot is for. Large CPU pods need a node with both
        that much CPU and memory left; placing small pods where they break such a slot strands it.
        """
        covered = nodes.covering.get((pod.cpu_milli, pod.memory_mib))
        if covered is None:
            covered = nodes.covering[pod.cpu_milli, pod.memory_mib] = [
                i for i, (c, m) in enumerate(nodes.slot_list) if pod.cpu_milli >= c and pod.memory_mib >= m]
        if len(covered) == len(nodes.slot_list):
            out[:] = 0.0
            return
        # A slot is lost where the node hosts it now and its room does not cover the pod's CPU and memory
        # (free - slot >= request is free >= slot + request, in integers): one (slots, rows) block per
        # comparison, and the count (an integer, exact in float32) summed over the slots.
        hosts, room = (nodes.hosts, nodes.room) if whole else (nodes.hosts.take(rows, axis=1), nodes.room.take(rows, axis=2))
        kept = room[0] >= pod.cpu_milli
        kept &= room[1] >= pod.memory_mib
        for i in covered:
            kept[i] = True  # never lost
        lost = np.greater(hosts, kept, out=kept).view(np.int8)
        np.add.reduce(lost, axis=0, out=out)
        out *= 1.0 / len(nodes.slot_list)

    @staticmethod
    def _kube_default(pod: Pod, nodes: _NodeCache, rows: np.ndarray, whole: bool, out: np.ndarray) -> None:
        """kube-default's integer score / 200 into ``out``, computed in float64 in the scheduler's own order of operations.

        Bit-exact on purpose: it is an integer, and float32 rounding would move a score sitting on
        an integer (common with round requests) into the bin below. LeastAllocated's and
        BalancedAllocation's terms take the same last steps, so they run as one (2, rows) block.
        """
        used, caps = (nodes.used, nodes.caps) if whole else (nodes.used.take(rows, axis=1), nodes.caps.take(rows, axis=1))
        shares, terms = nodes.scratch(used.shape[1])
        request = nodes.request
        request[0, 0], request[1, 0] = pod.cpu_milli, pod.memory_mib
        np.add(used, request, out=shares)  # what the node would have taken, then (in place) its share of capacity
        cpu, mem = np.divide(shares, caps, out=shares)
        np.add(cpu, mem, out=terms[0])
        np.subtract(cpu, mem, out=terms[1])
        np.abs(terms[1], out=terms[1])
        terms /= 2.0
        np.subtract(1.0, terms, out=terms)
        terms *= 100.0
        np.floor(terms, out=terms)
        np.add(terms[0], terms[1], out=terms[0])
        np.multiply(terms[0], 1.0 / 200.0, out=out)

    @staticmethod
    def _model_match(pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray | float:
        if not (pod.gpu.count and pod.gpu_model):
            return 0.0
        codes = [table.model_codes[m] for m in pod.gpu_model.split("|") if m in table.model_codes]
        return np.isin(table.gpu_model[rows], codes).astype(np.float64)

    @staticmethod
    def _workload(pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray | float, np.ndarray | float]:
        """(expected RTT to the workload's replicas, replicas here / cap) — both 0 for a workload with none placed."""
        if not pod.workload or pod.workload not in table.per_workload:
            return 0.0, 0.0
        counts = table.per_workload[pod.workload]
        placed = int(counts.sum())
        if placed == 0:
            return 0.0, 0.0
        per_region = np.bincount(table.region, weights=counts, minlength=len(table.regions))
        same = per_region[table.region[rows]] / placed
        near, far = REGION_RTT_MS
        latency = (same * near + (1.0 - same) * far) / far
        cap = pod.max_per_node if pod.max_per_node > 0 else 8
        return latency, counts[rows] / cap
