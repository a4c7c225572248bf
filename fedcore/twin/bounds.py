"""What no policy can beat, so every result reads against a limit.

* :func:`gpu_alloc_bound`: an upper bound on the openb GPU allocation at an arrived load, the
  configuration (cutting-stock) LP over the arrived pods. Each GPU device holds one *pattern*
  (a multiset of GPU shares summing to at most one GPU) or one whole-GPU pod's device; a pod is
  placed fractionally or not at all; the fleet's total devices, CPU and memory bound the lot.
  Node grouping (a pod's CPU and its GPU on one node, k whole GPUs on one node) is relaxed, so
  any real placement is a feasible LP point. Patterns come from column generation: a knapsack
  over the shares, priced with the LP's duals, until no pattern improves the LP.
* :func:`fluid_replay`: a time replay on a pooled fleet (one bin per resource, no node
  boundaries), waiting pods admitted oldest first with backfill. It shows what demand against
  capacity over time allows: the never-placed pods and waits that remain when fragmentation
  across nodes is not there at all.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.stats import percentile
from fedcore.traces.dlrm import Instance

ROUNDS = 200
"""Column-generation rounds at most (openb converges in a few dozen)."""


class BoundUnavailable(RuntimeError):
    """scipy (the ``train`` extra) is not installed, so the LP cannot be solved."""


def _knapsack(sizes: np.ndarray, values: np.ndarray) -> tuple[float, np.ndarray]:
    """Unbounded knapsack of capacity one GPU: the best value and the counts of each size."""
    best = np.zeros(MILLI + 1)
    choice = np.full(MILLI + 1, -1, dtype=np.int64)
    for c in range(1, MILLI + 1):
        best[c], choice[c] = best[c - 1], -1
        for i, (size, value) in enumerate(zip(sizes, values)):
            if size <= c and best[c - size] + value > best[c] + 1e-12:
                best[c], choice[c] = best[c - size] + value, i
    counts = np.zeros(sizes.size, dtype=np.int64)
    c = MILLI
    while c > 0:
        if choice[c] < 0:
            c -= 1
            continue
        counts[choice[c]] += 1
        c -= int(sizes[choice[c]])
    return float(best[MILLI]), counts


def gpu_alloc_bound(pods: Sequence[Pod], nodes: Sequence[Node]) -> float:
    """Upper bound (0-1) on the share of the fleet's GPU that ``pods`` (the arrived ones) could occupy at once."""
    try:
        from scipy.optimize import linprog
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BoundUnavailable("the LP bound needs scipy (pip install 'fedplane[train]')") from exc
    devices = sum(n.gpus for n in nodes)
    if devices == 0:
        return 0.0
    classes = Counter((p.gpu.milli_each, p.gpu.count, p.cpu_milli, p.memory_mib) for p in pods if p.gpu.count)
    keys = list(classes)
    n_cls = len(keys)
    shares = np.array(sorted({m for m, k, _, _ in keys if m < MILLI}), dtype=np.int64)
    share_row = {int(m): i for i, m in enumerate(shares)}
    patterns: list[np.ndarray] = []
    for i, m in enumerate(shares):
        pattern = np.zeros(shares.size, dtype=np.int64)
        pattern[i] = MILLI // m
        patterns.append(pattern)
    cpu_total = sum(n.cpu_milli for n in nodes)
    mem_total = sum(n.memory_mib for n in nodes)
    # Rows: one per share (placed <= packed), devices, CPU, memory. Columns: classes, then patterns.
    gain = np.array([m * k for m, k, _, _ in keys], dtype=np.float64)
    upper = np.array([classes[key] for key in keys], dtype=np.float64)
    value = 0.0
    for _ in range(ROUNDS):
        n_pat = len(patterns)
        a = np.zeros((shares.size + 3, n_cls + n_pat))
        for j, (m, k, cpu, mem) in enumerate(keys):
            if m < MILLI:
                a[share_row[m], j] = 1.0
            else:
                a[shares.size, j] = k
            a[shares.size + 1, j] = cpu
            a[shares.size + 2, j] = mem
        for p, pattern in enumerate(patterns):
            a[: shares.size, n_cls + p] = -pattern
            a[shares.size, n_cls + p] = 1.0
        b = np.concatenate([np.zeros(shares.size), [devices, cpu_total, mem_total]])
        bounds = [(0.0, u) for u in upper] + [(0.0, None)] * n_pat
        res = linprog(np.concatenate([-gain, np.zeros(n_pat)]), A_ub=a, b_ub=b, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"the allocation LP failed: {res.message}")
        value = -float(res.fun)
        if shares.size == 0:
            break
        duals = -np.asarray(res.ineqlin.marginals)
        price, counts = _knapsack(shares, duals[: shares.size])
        if price <= duals[shares.size] + 1e-9:
            break
        patterns.append(counts)
    return min(1.0, value / (devices * MILLI))


@dataclass(frozen=True, slots=True)
class FluidResult:
    never_placed: int
    wait_s_mean: float
    wait_s_p50: float
    wait_s_p90: float
    wait_s_p99: float


def fluid_replay(nodes: Sequence[Node], instances: Sequence[Instance], first_counted: int, end: float) -> FluidResult:
    """Replay ``instances`` (in creation order) on the fleet pooled into one bin per resource.

    A waiting pod is admitted as soon as the pool holds its request (oldest first, later ones
    backfill); one never admitted waits until it leaves or ``end``. Waits are those of the
    instances from ``first_counted`` on.
    """
    cap = np.array([sum(n.cpu_milli for n in nodes), sum(n.memory_mib for n in nodes), sum(n.gpus for n in nodes) * MILLI], dtype=np.int64)
    need = np.array([(i.pod.cpu_milli, i.pod.memory_mib, i.pod.gpu.total_milli) for i in instances], dtype=np.int64).reshape(-1, 3)
    free = cap.copy()
    events: list[tuple[float, int, int]] = []
    for ref, inst in enumerate(instances):
        heapq.heappush(events, (inst.created, 1, ref))
        if inst.deleted is not None:
            heapq.heappush(events, (inst.deleted, 0, ref))
    since: dict[int, float] = {}
    running: set[int] = set()
    wait = np.zeros(len(instances))
    never = np.zeros(len(instances), dtype=bool)

    def admit(now: float) -> None:
        nonlocal free
        refs = np.fromiter(sorted(since), dtype=np.int64, count=len(since))
        for ref in refs[(need[refs] <= free).all(axis=1)].tolist():
            if (need[ref] <= free).all():
                free = free - need[ref]
                running.add(ref)
                wait[ref] = now - since.pop(ref)

    while events:
        now, kind, ref = heapq.heappop(events)
        if kind == 1:
            since[ref] = now
            admit(now)
        elif ref in running:
            running.discard(ref)
            free = free + need[ref]
            if since:
                admit(now)
        elif ref in since:
            wait[ref], never[ref] = now - since.pop(ref), True
    for ref, at in since.items():
        wait[ref], never[ref] = end - at, True
    counted = wait[first_counted:]
    return FluidResult(
        int(never[first_counted:].sum()), float(counted.mean()) if counted.size else 0.0,
        percentile(counted, 50), percentile(counted, 90), percentile(counted, 99),
    )
