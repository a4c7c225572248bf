"""Online and batch on one fleet, in the reconcile tick: reclaimed capacity per node and the quota auction.

A round runs every ``round_s`` on each cluster that runs a batch workload or whose agents measure their online use.
Each node's online use (its agent's measurement, in its report) feeds the node's forecast
(:class:`controlplane.reclaiming.NodeReclaim`, one sample per ``stride_s``); the forecast peak takes the node first
and what is left is the batch supply. The auction (:class:`controlplane.auctions.Auction`) fits the running batch pods
into it, suppressing them (the cgroup quota cut towards a floor) and then preempting them lowest bid first (a batch
workload's priority is its bid) at a bounded rate per node; an online pod pending since the last round, which batch
keeps off every node (by the scheduler's own filters: resources, taints, selectors, architecture), has batch evicted
for it the same way. Each preemption is an eviction at the back end, a
decision (``preempt``) and a counter. The node's offer — reclaimed CPU for the agents' placement, the batch cgroup
quota for their isolation — rides on the ack of the agent's next report (:func:`controlplane.service.report_agent`),
and a bind asking more reclaimed CPU than the current offer is refused (:meth:`Colocation.refusal`). New batch pods
are not cleared here: agents place them (claims CRDT, one winner) against escrow plus the offer; the next round
counts them as running.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controlplane.auctions import BURST, EVICTIONS_PER_S, MIN_SHARE, Auction, Grant
from controlplane.evidence import AgentReport, EvidenceBook
from controlplane.metrics import Metrics
from controlplane.reclaiming import NodeReclaim
from controlplane.registry import DecisionRecord, Placement, PlacementState
from controlplane.workloads import Workload
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend
from fedcore.backends.model import EvictOutcome, EvictResult, NodeState, Phase, PodState
from fedcore.backends.twin import TwinCluster
from fedcore.nodetable import NodeTable, OvercommitError
from fedcore.resources import Resources
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.framework import Profile, Scheduler

BATCH = "batch"


@dataclass(frozen=True, slots=True)
class ColocationConfig:
    stride_s: float = 30.0
    """Seconds between a node's online usage samples (the forecast's stride: 10 strides ahead, 64 to calibrate)."""
    round_s: float = 5.0
    """Seconds between a cluster's rounds (each lists its pods; the agents' cgroup weights keep online ahead meanwhile)."""
    evictions_per_s: float = EVICTIONS_PER_S
    burst: int = BURST
    min_share: float = MIN_SHARE
    headroom_milli: int = 0
    """CPU kept free of batch on every node whatever the forecast says (system daemons, the agent)."""

    def __post_init__(self) -> None:
        if not self.stride_s > 0 or not self.round_s >= 0 or not self.evictions_per_s >= 0 or self.burst < 1 or not 0 <= self.min_share <= 1 or self.headroom_milli < 0:
            raise ValueError(f"colocation: stride_s > 0, round_s >= 0, evictions_per_s >= 0, burst >= 1, min_share in [0, 1], headroom >= 0; got {self}")


@dataclass(frozen=True, slots=True)
class Offer:
    """What a node's batch pods may hold: ``reclaimed_milli`` beyond escrow (placement), ``quota_milli`` in all (cgroups:
    the supply, or the suppressed floors of pods the eviction budget has not let go yet)."""

    reclaimed_milli: int
    quota_milli: int


@dataclass(frozen=True, slots=True)
class Share:
    """A batch workload on one cluster: the CPU its pods hold on reclaimed capacity now, and its pods preempted there."""

    reclaimed_milli: int = 0
    preemptions: int = 0


@dataclass(slots=True)
class _Node:
    reclaim: NodeReclaim
    sampled_at: float = float("-inf")


@dataclass(slots=True)
class Colocation:
    """Per cluster and node: forecasts, auctions, offers; per workload and cluster: its share (``placements``)."""

    metrics: Metrics
    record: Callable[[DecisionRecord], None]
    config: ColocationConfig = ColocationConfig()
    nodes: dict[tuple[str, str], _Node] = field(default_factory=dict)
    auctions: dict[str, Auction] = field(default_factory=dict)
    offers: dict[tuple[str, str], Offer] = field(default_factory=dict)
    shares: dict[tuple[str, str], Share] = field(default_factory=dict)
    waiting: dict[str, set[str]] = field(default_factory=dict)
    """Each cluster's online pods pending at its last round (one round's grace for the agents to place them)."""
    rounds: dict[str, float] = field(default_factory=dict)
    """When each cluster's last round ran."""

    def offer(self, cluster: str, node: str) -> Offer | None:
        """The node's batch offer (None: no batch runs in its cluster, the agent places on escrow alone)."""
        return self.offers.get((cluster, node))

    def refusal(self, cluster: str, node: str, reclaimed_milli: int) -> str:
        """Why a bind may not take ``reclaimed_milli`` of the node's reclaimed CPU now ("" when it may): an agent's offer is
        as old as its last ack, and a pod just preempted must not come straight back on the capacity it lost."""
        offer = self.offers.get((cluster, node))
        if reclaimed_milli and (offer is None or reclaimed_milli > offer.reclaimed_milli):
            return f"node {node} offers {offer.reclaimed_milli if offer else 0}m of reclaimed CPU now, not {reclaimed_milli}m"
        return ""

    def reclaimed(self, cluster: str) -> int:
        """The cluster's reclaimed CPU, over its nodes (what batch admission may count on beyond unrequested capacity)."""
        return sum(o.reclaimed_milli for (c, _), o in self.offers.items() if c == cluster)

    def held(self, cluster: str) -> int:
        """The CPU the cluster's batch pods hold on reclaimed capacity at its last round (booked outside allocatable)."""
        return sum(s.reclaimed_milli for (_, c), s in self.shares.items() if c == cluster)

    def share(self, workload: str, cluster: str) -> Share:
        return self.shares.get((workload, cluster), Share())

    def round(self, now: float, clusters: Sequence[str], backends: Callable[[str], ClusterBackend], evidence: EvidenceBook,
              workloads: Mapping[str, Workload], placements: Sequence[Placement]) -> None:
        """One round on every cluster of ``clusters`` (those not failed) that runs a batch workload or whose agents measure
        their online use (isolation on: the forecast learns before batch arrives); the others get no offer."""
        batch = {p.cluster for p in placements if p.state is PlacementState.PLACED and p.workload in workloads
                 and workloads[p.workload].template.qos == BATCH}
        active = set()
        for cluster in clusters:
            if cluster in batch or any(r.summary.online_used_milli is not None for r in evidence.latest(cluster)):
                active.add(cluster)
                if now < self.rounds.get(cluster, float("-inf")) + self.config.round_s:
                    continue
                self.rounds[cluster] = now
                reports = [a.report for a in evidence.agents(cluster, now) if a.fresh]
                self.tick(now, cluster, backends(cluster), evidence.listing(cluster), reports, workloads)
        for cluster in {c for c, _ in self.offers} - active:
            self.offers = {k: v for k, v in self.offers.items() if k[0] != cluster}
            self.metrics.reclaimed.labels(cluster).set(0)

    def tick(self, now: float, cluster: str, backend: ClusterBackend, listing: Sequence[NodeState],
             reports: Sequence[AgentReport], workloads: Mapping[str, Workload]) -> None:
        """One round on ``cluster`` (``listing``: its nodes as last probed; ``reports``: its agents' fresh ones)."""
        try:
            listed = backend.list_pods()
        except errors.BackendError:
            return  # unreachable now: offers stand until the verdict or the next round says more
        used = {r.node: r.summary.online_used_milli for r in reports}
        online: dict[str, Resources] = {}
        online_pods: list[PodState] = []
        running: dict[str, list[Grant]] = {}
        epochs: dict[str, PodState] = {}
        waiting: list[PodState] = []
        for p in listed:
            w = workloads.get(p.workload)
            batch = w is not None and w.template.qos == BATCH
            if p.phase is Phase.PENDING and not p.node and not batch:
                waiting.append(p)
            elif p.phase is not Phase.RUNNING or not p.node:
                continue
            elif batch:
                running.setdefault(p.node, []).append(Grant(p.name, p.node, p.request.cpu_milli, max(0.0, float(w.template.priority)), p.request.cpu_milli))
                epochs[p.name] = p
            else:  # a pod nobody classed is online: never reclaimed from batch's side
                online[p.node] = online.get(p.node, Resources()) + p.request
                online_pods.append(p)
        online_request = {n: r.cpu_milli for n, r in online.items()}
        supply: dict[str, int] = {}
        reclaimed: dict[str, int] = {}
        for n in listing:
            if n.capacity.cpu_milli <= 0 or not n.ready:  # a node down is the verdicts' and the agents' to handle
                continue
            node = self._node(cluster, n.name, n.capacity.cpu_milli, now, used.get(n.name))
            request = online_request.get(n.name, 0)
            supply[n.name] = node.reclaim.batch_supply(request)
            if not node.reclaim.forecast.calibrated:  # still learning (a new leader relearns): nothing new is reclaimed, but
                supply[n.name] = max(supply[n.name], sum(g.request_milli for g in running.get(n.name, ())))  # batch stays
            reclaimed[n.name] = node.reclaim.reclaimed(request)
        grants = [g for node, gs in running.items() if node in supply for g in gs]
        auction = self.auctions.setdefault(cluster, Auction(self.config.evictions_per_s, self.config.burst, self.config.min_share))
        booked = {r.node: r.summary.allocated.cpu_milli for r in reports}
        cleared = auction.clear(now, supply, grants, [], self._outbid(cluster, waiting, listing, online_pods, running, supply, booked))
        for e in cleared.evictions:
            self._preempt(now, cluster, backend, epochs[e.pod], e.reason)
        offers = {k: v for k, v in self.offers.items() if k[0] != cluster}
        for name in supply:  # the quota: the supply (batch pods placed before the next round share it), or the floors the
            offers[(cluster, name)] = Offer(reclaimed[name], max(supply[name], cleared.quota(name)))  # bucket kept
        self.offers = offers  # one swap: acks and admission read offers off the tick's lock
        self.metrics.reclaimed.labels(cluster).set(sum(reclaimed.values()))
        self._shares(cluster, listing, online_request, cleared.grants, epochs)

    def _outbid(self, cluster: str, waiting: Sequence[PodState], listing: Sequence[NodeState], online: Sequence[PodState],
                running: Mapping[str, Sequence[Grant]], supply: Mapping[str, int], booked: Mapping[str, int]) -> dict[str, int]:
        """CPU batch must give back, per node, for online pods pending since the last round that fit on no node as it is
        but would on one without its batch (the one running the most): online outbids batch for requests as for use.
        Fit is the scheduler's (:func:`fedcore.scheduling.filters.default_filters`: resources and GPU devices, taints,
        selectors, architecture, replicas per node) on the nodes as their online pods leave them, so a pod pending for
        another reason costs batch nothing. ``booked``: what each node's agent reports its pods hold of its allocatable
        (batch only its part outside reclaimed CPU); a node without a report counts its batch pods' whole requests. A pod
        or node the back end gives no scheduling spec for is not weighed."""
        before, self.waiting[cluster] = self.waiting.get(cluster, set()), {p.name for p in waiting}
        due = sorted((p.spec for p in waiting if p.name in before and p.spec is not None), key=lambda s: (-s.cpu_milli, s.uid))
        nodes = [n.spec for n in listing if n.name in supply and n.spec is not None]
        if not due or not nodes:
            return {}
        table = NodeTable(nodes)  # what online leaves, batch or not
        for p in online:
            if p.spec is not None and p.node in table.index:
                try:
                    table.allocate(p.spec, table.index[p.node])
                except OvercommitError:
                    table.alive[table.index[p.node]] = False  # online alone overfills it as listed: no room there
        fit = Scheduler(Profile("fit", default_filters(), []), table)
        batch = [sum(g.request_milli for g in running.get(n.name, ())) for n in nodes]
        escrow = [n.cpu_milli - booked[n.name] if n.name in booked else int(table.cpu_free[i]) - batch[i] for i, n in enumerate(nodes)]
        free = [0] * len(nodes)
        for spec in due:
            rows = [int(i) for i in np.flatnonzero(fit.feasible(spec))]
            if any(escrow[i] >= spec.cpu_milli for i in rows):
                continue  # there is room for it as things are: the agents' to place
            room = [i for i in rows if batch[i] > free[i]]
            if room:
                i = max(room, key=lambda i: (batch[i] - free[i], nodes[i].name))
                free[i] += spec.cpu_milli
                escrow[i] -= spec.cpu_milli
                table.allocate(spec, i)
        return {nodes[i].name: f for i, f in enumerate(free) if f}

    def _node(self, cluster: str, name: str, capacity: int, now: float, used: int | None) -> _Node:
        node = self.nodes.get((cluster, name))
        if node is None or node.reclaim.capacity_milli != capacity:
            node = self.nodes[(cluster, name)] = _Node(NodeReclaim.on(capacity, headroom_milli=min(self.config.headroom_milli, capacity)))
        if used is not None and now >= node.sampled_at + self.config.stride_s:
            node.reclaim.observe(float(min(used, capacity)))
            node.sampled_at = now
        return node

    def _preempt(self, now: float, cluster: str, backend: ClusterBackend, pod: PodState, reason: str) -> None:
        """Evict a batch pod the auction outbid; a twin (no workload controller) gets its replica back as pending."""
        try:
            result = backend.evict_pod(pod.name, pod.epoch)
            if result.outcome is EvictOutcome.EVICTED and isinstance(backend, TwinCluster):
                backend.scale_workload(pod.workload, backend.get_workload(pod.workload).spec.replicas)
        except errors.BackendError as exc:
            result = EvictResult(EvictOutcome.BLOCKED, str(exc))
        if result.outcome is not EvictOutcome.EVICTED:  # gone or moved on: nothing of ours ran; blocked: the next round tries
            self.record(DecisionRecord(now, "preempt-failed", pod.workload, cluster, "", (
                f"batch pod {pod.name} on node {pod.node}: {result.outcome.value} {result.reason}".rstrip(),)))
            return
        self.metrics.preemptions.labels(cluster).inc()
        before = self.share(pod.workload, cluster)
        self.shares[(pod.workload, cluster)] = Share(before.reclaimed_milli, before.preemptions + 1)
        self.record(DecisionRecord(now, "preempt", pod.workload, cluster, "", (
            f"batch pod {pod.name} on node {pod.node} preempted", reason)))

    def _shares(self, cluster: str, listing: Sequence[NodeState], online_request: Mapping[str, int], grants: Sequence[Grant],
                pods: Mapping[str, PodState]) -> None:
        """Each batch workload's CPU on reclaimed capacity: on every node, what batch requests beyond what online pods leave
        unrequested, shared among the node's batch pods by request."""
        held: dict[str, float] = {}
        capacity = {n.name: n.capacity.cpu_milli for n in listing}
        by_node: dict[str, list[Grant]] = {}
        for g in grants:
            by_node.setdefault(g.node, []).append(g)
        for node, gs in by_node.items():
            total = sum(g.request_milli for g in gs)
            over = max(0, total + online_request.get(node, 0) - capacity.get(node, 0))
            for g in gs:
                w = pods[g.pod].workload
                held[w] = held.get(w, 0.0) + over * g.request_milli / total
        for key in [k for k in self.shares if k[1] == cluster and k[0] not in held]:
            self.shares[key] = Share(0, self.shares[key].preemptions)
        for w, milli in held.items():
            self.shares[(w, cluster)] = Share(round(milli), self.share(w, cluster).preemptions)
