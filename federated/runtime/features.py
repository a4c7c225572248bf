"""The versioned feature spec of the learned policy: what it sees of a pod and of each candidate node.

One numpy implementation serves training (the twin) and run time (control plane, edge agents),
so the two can never drift. A decision's inputs are two float32 arrays, matching the ONNX
model's two inputs:

* ``pod``   (1, len(POD_FEATURES))  — the request alone, computed once per decision;
* ``nodes`` (rows, len(NODE_FEATURES)) — one row per candidate node, all vectorised.

Anything that changes the meaning, order or scaling of a feature must bump ``SPEC_VERSION``:
artifacts carry the version they were trained with and the loader refuses a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedcore.nodes import Arch
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes
from federated.runtime.fragments import FragmentDrops

SPEC_VERSION = "fedplane-features/1"

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
    "gpu_free_after",
    "cpu_util",  # share used now
    "mem_util",
    "gpu_util",
    "frag_drop",  # FGD fragmentation drop in GPUs, clipped to +-8
    "fgd_score",  # FGD's own score: sigmoid(drop), 0-1
    "frag_after",  # expected fragmentation after placement / node milli-GPU
    "bestfit",  # mean used share after placement over CPU, memory, GPU (BestFit score / 100)
    "balanced",  # 1 - |CPU share - memory share| / 2 after placement (BalancedAllocation / 100)
    "accel_match",  # +1 GPU pod on GPU node, 0 CPU pod on CPU node, -1 CPU pod taking a GPU node's CPU
    "gpu_model_match",  # 1 when the pod names a GPU model this node has
    "arch_match",  # 1 when the node's architecture is one the pod accepts (or it names none)
    "workload_latency",  # expected RTT to the workload's other replicas, 0 (same region) .. 1 (all remote)
    "workload_on_node",  # replicas of the workload already on the node / per-node cap (or / 8)
    "slow",  # 1 when the node is marked slow (health)
    "load_trend",  # CPU use now minus its recent average (x10, clipped to +-1): rising load is risk
    "gpu_devices",  # device count / 8 (node size)
    "whole_gpus_after",  # wholly free devices left after placement / 8
)

ARCHS = list(Arch)
REGION_RTT_MS = (1.0, 50.0)
"""Round trip inside a region and between regions (fedcore.topology's defaults)."""


def pod_features(pod: Pod) -> np.ndarray:
    """The pod-only input, shape (1, len(POD_FEATURES))."""
    return np.array(
        [[
            np.log1p(pod.cpu_milli / MILLI) / 5.0,
            np.log1p(pod.memory_mib / 1024.0) / 7.0,
            pod.gpu.count / 8.0,
            pod.gpu.milli_each / MILLI,
            float(pod.gpu.is_sharing),
            float(pod.priority > 0),
            float(pod.max_per_node > 0),
            float(bool(pod.workload)),
        ]],
        dtype=np.float32,
    )


@dataclass(slots=True)
class _Trend:
    """Per-row exponential average of CPU use, advanced once per decision."""

    table: NodeTable
    average: np.ndarray


class FeatureBuilder:
    """Builds the candidate-node features for a pod; holds the caches that make it cheap per decision.

    ``types`` are the workload's typical pod shapes that define fragmentation (FGD's). The builder
    keeps a load-trend average per node, so use one builder per fleet and call it once per decision.
    """

    trend_decay = 0.9

    def __init__(self, types: PodTypes) -> None:
        self.types = types
        self.drops = FragmentDrops(types)
        self._trend: _Trend | None = None
        self._static: tuple[NodeTable, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _statics(self, table: NodeTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Capacities as float reciprocals, computed once per table (they never change)."""
        if self._static is None or self._static[0] is not table:
            gpu_cap = (table.gpu_count * MILLI).astype(np.float64)
            self._static = (
                table,
                1.0 / np.maximum(table.cpu_cap, 1),
                1.0 / np.maximum(table.mem_cap, 1),
                np.where(gpu_cap > 0, 1.0 / np.maximum(gpu_cap, 1), 0.0),
                table.gpu_count > 0,
            )
        return self._static[1], self._static[2], self._static[3], self._static[4]

    def _load_trend(self, table: NodeTable, util: np.ndarray) -> np.ndarray:
        if self._trend is None or self._trend.table is not table:
            self._trend = _Trend(table, util.copy())
        trend = util - self._trend.average
        self._trend.average *= self.trend_decay
        self._trend.average += (1.0 - self.trend_decay) * util
        return np.clip(trend * 10.0, -1.0, 1.0)

    def __call__(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Features of ``pod`` on each of ``rows``, shape (rows, len(NODE_FEATURES)), float32."""
        inv_cpu, inv_mem, inv_gpu, has_gpu = self._statics(table)
        cpu_util_all = table.cpu_used * inv_cpu
        trend = self._load_trend(table, cpu_util_all)[rows]
        inv_cpu, inv_mem, inv_gpu, has_gpu = inv_cpu[rows], inv_mem[rows], inv_gpu[rows], has_gpu[rows]
        free = table.gpu_free[rows]
        gpu_free = np.where(free > 0, free, 0).sum(axis=1)
        gpu_total = pod.gpu.total_milli
        cpu_req = pod.cpu_milli * inv_cpu
        mem_req = pod.memory_mib * inv_mem
        gpu_req = gpu_total * inv_gpu
        cpu_util = cpu_util_all[rows]
        mem_util = table.mem_used[rows] * inv_mem
        gpu_util = np.where(has_gpu, 1.0 - gpu_free * inv_gpu, 0.0)
        drop, after = self.drops.drop(pod, table, rows)
        drop = np.clip(np.nan_to_num(drop / MILLI, neginf=-8.0), -8.0, 8.0)
        used_after = cpu_util + cpu_req + mem_util + mem_req + np.where(has_gpu, gpu_util + gpu_req, 1.0)
        whole = (free == MILLI).sum(axis=1) - (pod.gpu.count if pod.gpu.milli_each == MILLI else 0)
        out = np.empty((rows.size, len(NODE_FEATURES)), dtype=np.float32)
        out[:, 0] = cpu_req
        out[:, 1] = mem_req
        out[:, 2] = gpu_req
        out[:, 3] = 1.0 - cpu_util - cpu_req
        out[:, 4] = 1.0 - mem_util - mem_req
        out[:, 5] = np.where(has_gpu, 1.0 - gpu_util - gpu_req, 0.0)
        out[:, 6] = cpu_util
        out[:, 7] = mem_util
        out[:, 8] = gpu_util
        out[:, 9] = drop
        out[:, 10] = 1.0 / (1.0 + np.exp(-drop))
        out[:, 11] = np.where(np.isfinite(after), after, 0.0) * inv_gpu
        out[:, 12] = used_after / 3.0
        out[:, 13] = 1.0 - np.abs(cpu_util + cpu_req - mem_util - mem_req) / 2.0
        out[:, 14] = has_gpu.astype(np.float64) if pod.gpu.count else -has_gpu.astype(np.float64)
        out[:, 15] = self._model_match(pod, table, rows)
        out[:, 16] = 1.0 if not pod.archs else np.isin(table.arch[rows], [ARCHS.index(a) for a in pod.archs])
        out[:, 17], out[:, 18] = self._workload(pod, table, rows)
        out[:, 19] = table.slow[rows]
        out[:, 20] = trend
        out[:, 21] = table.gpu_count[rows] / 8.0
        out[:, 22] = np.maximum(whole, 0) / 8.0
        return out

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
