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
artifacts carry the version they were trained with and the loader refuses a mismatch.
"""

from __future__ import annotations

import math

import numpy as np

from fedcore.nodes import Arch
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes
from federated.runtime.fragments import FragmentDrops, all_rows

SPEC_VERSION = "fedplane-features/2"
"""2: adds ``kube_default``."""

POD_FEATURES = (
    "cpu_cores_log",  # log1p(cores) / 5
    "mem_gib_log",  # log1p(GiB) / 7
    "gpu_count",  # devices / 8
    "gpu_share",  # milli per device / 1000
    "gpu_sharing",  # 1 for a fractional-GPU pod
    "priority",  # 1 for latency-sensitive / guaranteed work
    "spread_limited",  # 1 when the workload caps replicas per node
    "replicated",  # 1 for a replica of a named long-running workload (a service), 0 for a standalone job
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
    "bestfit",  # mean used share after placement over CPU, memory, GPU (BestFit score / 100)
    "balanced",  # 1 - |CPU share - memory share| / 2 after placement (BalancedAllocation / 100)
    "whole_gpus_after",  # wholly free devices left after placement / 8
    "accel_match",  # +1 GPU pod on GPU node, 0 CPU pod on CPU node, -1 CPU pod taking a GPU node's CPU
    "gpu_model_match",  # 1 when the pod names a GPU model this node has
    "arch_match",  # 1 when the node's architecture is one the pod accepts (or it names none)
    "workload_latency",  # expected RTT to the workload's other replicas, 0 (same region) .. 1 (all remote)
    "workload_on_node",  # replicas of the workload already on the node / per-node cap (or / 8)
    "kube_default",  # kube-scheduler's score, floor(LeastAllocated) + floor(BalancedAllocation), / 200
)

ARCHS = list(Arch)
REGION_RTT_MS = (1.0, 50.0)
"""Round trip inside a region and between regions (fedcore.topology's defaults)."""

# Rows of the per-node cache (feature-major, one column per node); rows 0-5 are copied as one block into NODE_FEATURES[6:12].
_UTIL, _INV, _HAS_GPU, _BESTFIT_BASE, _CPU_MINUS_MEM, _WHOLE = slice(0, 3), slice(6, 9), 9, 10, 11, 12
_WIDTH = 13


def pod_features(pod: Pod) -> np.ndarray:
    """The pod-only input, shape (1, len(POD_FEATURES))."""
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
        ]],
        dtype=np.float32,
    )


class _NodeCache:
    """Node-only quantities (feature-major), refreshed for the rows the table stamped as changed since the last call."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.changes = table.changes
        v = self.values = np.zeros((_WIDTH, len(table)), dtype=np.float32)
        v[5] = table.gpu_count / 8.0
        v[6] = 1.0 / np.maximum(table.cpu_cap, 1)
        v[7] = 1.0 / np.maximum(table.mem_cap, 1)
        has_gpu = table.gpu_count > 0
        v[8] = np.where(has_gpu, 1.0 / np.maximum(table.gpu_count * MILLI, 1), 0.0)
        v[_HAS_GPU] = has_gpu
        self.cpu_cap = np.maximum(table.cpu_cap, 1).astype(np.float64)  # the scheduler's divisors, converted once
        self.mem_cap = np.maximum(table.mem_cap, 1).astype(np.float64)
        self._update(np.arange(len(table)), first=True)

    def refresh(self) -> np.ndarray:
        rows = self.table.changed_since(self.changes)
        if rows.size:
            self.changes = self.table.changes
            self._update(rows)
        return self.values

    def _update(self, rows: np.ndarray, first: bool = False) -> None:
        # One gather and one scatter of the rows' columns; the arithmetic runs on that small block.
        t = self.table
        block = self.values[:, rows]
        free = t.gpu_free[rows]
        has_gpu = block[_HAS_GPU] > 0
        cpu = t.cpu_used[rows] * block[6]
        mem = t.mem_used[rows] * block[7]
        gpu = block[_HAS_GPU] - np.maximum(free, 0).sum(axis=1) * block[8]  # 0 without GPUs (their inverse capacity is 0)
        block[4] = 0.0 if first else np.maximum(np.minimum((cpu - block[0]) * 10.0, 1.0), -1.0)  # np.clip costs more on small arrays
        block[0], block[1], block[2], block[3] = cpu, mem, gpu, t.slow[rows]
        block[_BESTFIT_BASE] = cpu + mem + np.where(has_gpu, gpu, 1.0)
        block[_CPU_MINUS_MEM] = cpu - mem
        block[_WHOLE] = (free == MILLI).sum(axis=1)
        self.values[:, rows] = block


class FeatureBuilder:
    """Builds the candidate-node features for a pod; holds the caches that make it cheap per decision.

    ``types`` are the workload's typical pod shapes that define fragmentation (FGD's). Use one
    builder per fleet (node table); it follows the table's changes by itself.
    """

    def __init__(self, types: PodTypes) -> None:
        self.types = types
        self.drops = FragmentDrops(types)
        self._nodes: _NodeCache | None = None

    def __call__(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Features of ``pod`` on each of ``rows``, shape (rows, len(NODE_FEATURES)), float32.

        Built feature-major and returned as its transpose (a view): ``.T`` of the result is the
        contiguous feature-major buffer the ONNX model reads.
        """
        if self._nodes is None or self._nodes.table is not table:
            self._nodes = _NodeCache(table)
        cache = self._nodes.refresh()
        whole = all_rows(rows, len(table))
        v = cache if whole else cache[:, rows]
        out = np.empty((len(NODE_FEATURES), rows.size), dtype=np.float32)
        request = np.array([[pod.cpu_milli], [pod.memory_mib], [pod.gpu.total_milli]], dtype=np.float32)
        req = out[0:3]
        np.multiply(v[_INV], request, out=req)
        np.subtract(1.0, v[_UTIL], out=out[3:6])
        out[3:6] -= req
        out[5] *= v[_HAS_GPU]
        out[6:12] = v[0:6]
        drop, after = self.drops.drop(pod, table, rows, whole)
        drop = np.maximum(np.minimum(drop * (1.0 / MILLI), 8.0), -8.0)  # -inf (no fit) becomes -8
        out[12] = drop
        out[13] = 1.0 / (1.0 + np.exp(-drop))  # in float64, as FGD: float32 rounding would move scores across integer bins
        after[after == np.inf] = 0.0
        np.multiply(after, v[8], out=out[14])
        out[15] = (v[_BESTFIT_BASE] + req[0] + req[1] + req[2]) * (1.0 / 3.0)
        out[16] = 1.0 - 0.5 * np.abs(v[_CPU_MINUS_MEM] + req[0] - req[1])
        taken = pod.gpu.count if pod.gpu.milli_each == MILLI else 0
        out[17] = np.maximum(v[_WHOLE] - taken, 0.0) * (1.0 / 8.0)
        out[18] = v[_HAS_GPU] if pod.gpu.count else -v[_HAS_GPU]
        out[19] = self._model_match(pod, table, rows)
        out[20] = 1.0 if not pod.archs else np.isin(table.arch[rows], [ARCHS.index(a) for a in pod.archs])
        out[21], out[22] = self._workload(pod, table, rows)
        out[23] = self._kube_default(pod, self._nodes, rows, whole)
        return out.T

    @staticmethod
    def _kube_default(pod: Pod, nodes: _NodeCache, rows: np.ndarray, whole: bool) -> np.ndarray:
        """kube-default's integer score / 200, computed in float64 in the scheduler's own order of operations.

        Bit-exact on purpose: it is an integer, and float32 rounding would move a score sitting on
        an integer (common with round requests) into the bin below.
        """
        t = nodes.table
        if whole:
            cpu = (t.cpu_used + pod.cpu_milli) / nodes.cpu_cap
            mem = (t.mem_used + pod.memory_mib) / nodes.mem_cap
        else:
            cpu = (t.cpu_used[rows] + pod.cpu_milli) / nodes.cpu_cap[rows]
            mem = (t.mem_used[rows] + pod.memory_mib) / nodes.mem_cap[rows]
        least = np.floor(100.0 * (1.0 - (cpu + mem) / 2.0))
        balanced = np.floor(100.0 * (1.0 - np.abs(cpu - mem) / 2.0))
        return (least + balanced) * (1.0 / 200.0)

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
