"""Choosing clusters for replicas with the fedcore filter/score framework, at cluster level.

Each cluster becomes one pseudo-node per architecture pool (capacity summed over its ready
nodes, labels and verdict taints attached), so the same filter plugins answer "does it fit,
is it tainted, is the arch right, may it go there" and score plugins rank clusters. Replicas
are placed one at a time so spread scores see earlier ones. Every outcome carries reasons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from controlplane.registry import Placement, PlacementState
from controlplane.workloads import Policy, Spread, Workload
from fedcore.backends.model import NodeState
from fedcore.kubeobjects import arch_of
from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.nodetable import NodeTable, OvercommitError
from fedcore.pods import Pod
from fedcore.resources import GpuRequest, Resources
from fedcore.scheduling import profiles
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.framework import Profile, Scheduler, ScorePlugin
from fedcore.scheduling.scores import LeastAllocated
from fedcore.topology import Topology

EXCLUDED = Taint("fedplane.io/excluded", "", TaintEffect.NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What placement knows of a cluster: per-arch capacity, what is used, labels and taints."""

    name: str
    region: str
    pools: dict[str, Resources]
    used: Resources = Resources()
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    taints: tuple[Taint, ...] = ()
    reclaimed_milli: int = 0
    """CPU its online pods request but, by forecast, will not use (:mod:`controlplane.colocating`): batch may take it."""
    batch_used: Resources = Resources()
    """The part of ``used`` batch workloads request: online work outbids it (the colocation round evicts batch for a
    pending online pod), so online placement does not count it."""

    def for_batch(self) -> ClusterView:
        """This view as a batch workload sees it: its largest pool grown by the reclaimed CPU."""
        if not self.reclaimed_milli or not self.pools:
            return self
        largest = max(self.pools, key=lambda a: (self.pools[a].cpu_milli, a))
        pools = dict(self.pools)
        pools[largest] = pools[largest] + Resources(self.reclaimed_milli, 0)
        return replace(self, pools=pools, reclaimed_milli=0)

    def for_online(self) -> ClusterView:
        """This view as an online workload sees it: batch's requests are not in the way."""
        return replace(self, used=self.used - self.batch_used, batch_used=Resources()) if self.batch_used else self


@dataclass(frozen=True, slots=True)
class Choice:
    counts: dict[str, int]
    reasons: tuple[str, ...]
    unplaced: int = 0

    @property
    def ok(self) -> bool:
        return self.unplaced == 0 and bool(self.counts)


class ClusterPolicy:
    """Policy filter: allowed clusters and regions, and clusters to avoid. The same for every replica of the workload:
    computed once per table (a choice asks it for every replica; 100 replicas over 100 clusters: a fifth of its time)."""

    name = "ClusterPolicy"

    def __init__(self, workload: Workload) -> None:
        self.policy = workload.policy
        self._table: NodeTable | None = None
        self._mask: np.ndarray = np.zeros(0, dtype=bool)

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        if table is not self._table:
            self._table = table
            self._mask = np.array([not _breaks(self.policy, n.cluster, n.region) for n in table.nodes], dtype=bool)
            self._mask.flags.writeable = False  # callers combine it, never change it
        return self._mask


def _breaks(p: Policy, cluster: str, region: str) -> list[str]:
    """Which of the policy's cluster and region rules ``cluster`` breaks (empty: allowed)."""
    broken = []
    if p.clusters and cluster not in p.clusters:
        broken.append(f"only clusters {', '.join(p.clusters)} are allowed")
    if p.regions and region not in p.regions:
        broken.append(f"region {region} is not one of {', '.join(p.regions)}")
    if cluster in p.avoid_clusters:
        broken.append(f"{cluster} is avoided")
    return broken


def policy_violations(workload: Workload, view: ClusterView) -> list[str]:
    """Why the workload's placement policy forbids ``view`` (manual migrations check it too)."""
    p = workload.policy
    broken = _breaks(p, view.name, view.region)
    broken += [f"cluster label {k}={v} is required" for k, v in sorted(p.cluster_labels.items()) if view.labels.get(k) != v]
    return broken


class SpreadScore:
    """Spread replicas over clusters or regions (fewer of this workload there scores higher); pack otherwise."""

    name = "Spread"

    def __init__(self, spread: Spread, replicas: int) -> None:
        self.spread, self.replicas = spread, max(1, replicas)

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        counts = table.workload_count(pod.workload)
        if self.spread is Spread.NONE:
            per_cluster = np.bincount(table.cluster, weights=counts, minlength=len(table.clusters))
            packed: np.ndarray = 100.0 * per_cluster[table.cluster[rows]] / self.replicas
            return packed
        key = table.region if self.spread is Spread.REGIONS else table.cluster
        per_group = np.bincount(key, weights=counts, minlength=int(key.max()) + 1)
        spread: np.ndarray = 100.0 * (1.0 - per_group[key[rows]] / self.replicas)
        return spread


class LatencyScore:
    """Prefer clusters near the workload's home region (none given: all score the same)."""

    name = "Latency"

    def __init__(self, topology: Topology, home: str) -> None:
        self.topology, self.home = topology, home

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if not self.home:
            return np.full(rows.size, 100.0)
        ms = np.array([self.topology.latency(self.home, table.nodes[r].region) for r in rows])
        near: np.ndarray = 100.0 * (1.0 - np.minimum(ms, 200.0) / 200.0)
        return near


def pools_of(nodes: Iterable[NodeState]) -> tuple[dict[str, Resources], list[tuple[str, str]]]:
    """Ready capacity per architecture, and the nodes left out with why (never an exception).

    A node whose arch label fedplane does not know (``s390x``, a typo), a Windows node, or one
    whose allocatable was missing or unreadable is skipped; ``arm``/``aarch64``/``x86_64``
    are mapped to the arch they mean.
    """
    pools: dict[str, Resources] = {}
    skipped: list[tuple[str, str]] = []
    for n in nodes:
        if not n.ready:
            continue
        arch = arch_of(n.arch)
        if n.problem or arch is None:
            skipped.append((n.name, n.problem or f"unknown architecture {n.arch!r}"))
            continue
        pools[arch.value] = pools.get(arch.value, Resources()) + n.capacity
    return pools, skipped


def pseudo_nodes(views: Sequence[ClusterView], exclude: Iterable[str]) -> list[Node]:
    excluded = set(exclude)
    nodes = []
    for v in views:
        taints = v.taints + ((EXCLUDED,) if v.name in excluded else ())
        for arch, cap in sorted(v.pools.items()):
            nodes.append(Node(
                f"{v.name}/{arch}", max(0, cap.cpu_milli), max(0, cap.memory_mib), gpus=max(0, cap.gpu_milli // 1000),
                arch=Arch(arch), cluster=v.name, region=v.region, labels=dict(v.labels), taints=taints,
            ))
    return nodes


def _charge_used(table: NodeTable, views: Sequence[ClusterView]) -> None:
    """Reserve what is already used in each cluster (spread over its pools, largest first)."""
    for v in views:
        left = v.used
        for row in sorted((table.index[f"{v.name}/{a}"] for a in v.pools), key=lambda r: -int(table.cpu_cap[r])):
            take = Resources(
                min(left.cpu_milli, int(table.cpu_free[row])), min(left.memory_mib, int(table.mem_free[row])),
                0, min(left.gpu_milli // 1000, int(table.gpu_count[row])) * 1000,
            )
            if take == Resources():
                continue
            bg = Pod(f"used-{v.name}-{row}", take.cpu_milli, take.memory_mib, gpu=GpuRequest(take.gpu_milli // 1000, 1000 if take.gpu_milli else 0))
            try:
                table.allocate(bg, row)
            except OvercommitError:
                continue
            left = left - take


Scores = tuple[tuple[ScorePlugin, float], ...]


def learned_scores(profile: str) -> Scores:
    """The score plugins of scheduling profile ``profile`` (e.g. the learned policy; "" = none), built once by the caller."""
    return tuple(profiles.make(profile, profiles.ProfileContext()).scores) if profile else ()


def choose(
    workload: Workload, views: Sequence[ClusterView], topology: Topology, replicas: int | None = None,
    exclude: Iterable[str] = (), learned: Scores = (), already: dict[str, int] | None = None,
) -> Choice:
    """Pick clusters for ``replicas`` (default: all) replicas of ``workload``; never reserves anything.

    ``already`` counts replicas of this workload that stay where they are (spread scores see them).
    ``learned`` adds score plugins built once by the caller (:func:`learned_scores`).
    """
    want = workload.replicas if replicas is None else replicas
    views = [v.for_batch() if workload.template.qos == "batch" else v.for_online() for v in views]
    nodes = pseudo_nodes(views, exclude)
    if not nodes:
        return Choice({}, ("no registered cluster has reported capacity yet",), want)
    table = NodeTable(nodes)
    _charge_used(table, views)
    for cluster, count in (already or {}).items():
        rows = [table.index[n.name] for n in nodes if n.cluster == cluster]
        if rows:
            table.workload_count(workload.name)[rows[0]] += count
    scores: list[tuple[ScorePlugin, float]] = [
        (LeastAllocated(), 1.0), (LatencyScore(topology, workload.policy.home_region), 1.0),
        (SpreadScore(workload.policy.spread, workload.replicas), 2.0),
    ]
    scores += learned
    scheduler = Scheduler(Profile("cluster-level", [*default_filters(), ClusterPolicy(workload)], scores), table)
    counts: Counter[str] = Counter()
    reasons: list[str] = []
    for i in range(want):
        pod = workload.pod(i)
        decision = scheduler.schedule(pod)
        if decision.placement is None:
            reasons.append(f"{want - i} replica(s) unplaced: {decision.status.message(len(table))}")
            return Choice(dict(counts), tuple(reasons), want - i)
        node = table.nodes[decision.placement.node]
        if node.cluster not in counts:
            reasons.append(f"{node.cluster} ({node.region}): score {decision.score:.0f} over {len(table)} cluster pools")
        counts[node.cluster] += 1
    return Choice(dict(counts), tuple(reasons), 0)


def used_by_cluster(workloads: Iterable[Workload], placements: Iterable[Placement], qos: str = "") -> dict[str, Resources]:
    """What the placed replicas request, per cluster (the plane's own accounting, before agents report); ``qos``: only
    workloads of that class."""
    by_name = {w.name: w for w in workloads}
    used: dict[str, Resources] = {}
    for p in placements:
        w = by_name.get(p.workload)
        if w is not None and p.state is PlacementState.PLACED and (not qos or w.template.qos == qos):
            t = w.template
            used[p.cluster] = used.get(p.cluster, Resources()) + Resources(
                t.cpu_milli * p.replicas, t.memory_mib * p.replicas, 0, t.gpus * 1000 * p.replicas)
    return used
