"""The openb submission-order protocol of the ATC '23 FGD simulator, so published results can be reproduced.

Per seed: the pod list in a random permutation, then pods drawn with replacement until
requested milli-GPU reaches 1.3x the cluster's; pods never depart and a pod that does
not fit is dropped, never retried; the allocation is read once arrived milli-GPU reaches
the requested share of the cluster. Only nodes with GPUs take part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import profiles
from fedcore.scheduling.fragmentation import Fragmentation, PodTypes, fleet_fragmentation
from fedcore.scheduling.framework import Profile, Scheduler
from fedcore.stats import percentile

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
    """The seed's submission order: a permutation, then a resampled tail up to ``overload`` x cluster GPU."""
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
    ctx = profiles.ProfileContext(seed, pods)
    made = profiles.make(profile, ctx) if isinstance(profile, str) else profile(ctx)
    scheduler = Scheduler(made, table, seed)
    start = time.perf_counter()
    arrived = 0
    unscheduled = 0
    submitted = 0
    times = []
    for pod in order:
        decision = scheduler.schedule(pod)
        times.append(decision.seconds)
        submitted += 1
        unscheduled += decision.placement is None
        arrived += pod.gpu.total_milli
        if on_pod is not None:
            on_pod(arrived / cluster_gpu, table)
        if arrived >= arrived_load * cluster_gpu:
            break
    wall = time.perf_counter() - start
    ratios = table.alloc_ratios()
    frag = fleet_fragmentation(Fragmentation(PodTypes.from_pods(pods)), table)
    micros = np.array(times) * 1e6
    return SubmissionResult(
        made.name, seed, ratios["gpu"], ratios["cpu"], ratios["mem"], unscheduled, frag,
        percentile(micros, 50), percentile(micros, 99), submitted, wall,
    )
