"""Score plugins: the standard heuristics, each a pure function of the pod and the node table.

All scores are 0-100, higher is better, computed for the feasible ``rows`` only.
"""

from __future__ import annotations

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod


def used_fractions_after(pod: Pod, table: NodeTable, rows: np.ndarray, gpu: bool) -> list[np.ndarray]:
    """Per-dimension used/capacity on each row as if ``pod`` were placed there (GPU only where a row has GPUs)."""
    fractions = [
        (table.cpu_used[rows] + pod.cpu_milli) / np.maximum(table.cpu_cap[rows], 1),
        (table.mem_used[rows] + pod.memory_mib) / np.maximum(table.mem_cap[rows], 1),
    ]
    if gpu:
        cap = table.gpu_count[rows] * 1000
        used = cap - table.gpu_free_total()[rows] + pod.gpu.total_milli
        # Rows without GPUs count as fully used on this dimension: they neither help nor hurt packing.
        fractions.append(np.where(cap > 0, used / np.maximum(cap, 1), 1.0))
    return fractions


class LeastAllocated:
    """Kubernetes NodeResourcesFit/LeastAllocated over CPU and memory: spread load."""

    name = "LeastAllocated"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        f = used_fractions_after(pod, table, rows, gpu=False)
        return 100.0 * (1.0 - (f[0] + f[1]) / 2.0)


class MostAllocated:
    """Kubernetes NodeResourcesFit/MostAllocated over CPU and memory: pack load."""

    name = "MostAllocated"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        f = used_fractions_after(pod, table, rows, gpu=False)
        return 100.0 * (f[0] + f[1]) / 2.0


class BalancedAllocation:
    """Kubernetes NodeResourcesBalancedAllocation: prefer nodes whose CPU and memory use stay even."""

    name = "BalancedAllocation"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        f = used_fractions_after(pod, table, rows, gpu=False)
        return 100.0 * (1.0 - np.abs(f[0] - f[1]) / 2.0)


def max_spec(table: NodeTable) -> tuple[float, float]:
    """The fleet's largest node CPU (milli) and GPU (milli) capacity: the published BestFit/DotProd normaliser.

    The FGD simulator uses constants (128 cores, 8 GPUs) that are exactly the openb fleet's maxima.
    """
    return float(max(1, int(table.cpu_cap.max()))), float(max(1, int(table.gpu_count.max()) * 1000))


class BestFit:
    """Best-fit as the FGD simulator scores it: least CPU and GPU left after placement, each over the fleet's max spec, equal weights.

    ``spec`` fixes that normaliser (an edge agent's table holds only its own node: its control plane sends the
    fleet's, so it scores its row as a fleet-wide table would)."""

    name = "BestFit"

    def __init__(self, spec: tuple[float, float] | None = None) -> None:
        self.spec = spec

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        cpu_max, gpu_max = self.spec or max_spec(table)
        left = 0.5 * (table.cpu_free[rows] - pod.cpu_milli) / cpu_max
        left += 0.5 * (table.gpu_free_total()[rows] - pod.gpu.total_milli) / gpu_max
        return 100.0 * (1.0 - left)


class DotProduct:
    """Tetris alignment as the FGD simulator's DotProd: smallest dot product of (CPU, GPU) demand and free, over the max spec."""

    name = "DotProduct"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        cpu_max, gpu_max = max_spec(table)
        dot = (pod.cpu_milli / cpu_max) * (table.cpu_free[rows] / cpu_max)
        dot += (pod.gpu.total_milli / gpu_max) * (table.gpu_free_total()[rows] / gpu_max)
        return 100.0 * (1.0 - dot / 2.0)


class RandomScore:
    """Random-fit as the published simulator: one feasible node drawn uniformly scores 100, the rest 0."""

    name = "Random"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(rows.size)
        out[self.rng.integers(rows.size)] = 100.0
        return out
