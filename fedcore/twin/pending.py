"""Waiting pods, indexed so a change on one node retries only the pods that could now fit there.

A pod that failed its last attempt can only become schedulable through a node that changed
since (every other node already rejected it), so after a departure from node n only the
pods whose requests fit n's new free resources are retried. Requests are kept as arrays so
that check is one vectorised comparison, not a Python loop over thousands of waiting pods.
"""

from __future__ import annotations

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.framework import QueueSortPlugin, Waiting


class PendingQueue:
    def __init__(self) -> None:
        self.since: dict[int, float] = {}
        self.pods: dict[int, Pod] = {}
        self._arrays: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return len(self.since)

    def __contains__(self, ref: int) -> bool:
        return ref in self.since

    def add(self, ref: int, pod: Pod, now: float) -> None:
        self.since[ref] = now
        self.pods[ref] = pod
        self._arrays = None

    def pop(self, ref: int) -> float | None:
        """Remove ``ref``; returns when it started waiting, or None if it was not waiting."""
        self.pods.pop(ref, None)
        since = self.since.pop(ref, None)
        if since is not None:
            self._arrays = None
        return since

    def in_order(self) -> list[int]:
        """Waiting pods, longest-waiting first (ties by reference, for determinism)."""
        return sorted(self.since, key=lambda r: (self.since[r], r))

    def _requests(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            refs = self.in_order()
            pods = [self.pods[r] for r in refs]
            self._arrays = (
                np.array(refs, dtype=np.int64),
                np.array([p.cpu_milli for p in pods], dtype=np.int64),
                np.array([p.memory_mib for p in pods], dtype=np.int64),
                np.array([p.disk_mib for p in pods], dtype=np.int64),
                np.array([p.gpu.count for p in pods], dtype=np.int64),
                np.array([p.gpu.milli_each for p in pods], dtype=np.int64),
                np.array([self.since[r] for r in refs], dtype=np.float64),
            )
        return self._arrays

    def fitting(self, table: NodeTable, node: int, queue: QueueSortPlugin | None = None, now: float = 0.0) -> list[int]:
        """Waiting pods whose requests fit ``node`` as it is now: oldest first, or in ``queue``'s order at ``now``."""
        if not self.since or not table.alive[node]:
            return []
        refs, cpu, mem, disk, count, milli, since = self._requests()
        row = table.gpu_free[node]
        whole = int((row == MILLI).sum())
        best_share = int(row.max())
        gpu_ok = (count == 0) | ((count == 1) & (milli <= best_share)) | ((milli == MILLI) & (count <= whole))
        ok = (
            (cpu <= table.cpu_free[node])
            & (mem <= table.mem_free[node])
            & (disk <= table.disk_free[node])
            & gpu_ok
        )
        if queue is None:
            return refs[ok].tolist()
        waiting = Waiting(cpu[ok], mem[ok], count[ok], milli[ok], now - since[ok])
        order = np.argsort(-queue.priority(waiting, table, node), kind="stable")
        return refs[ok][order].tolist()
