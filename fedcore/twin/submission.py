"""The openb submission-order protocol of the ATC '23 FGD simulator, so published results can be reproduced.

Per seed: the pod list in a random permutation, then pods drawn with replacement until
requested milli-GPU reaches 1.3x the cluster's; pods never depart and a pod that does
not fit is dropped, never retried. Only nodes with GPUs take part and ties go to the smallest
node name. The allocation at an arrived load of L percent is read as the published analysis
does: the mean allocation after every pod whose arrived milli-GPU, in percent of the cluster's,
rounds to L (within one point when none does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling import profiles
from fedcore.scheduling.fragmentation import Fragmentation, PodTypes, fleet_fragmentation
from fedcore.scheduling.framework import Profile, Scheduler
from fedcore.stats import percentile
from fedcore.twin import bounds

OVERLOAD = 1.3


@dataclass(frozen=True, slots=True)
class SubmissionResult:
    profile: str
    seed: int
    gpu_alloc_ratio: float
    cpu_alloc_ratio: float
    mem_alloc_ratio: float
    unscheduled: int
    gpu_frag_ratio: float
    decision_us_p50: float
    decision_us_p99: float
    pods_submitted: int
    wall_s: float


def workload(pods: Sequence[Pod], seed: int, cluster_gpu_milli: int, overload: float = OVERLOAD) -> list[Pod]:
    """The seed's submission order: a permutation, then a resampled tail up to ``overload`` x cluster GPU.

    Raises ValueError when no pod asks for a GPU (the tail would never reach the cluster's GPU)."""
    if cluster_gpu_milli > 0 and not any(p.gpu.total_milli for p in pods):
        raise ValueError(f"the openb protocol fills the cluster's GPUs: none of the {len(pods)} pods asks for a GPU")
    rng = np.random.default_rng(seed)
    order = [pods[i] for i in rng.permutation(len(pods))]
    requested = sum(p.gpu.total_milli for p in order)
    k = 0
    while requested < overload * cluster_gpu_milli:
        pod = pods[int(rng.integers(len(pods)))]
        order.append(replace(pod, uid=f"{pod.uid}-r{k}"))
        requested += pod.gpu.total_milli
        k += 1
    return order


class ArrivedReading:
    """GPU allocation at an arrived load, read as the published analysis reads it (percent rounded to a whole point)."""

    def __init__(self, arrived_load: float, cluster_gpu_milli: int) -> None:
        self.target = round(100 * arrived_load)
        self.cluster = cluster_gpu_milli
        self.arrived = 0
        self.at: dict[int, list[float]] = {}
        self.reached: float | None = None

    def add(self, pod_gpu_milli: int, used_gpu_milli: int) -> bool:
        """Record the state after one pod; True once the arrived load is past the reading window."""
        self.arrived += pod_gpu_milli
        point = round(100 * self.arrived / self.cluster)
        if abs(point - self.target) <= 1:
            self.at.setdefault(point, []).append(used_gpu_milli / self.cluster)
        if self.reached is None and point >= self.target:
            self.reached = used_gpu_milli / self.cluster
        return point > self.target + 1

    def value(self) -> float:
        """Mean allocation at the target point, else over the points within one of it (the published fallback).

        A fleet so small that one pod jumps over the whole window reads the allocation when the target was reached.
        """
        values = self.at.get(self.target) or [v for vs in self.at.values() for v in vs]
        if values:
            return float(np.mean(values))
        return self.reached if self.reached is not None else 0.0


def arrived(pods: Sequence[Pod], seed: int, nodes: Sequence[Node], arrived_load: float = 1.0) -> list[Pod]:
    """The seed's pods that have arrived by the end of the reading window at ``arrived_load`` (what a bound may place)."""
    cluster = sum(n.gpus for n in gpu_nodes(nodes)) * MILLI
    out: list[Pod] = []
    total = 0
    for pod in workload(pods, seed, cluster):
        total += pod.gpu.total_milli
        if round(100 * total / cluster) > round(100 * arrived_load):
            break
        out.append(pod)
    return out


def upper_bound(pods: Sequence[Pod], seed: int, nodes: Sequence[Node], arrived_load: float = 1.0) -> float:
    """The configuration-LP bound on the GPU allocation any policy could read for this seed and load."""
    return bounds.gpu_alloc_bound(arrived(pods, seed, nodes, arrived_load), gpu_nodes(nodes))


def gpu_nodes(nodes: Sequence[Node]) -> list[Node]:
    return [n for n in nodes if n.gpus > 0]


def run(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    profile: str | Callable[[profiles.ProfileContext], Profile],
    seed: int,
    arrived_load: float = 1.0,
    on_pod: Callable[[float, NodeTable], None] | None = None,
) -> SubmissionResult:
    """Schedule the seed's submission order with ``profile`` (a name, or a factory for a profile built
    by the caller) and read the allocation at ``arrived_load``.

    ``on_pod(arrived, table)`` is called after each pod with the share of cluster GPU arrived so far.
    """
    if not 0 < arrived_load <= OVERLOAD:
        raise ValueError(f"arrived load must be in (0, {OVERLOAD}], got {arrived_load}")
    fleet = gpu_nodes(nodes)
    if not fleet:
        raise ValueError("the openb protocol needs nodes with GPUs")
    table = NodeTable(fleet)
    cluster_gpu = int(table.gpu_count.sum()) * 1000
    order = workload(pods, seed, cluster_gpu)
    ctx = profiles.ProfileContext(seed, pods, fleet)
    made = profiles.make(profile, ctx) if isinstance(profile, str) else profile(ctx)
    scheduler = Scheduler(made, table, seed, by_name=True)
    start = time.perf_counter()
    reading = ArrivedReading(arrived_load, cluster_gpu)
    unscheduled = 0
    submitted = 0
    times = []
    for pod in order:
        decision = scheduler.schedule(pod)
        times.append(decision.seconds)
        submitted += 1
        unscheduled += decision.placement is None
        if on_pod is not None:
            on_pod((reading.arrived + pod.gpu.total_milli) / cluster_gpu, table)
        if reading.add(pod.gpu.total_milli, cluster_gpu - int(table.gpu_free_total().sum())):
            break
    wall = time.perf_counter() - start
    ratios = {**table.alloc_ratios(), "gpu": reading.value()}
    frag = fleet_fragmentation(Fragmentation(PodTypes.from_pods(pods)), table)
    micros = np.array(times) * 1e6
    return SubmissionResult(
        made.name, seed, ratios["gpu"], ratios["cpu"], ratios["mem"], unscheduled, frag,
        percentile(micros, 50), percentile(micros, 99), submitted, wall,
    )
