"""Liveness evidence about clusters from many vantage points, kept as the latest word of each.

Two sources: agents' reports (each agent's own node summary and its gossip view of peers, in
its own cluster and others) and the control plane's own probes of each cluster's API. Sans-IO:
every input carries ``now``; :meth:`EvidenceBook.about` folds it into counts a verdict can use.

Incremental, for fleets of thousands: a report's peers are counted once, on arrival, into per-cluster tallies of
fresh views (alive / not alive, from insiders and from outsiders), and taken out again when the report is replaced
or leaves the fresh window (arrivals are kept in arrival order, so expiry pops from the front). ``about`` then
reads one cluster's tallies and scans only that cluster's own agents, where the full scan read every report's
peers for every cluster on every tick. Memory per agent is bounded: its newest report without the peer list (kept
as counts per peer cluster and per state, and per other cluster when it last heard from a node of it), and one
sequence number per agent id the node's newest report carries. Those heard times are read only for a
cluster whose probe fails, from an index of the reports that hold one for it.
Reports arrive on the server's event loop while a tick reads on a worker thread: the book has its own lock, so
ingest never waits for a tick.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from dataclasses import dataclass, field, replace

from fedapi.workloadcontext import NONE, WorkloadContext
from fedcore.backends.model import NodeState
from fedcore.resources import Resources


class PeerState(enum.Enum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class NodeSummary:
    node: str
    capacity: Resources
    allocated: Resources
    pods: int = 0
    ready: bool = True
    load: float = 0.0
    model_version: str = ""
    online_used_milli: int | None = None
    """What the node's online pods used, as its agent measured it (None: not measured; nothing is reclaimed)."""


@dataclass(frozen=True, slots=True)
class AgentReport:
    cluster: str
    node: str
    agent_id: str
    sequence: int
    summary: NodeSummary
    peers: tuple[tuple[str, str, PeerState], ...]  # (cluster, node, state)
    healthy: bool = True
    health_reason: str = ""
    context: WorkloadContext = NONE
    """The workload context the agent says it scores with."""
    heard: tuple[tuple[str, str, float], ...] = ()
    """(cluster, node, seconds): how long before the report the agent last heard from that peer (``PeerView.heard_ms``);
    peers it keeps no such record of are absent. A peer's ALIVE state is sticky until a probe of it fails; this is
    evidence a dead peer cannot produce."""


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent as the control plane knows it: its newest report (peers as counts) and how old it is."""

    report: AgentReport
    age: float
    fresh: bool
    tally: dict[tuple[bool, PeerState], int] = field(default_factory=dict)
    """Its gossip view: (peer of its own cluster?, state) -> peers."""

    @property
    def state(self) -> str:
        if not self.fresh:
            return "silent"
        return "reporting" if self.report.healthy else "unhealthy"

    def peers(self, state: PeerState, own: bool = True) -> int:
        """Peers of its own cluster (``own``) or of others that its gossip view puts in ``state``."""
        return self.tally.get((own, state), 0)


@dataclass(slots=True)
class _Probe:
    last_ok: float = -1.0
    failures: int = 0
    first_failure: float = -1.0
    nodes: tuple[NodeState, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class ClusterEvidence:
    """What every vantage point says about one cluster at ``now``."""

    cluster: str
    now: float
    probe_failures: int
    probe_failing_for: float  # seconds since the first failure of the current run (0 if OK)
    probed_ok: bool           # ever probed successfully
    probe_error: str
    agents_known: int
    agents_fresh: int
    last_report_age: float    # seconds since the newest report from this cluster (inf if none)
    insider_alive: int        # (fresh insider, peer in this cluster) pairs seen alive (while the probe fails: reports since)
    insider_down: int         # ... seen suspect/dead
    outsider_alive: int       # (fresh agent of another cluster, node of this cluster) seen alive
    outsider_down: int
    outsiders_silent: bool = False  # other clusters' agents have reported views of its nodes, no fresh report has one
    nodes: tuple[NodeState, ...] = ()
    summaries: tuple[NodeSummary, ...] = ()
    outsider_heard: tuple[float, ...] = ()
    """While the probe fails: per fresh agent of another cluster with a heard record of some node of this one, seconds
    since it last heard from one of them (empty while the probe answers)."""


@dataclass(slots=True)
class _Entry:
    """An agent's newest report as the book keeps it."""

    at: float
    report: AgentReport
    """Without its peers: they are in ``views`` and ``tally``."""
    views: dict[str, tuple[int, int]]
    """Per peer cluster: (alive, not alive) peers in its view."""
    tally: dict[tuple[bool, PeerState], int]
    heard: dict[str, float] = field(default_factory=dict)
    """Per other cluster: when (the book's clock) the agent last heard from a node of it."""
    counted: bool = False
    """Its views are in the fresh tallies."""


@dataclass(slots=True)
class _Tally:
    """What fresh reports say about one cluster, kept up to date as they arrive and expire."""

    insider_alive: int = 0
    insider_down: int = 0
    outsider_alive: int = 0
    outsider_down: int = 0
    outside_viewers: int = 0
    """Newest reports (fresh or not) of other clusters' agents with a view of its nodes."""


def _views(report: AgentReport) -> tuple[dict[str, tuple[int, int]], dict[tuple[bool, PeerState], int]]:
    views: dict[str, tuple[int, int]] = {}
    tally: dict[tuple[bool, PeerState], int] = {}
    for peer_cluster, _node, state in report.peers:
        alive, down = views.get(peer_cluster, (0, 0))
        views[peer_cluster] = (alive + 1, down) if state is PeerState.ALIVE else (alive, down + 1)
        key = (peer_cluster == report.cluster, state)
        tally[key] = tally.get(key, 0) + 1
    return views, tally


def _heard(report: AgentReport, now: float) -> dict[str, float]:
    """Per other cluster, when the agent last heard from a node of it (``now`` less the age), whatever its view says
    of the node: a packet from a suspect is life too (it is refuting)."""
    heard: dict[str, float] = {}
    own = report.cluster
    for peer_cluster, _node, age in report.heard:
        if peer_cluster != own and now - age > heard.get(peer_cluster, float("-inf")):
            heard[peer_cluster] = now - age
    return heard


class EvidenceBook:
    def __init__(self, fresh_s: float) -> None:
        self._fresh_s = fresh_s
        self.reports: dict[tuple[str, str], _Entry] = {}
        """The newest report per (cluster, node)."""
        self._by_cluster: dict[str, dict[str, _Entry]] = {}
        self._tallies: dict[str, _Tally] = {}
        self._heard_by: dict[str, dict[tuple[str, str], _Entry]] = {}
        """Per cluster, the newest reports (by agent's cluster and node) of other clusters' agents that heard from one
        of its nodes: read only while its probe fails."""
        self._arrivals: deque[_Entry] = deque()
        """Counted entries in arrival order: the oldest leave the fresh window first."""
        self._clock = float("-inf")
        """The latest ``now`` the tallies were brought to; an earlier one (an injected clock) recounts them."""
        self._recount = False
        self._fleets: dict[str, int] = {}
        """Per cluster, a version that moves when a node's reported capacity does (or a node first reports)."""
        self.sequences: dict[str, int] = {}
        self.probes: dict[str, _Probe] = {}
        self.lock = threading.Lock()

    @property
    def fresh_s(self) -> float:
        return self._fresh_s

    @fresh_s.setter
    def fresh_s(self, value: float) -> None:
        """A new fresh window (the plane's pace, :mod:`controlplane.pacing`): the tallies are recounted under it."""
        with self.lock:
            if value != self._fresh_s:
                self._fresh_s, self._recount = value, True

    def __len__(self) -> int:
        """Agents (nodes) that ever reported."""
        return len(self.reports)

    def add_report(self, report: AgentReport, now: float) -> bool:
        """Keep the newest report per (cluster, node); a replayed or older sequence is refused."""
        with self.lock:
            if report.sequence <= self.sequences.get(report.agent_id, -1):
                return False
            self.sequences[report.agent_id] = report.sequence
            key = (report.cluster, report.node)
            old = self.reports.get(key)
            if old is None or old.report.summary.capacity != report.summary.capacity:
                self._fleets[report.cluster] = self._fleets.get(report.cluster, 0) + 1
            if old is not None:
                self._count(old, -1)
                self._seen_from_outside(old, -1)
                if old.report.agent_id != report.agent_id:  # a restarted agent: its old id never reports again
                    self.sequences.pop(old.report.agent_id, None)
            views, tally = _views(report)
            entry = _Entry(now, replace(report, peers=(), heard=()), views, tally, _heard(report, now))
            self.reports[key] = entry
            self._by_cluster.setdefault(report.cluster, {})[report.node] = entry
            self._seen_from_outside(entry, 1)
            if now < self._clock or (self._arrivals and now < self._arrivals[-1].at):
                self._recount = True  # out of order: recounted when next read
            self._count(entry, 1)
            self._arrivals.append(entry)
            return True

    def add_probe(self, cluster: str, now: float, nodes: list[NodeState] | None, error: str = "") -> None:
        """A probe result: ``nodes`` when the API answered, None when it did not."""
        with self.lock:
            p = self.probes.setdefault(cluster, _Probe())
            if nodes is not None:
                same = len(nodes) == len(p.nodes) and all(a is b for a, b in zip(nodes, p.nodes))
                # the same listing keeps its tuple: what is worked out from it is kept by identity (controlplane.capacities)
                p.last_ok, p.failures, p.first_failure, p.nodes, p.error = now, 0, -1.0, p.nodes if same else tuple(nodes), ""
            else:
                if p.failures == 0:
                    p.first_failure = now
                p.failures += 1
                p.error = error

    def agents(self, cluster: str, now: float) -> list[AgentRow]:
        """Every agent that ever reported for ``cluster`` (newest report per node), by node name."""
        with self.lock:
            rows = [AgentRow(e.report, now - e.at, now - e.at <= self._fresh_s, e.tally)
                    for e in self._by_cluster.get(cluster, {}).values()]
        return sorted(rows, key=lambda row: row.report.node)

    def fleets(self) -> dict[str, int]:
        """Every cluster some agent reported for, with the version of its reported fleet (nodes and capacities)."""
        with self.lock:
            return dict(self._fleets)

    def latest(self, cluster: str) -> list[AgentReport]:
        """The newest report of every agent that ever reported for ``cluster`` (without peers), in arrival order."""
        with self.lock:
            return [e.report for e in self._by_cluster.get(cluster, {}).values()]

    def listing(self, cluster: str) -> tuple[NodeState, ...]:
        """The cluster's nodes as its API last listed them, as kept (the same tuple while the listing is the same)."""
        with self.lock:
            return self.probes.get(cluster, _Probe()).nodes

    def nodes(self, cluster: str) -> list[NodeState]:
        """The cluster's nodes as its API last listed them (empty until a probe answered)."""
        with self.lock:
            return list(self.probes.get(cluster, _Probe()).nodes)

    def about(self, cluster: str, now: float) -> ClusterEvidence:
        with self.lock:
            self._advance(now)
            probe = self.probes.get(cluster, _Probe())
            tally = self._tallies.get(cluster, _Tally())
            mine = self._by_cluster.get(cluster, {})
            fresh, newest = [], float("-inf")
            for e in mine.values():  # one pass over its own agents: what the tallies cannot keep (ages, summaries)
                if e.at > newest:
                    newest = e.at
                if now - e.at <= self._fresh_s:
                    fresh.append(e)
            insider_alive, insider_down = tally.insider_alive, tally.insider_down
            if probe.failures:  # one sent before the API stopped answering is no proof of life since
                insider_alive = insider_down = 0
                for e in fresh:
                    if e.at > probe.first_failure:
                        alive, down = e.views.get(cluster, (0, 0))
                        insider_alive, insider_down = insider_alive + alive, insider_down + down
            outsider_alive, outsider_down = tally.outsider_alive, tally.outsider_down
            heard: tuple[float, ...] = ()
            if probe.failures:  # per fresh outside agent: how long since it heard from a node of this cluster
                heard = tuple(now - e.heard[cluster] for e in self._heard_by.get(cluster, {}).values()
                              if now - e.at <= self._fresh_s)
            return ClusterEvidence(
                cluster, now, probe.failures, now - probe.first_failure if probe.failures else 0.0, probe.last_ok >= 0,
                probe.error, len(mine), len(fresh), now - newest if mine else float("inf"),
                insider_alive, insider_down, outsider_alive, outsider_down,
                tally.outside_viewers > 0 and not (outsider_alive or outsider_down), probe.nodes,
                tuple(e.report.summary for e in fresh), heard,
            )

    # -- the tallies ---------------------------------------------------------------------------------
    def _count(self, entry: _Entry, sign: int) -> None:
        """Add (1) or take out (-1) a report's views to the fresh tallies (taking out one not counted does nothing)."""
        if (sign > 0) == entry.counted:
            return
        entry.counted = sign > 0
        own = entry.report.cluster
        for target, (alive, down) in entry.views.items():
            t = self._tally(target)
            if target == own:
                t.insider_alive, t.insider_down = t.insider_alive + sign * alive, t.insider_down + sign * down
            else:
                t.outsider_alive, t.outsider_down = t.outsider_alive + sign * alive, t.outsider_down + sign * down

    def _seen_from_outside(self, entry: _Entry, sign: int) -> None:
        for target in entry.views:
            if target != entry.report.cluster:
                self._tally(target).outside_viewers += sign
        viewer = (entry.report.cluster, entry.report.node)
        for target in entry.heard:
            if sign > 0:
                self._heard_by.setdefault(target, {})[viewer] = entry
            else:
                self._heard_by.get(target, {}).pop(viewer, None)

    def _tally(self, cluster: str) -> _Tally:
        t = self._tallies.get(cluster)
        if t is None:
            t = self._tallies[cluster] = _Tally()
        return t

    def _advance(self, now: float) -> None:
        """Bring the fresh tallies to ``now``: reports that left the window are taken out."""
        if self._recount or now < self._clock:
            self._recount = False
            for e in self.reports.values():
                self._count(e, -1)
            self._arrivals = deque(sorted(self.reports.values(), key=lambda e: e.at))
            for e in self._arrivals:
                self._count(e, 1)
        self._clock = now
        while self._arrivals and now - self._arrivals[0].at > self._fresh_s:
            self._count(self._arrivals.popleft(), -1)
