"""The resource-quota auction: online demand outbids batch for a node's CPU; batch yields in bid order.

Each round (sans-IO: the caller passes ``now``), per node: online demand — the forecast peak of its
online pods' usage (:mod:`controlplane.reclaiming`) — takes the node first, at a price no batch bid can
reach. What is left (the batch supply) goes to batch bids in price order (ties: the pod name, so every
replica of the plane clears the same way). Running batch keeps its place against newcomers at the same
price (no churn); when the supply shrinks, running batch yields lowest bid first: first suppressed (its
cgroup quota cut down to ``min_share`` of its request), then evicted, at most ``rate`` evictions per
second per node (a token bucket of ``burst``). An eviction the bucket refuses leaves the pod suppressed
at its floor; the node's cgroup quota and shares keep online work ahead meanwhile.

A pod wins on at most one node: new bids are cleared pod by pod, each to the eligible node with the most
supply left, and a running pod bids only on its own node. The winner then claims the pod through the
claims CRDT as any placement does, so binding still has exactly one winner across agents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MIN_SHARE = 0.1
"""A suppressed batch pod keeps this share of its request until it is evicted (it still makes progress)."""
EVICTIONS_PER_S = 1 / 60
"""At most one eviction per node per minute on average (a batch job restarted is work lost)..."""
BURST = 2
"""...and two at once: enough for one online surge, never a node emptied in one round."""


class BidError(ValueError):
    """A bid that cannot take part (bad price or request, unknown node): the bidder must fix it."""


@dataclass(frozen=True, slots=True)
class Bid:
    """A batch pod's offer for CPU: ``price`` per core (higher wins), on any of ``nodes``."""

    pod: str
    cpu_milli: int
    price: float
    nodes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.pod:
            raise BidError("a bid needs a pod name")
        if self.cpu_milli <= 0:
            raise BidError(f"bid {self.pod}: cpu_milli must be positive, got {self.cpu_milli}")
        if not math.isfinite(self.price) or self.price < 0:
            raise BidError(f"bid {self.pod}: price must be a finite number >= 0, got {self.price!r}")
        if not self.nodes:
            raise BidError(f"bid {self.pod}: names no node")


@dataclass(frozen=True, slots=True)
class Grant:
    """A batch pod's quota on its node: its request, or less while suppressed."""

    pod: str
    node: str
    cpu_milli: int
    price: float
    request_milli: int

    @property
    def suppressed(self) -> bool:
        return self.cpu_milli < self.request_milli


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Round:
    """One clearing: the quotas to apply (running and newly placed), the evictions to carry out."""

    grants: tuple[Grant, ...]
    evictions: tuple[Eviction, ...]
    unplaced: tuple[str, ...]

    def quota(self, node: str) -> int:
        """The node's batch cgroup quota: the sum of its grants."""
        return sum(g.cpu_milli for g in self.grants if g.node == node)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


@dataclass(slots=True)
class Auction:
    """The clearing rule and the eviction budget that outlives one round (per node token buckets)."""

    rate: float = EVICTIONS_PER_S
    burst: int = BURST
    min_share: float = MIN_SHARE
    evict: bool = True
    """False: suppress only (a Koordinator-like node that never preempts)."""
    buckets: dict[str, _Bucket] = field(default_factory=dict)

    def clear(self, now: float, supply: dict[str, int], running: list[Grant], bids: list[Bid],
              free: dict[str, int] | None = None) -> Round:
        """``supply``: each node's capacity left to batch once online demand took its share (millicores); ``free``: CPU a
        pending online pod needs batch to give back on a node (evicted, lowest bid first: suppression frees no request)."""
        for node, milli in supply.items():
            if milli < 0:
                raise BidError(f"node {node}: negative batch supply {milli}")
        left = dict(supply)
        grants: list[Grant] = []
        evictions: list[Eviction] = []
        by_node: dict[str, list[Grant]] = {}
        for g in running:
            if g.node not in left:
                raise BidError(f"running pod {g.pod} is on unknown node {g.node}")
            by_node.setdefault(g.node, []).append(g)
        for node, pods in by_node.items():
            kept, out = self._yield(now, node, left[node], pods, (free or {}).get(node, 0))
            grants += kept
            evictions += out
            left[node] -= sum(g.cpu_milli for g in kept)
        taken = {g.pod for g in running}
        unplaced: list[str] = []
        for bid in sorted(bids, key=lambda b: (-b.price, b.pod)):
            if bid.pod in taken:
                continue  # one winner: a running pod does not bid again
            unknown = [n for n in bid.nodes if n not in left]
            if unknown:
                raise BidError(f"bid {bid.pod}: unknown node {unknown[0]}")
            node = max(bid.nodes, key=lambda n: (left[n], n))
            if left[node] < bid.cpu_milli:
                unplaced.append(bid.pod)
                continue
            left[node] -= bid.cpu_milli
            taken.add(bid.pod)
            grants.append(Grant(bid.pod, node, bid.cpu_milli, bid.price, bid.cpu_milli))
        return Round(tuple(grants), tuple(evictions), tuple(unplaced))

    def _yield(self, now: float, node: str, supply: int, pods: list[Grant], free: int = 0) -> tuple[list[Grant], list[Eviction]]:
        """Running batch on one node within ``supply``: full requests highest bid first, then floors, then evictions; first,
        the lowest bids holding the ``free`` CPU a pending online pod needs."""
        order = sorted(pods, key=lambda g: (-g.price, g.pod))
        floors = {g.pod: math.ceil(g.request_milli * self.min_share) for g in order}
        need = sum(floors.values())
        evicted: list[Eviction] = []
        freed = 0
        while freed < free and self.evict and order and self._take_token(now, node):
            g = order.pop()
            need -= floors[g.pod]
            freed += g.request_milli
            evicted.append(Eviction(g.pod, node, f"a pending online pod outbid it: it needs {free}m batch holds here"))
        while need > supply and self.evict and order and self._take_token(now, node):
            g = order.pop()  # the lowest bid
            need -= floors[g.pod]
            evicted.append(Eviction(g.pod, node, f"online demand outbid it: batch supply {supply}m < floors {need + floors[g.pod]}m"))
        spare = max(0, supply - need)
        kept = []
        for g in order:  # above its floor, highest bid first
            extra = min(g.request_milli - floors[g.pod], spare)
            spare -= extra
            kept.append(Grant(g.pod, node, floors[g.pod] + extra, g.price, g.request_milli))
        return kept, evicted

    def _take_token(self, now: float, node: str) -> bool:
        b = self.buckets.setdefault(node, _Bucket(float(self.burst), now))
        b.tokens = min(float(self.burst), b.tokens + max(0.0, now - b.at) * self.rate)
        b.at = now
        if b.tokens < 1:
            return False
        b.tokens -= 1
        return True
