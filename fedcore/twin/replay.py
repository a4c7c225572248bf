"""Discrete-event time replay: pods arrive and depart at trace times; unschedulable pods wait and retry.

Deterministic: events are ordered by (time, sequence) and the only randomness is the
seeded scheduler tie-break. A crashed node or an outaged cluster evicts its pods, which
wait again from the moment of eviction; a partitioned region keeps its pods running
but takes no new ones until it heals; a slow node is only marked (scores may use it).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable, Placement
from fedcore.pods import Pod
from fedcore.scheduling import profiles
from fedcore.scheduling.framework import Scheduler
from fedcore.stats import jain, percentile
from fedcore.traces.dlrm import Instance
from fedcore.twin.faults import Fault, FaultKind, rows_hit
from fedcore.twin.pending import PendingQueue

ARRIVE, DEPART, FAULT_START, FAULT_END, SAMPLE = range(5)


@dataclass(slots=True)
class Timeline:
    """Samples of the fleet over simulated time, for plots."""

    t: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    mem: list[float] = field(default_factory=list)
    gpu: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    profile: str
    events: int
    sim_wall_s: float
    events_per_s: float
    wait_s_p50: float
    wait_s_p99: float
    unscheduled: int
    cpu_alloc_ratio_mean: float
    mem_alloc_ratio_mean: float
    gpu_alloc_ratio_mean: float
    jain_fairness: float
    decision_us_p50: float
    decision_us_p99: float
    evicted: int
    timeline: Timeline

    def summary(self) -> dict[str, float | int | str]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "timeline"}


class Replay:
    """One replay of ``instances`` over ``nodes`` with a scheduling profile and optional faults."""

    def __init__(
        self,
        nodes: Sequence[Node],
        instances: Sequence[Instance],
        profile: str,
        seed: int = 0,
        faults: Sequence[Fault] = (),
        samples: int = 200,
        workload: Sequence[Pod] | None = None,
    ) -> None:
        """``workload``: the pods the profile may learn typical shapes from (default: every instance's)."""
        self.table = NodeTable(nodes)
        self.instances = list(instances)
        self.profile = profile
        ctx = profiles.ProfileContext(seed, [i.pod for i in self.instances] if workload is None else list(workload))
        self.scheduler = Scheduler(profiles.make(profile, ctx), self.table, seed)
        self.faults = list(faults)
        for fault in self.faults:
            rows_hit(fault, self.table)  # validate targets before running
        self.samples = samples
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.placed: dict[int, Placement] = {}
        self.pending = PendingQueue()
        self.unplaced_departures = 0
        self.waits: list[float] = []
        self.decisions: list[float] = []
        self.evicted = 0
        self.timeline = Timeline()

    def push(self, at: float, kind: int, ref: int) -> None:
        heapq.heappush(self.events, (at, self.seq, kind, ref))
        self.seq += 1

    def run(self, on_event: Callable[[float], None] | None = None) -> ReplayResult:
        end = max((i.deleted or i.created) for i in self.instances)
        for ref, inst in enumerate(self.instances):
            self.push(inst.created, ARRIVE, ref)
            if inst.deleted is not None:
                self.push(inst.deleted, DEPART, ref)
        for ref, fault in enumerate(self.faults):
            self.push(fault.at, FAULT_START, ref)
            if fault.duration != float("inf"):
                self.push(fault.at + fault.duration, FAULT_END, ref)
        for k in range(self.samples + 1):
            self.push(end * k / self.samples, SAMPLE, k)
        handled = 0
        start = time.perf_counter()
        while self.events:
            now, _, kind, ref = heapq.heappop(self.events)
            if kind == ARRIVE:
                self.pending.add(ref, self.instances[ref].pod, now)
                self.try_place(ref, now)
                handled += 1
            elif kind == DEPART:
                self.depart(ref, now)
                handled += 1
            elif kind == FAULT_START:
                self.fault(self.faults[ref], now, start=True)
            elif kind == FAULT_END:
                self.fault(self.faults[ref], now, start=False)
            else:
                self.sample(now)
            if on_event is not None and kind in (ARRIVE, DEPART):
                on_event(now)
        wall = time.perf_counter() - start
        return self.result(handled, wall)

    def try_place(self, ref: int, now: float, explain: bool = True) -> bool:
        pod = self.instances[ref].pod
        decision = self.scheduler.schedule(pod, explain=explain)
        self.decisions.append(decision.seconds)
        if decision.placement is None:
            return False
        self.placed[ref] = decision.placement
        since = self.pending.pop(ref)
        self.waits.append(now - (now if since is None else since))
        return True

    def retry_on(self, node: int, now: float) -> None:
        """After ``node`` freed resources, retry the waiting pods that fit it now, in the profile's queue order."""
        tried: set[int] = set()
        while True:
            # Each placement lands on ``node`` (no other node changed), so re-read what still fits it.
            fresh = [r for r in self.pending.fitting(self.table, node, self.scheduler.profile.queue, now) if r not in tried]
            if not fresh:
                return
            for ref in fresh:
                tried.add(ref)
                if self.try_place(ref, now, explain=False):
                    break
            else:
                return

    def retry_all(self, now: float) -> None:
        """After a fleet-wide change (a fault heals), retry every waiting pod."""
        for ref in self.pending.in_order():
            self.try_place(ref, now, explain=False)

    def depart(self, ref: int, now: float) -> None:
        placement = self.placed.pop(ref, None)
        if placement is None:
            if self.pending.pop(ref) is not None:
                self.unplaced_departures += 1  # left before it was ever placed
            return
        self.table.release(self.instances[ref].pod, placement)
        self.retry_on(placement.node, now)

    def fault(self, fault: Fault, now: float, start: bool) -> None:
        rows = rows_hit(fault, self.table)
        if fault.kind is FaultKind.SLOW_NODE:
            self.table.set_slow(rows, start)
            return
        self.table.alive[rows] = not start
        if start and fault.kind is not FaultKind.REGION_PARTITION:
            hit = set(rows.tolist())
            for ref in [r for r, p in self.placed.items() if p.node in hit]:
                self.table.release(self.instances[ref].pod, self.placed.pop(ref))
                self.pending.add(ref, self.instances[ref].pod, now)
                self.evicted += 1
        self.retry_all(now)

    def sample(self, now: float) -> None:
        ratios = self.table.alloc_ratios()
        tl = self.timeline
        tl.t.append(now)
        tl.cpu.append(ratios["cpu"])
        tl.mem.append(ratios["mem"])
        tl.gpu.append(ratios["gpu"])
        tl.pending.append(len(self.pending))
        tl.running.append(len(self.placed))

    def result(self, handled: int, wall: float) -> ReplayResult:
        submitted = Counter(i.pod.tenant for i in self.instances)
        never = Counter(pod.tenant for pod in self.pending.pods.values())
        served = [(submitted[t] - never[t]) / submitted[t] for t in submitted]
        micros = np.array(self.decisions) * 1e6
        return ReplayResult(
            profile=self.profile,
            events=handled,
            sim_wall_s=wall,
            events_per_s=handled / wall if wall else 0.0,
            wait_s_p50=percentile(self.waits, 50),
            wait_s_p99=percentile(self.waits, 99),
            unscheduled=len(self.pending) + self.unplaced_departures,
            cpu_alloc_ratio_mean=float(np.mean(self.timeline.cpu)),
            mem_alloc_ratio_mean=float(np.mean(self.timeline.mem)),
            gpu_alloc_ratio_mean=float(np.mean(self.timeline.gpu)),
            jain_fairness=jain(served),
            decision_us_p50=percentile(micros, 50),
            decision_us_p99=percentile(micros, 99),
            evicted=self.evicted,
            timeline=self.timeline,
        )
