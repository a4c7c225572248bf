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


class BestFit:
    """Best-fit: the node left with the least free CPU, memory and GPU after placement."""

    name = "BestFit"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        f = used_fractions_after(pod, table, rows, gpu=True)
        return 100.0 * sum(f) / len(f)


class DotProduct:
    """Tetris-style alignment as in the FGD paper's baseline: smallest dot product of demand and free share."""

    name = "DotProduct"

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        cpu_cap = np.maximum(table.cpu_cap[rows], 1)
        mem_cap = np.maximum(table.mem_cap[rows], 1)
        gpu_cap = np.maximum(table.gpu_count[rows] * 1000, 1)
        dot = (
            (pod.cpu_milli / cpu_cap) * (table.cpu_free[rows] / cpu_cap)
            + (pod.memory_mib / mem_cap) * (table.mem_free[rows] / mem_cap)
            + (pod.gpu.total_milli / gpu_cap) * (table.gpu_free_total()[rows] / gpu_cap)
        )
        return 100.0 * (1.0 - np.clip(dot / 3.0, 0.0, 1.0))


class RandomScore:
    """Random-fit: a uniform score per node from the run's seeded generator."""

    name = "Random"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        return self.rng.uniform(0.0, 101.0, size=rows.size)
