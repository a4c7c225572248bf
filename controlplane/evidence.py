"""Liveness evidence about clusters from many vantage points, kept as the latest word of each.

Two sources: agents' reports (each agent's own node summary and its gossip view of peers, in
its own cluster and others) and the control plane's own probes of each cluster's API. Sans-IO:
every input carries ``now``; :meth:`EvidenceBook.about` folds it into counts a verdict can use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent as the control plane knows it: its newest report and how old it is."""

    report: AgentReport
    age: float
    fresh: bool

    @property
    def state(self) -> str:
        if not self.fresh:
            return "silent"
        return "reporting" if self.report.healthy else "unhealthy"

    def peers(self, state: PeerState, own: bool = True) -> int:
        """Peers of its own cluster (``own``) or of others that its gossip view puts in ``state``."""
        return sum(1 for c, _n, st in self.report.peers if (c == self.report.cluster) is own and st is state)


@dataclass(slots=True)
class _Probe:
    last_ok: float = -1.0
    failures: int = 0
    first_failure: float = -1.0
    nodes: list[NodeState] = field(default_factory=list)
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


class EvidenceBook:
    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self.reports: dict[tuple[str, str], tuple[float, AgentReport]] = {}
        self.views: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
        """Per report's (cluster, node): its peers per peer cluster as (alive, not alive), counted once on arrival:
        every tick judges every cluster, and a report can carry thousands of peers."""
        self.sequences: dict[str, int] = {}
        self.probes: dict[str, _Probe] = {}

    def add_report(self, report: AgentReport, now: float) -> bool:
        """Keep the newest report per (cluster, node); a replayed or older sequence is refused."""
        if report.sequence <= self.sequences.get(report.agent_id, -1):
            return False
        self.sequences[report.agent_id] = report.sequence
        self.reports[(report.cluster, report.node)] = (now, report)
        views: dict[str, tuple[int, int]] = {}
        for peer_cluster, _node, state in report.peers:
            alive, down = views.get(peer_cluster, (0, 0))
            views[peer_cluster] = (alive + 1, down) if state is PeerState.ALIVE else (alive, down + 1)
        self.views[(report.cluster, report.node)] = views
        return True

    def add_probe(self, cluster: str, now: float, nodes: list[NodeState] | None, error: str = "") -> None:
        """A probe result: ``nodes`` when the API answered, None when it did not."""
        p = self.probes.setdefault(cluster, _Probe())
        if nodes is not None:
            p.last_ok, p.failures, p.first_failure, p.nodes, p.error = now, 0, -1.0, nodes, ""
        else:
            if p.failures == 0:
                p.first_failure = now
            p.failures += 1
            p.error = error

    def agents(self, cluster: str, now: float) -> list[AgentRow]:
        """Every agent that ever reported for ``cluster`` (newest report per node), by node name."""
        rows = [AgentRow(r, now - at, now - at <= self.fresh_s) for (c, _), (at, r) in self.reports.items() if c == cluster]
        return sorted(rows, key=lambda row: row.report.node)

    def nodes(self, cluster: str) -> list[NodeState]:
        """The cluster's nodes as its API last listed them (empty until a probe answered)."""
        return list(self.probes.get(cluster, _Probe()).nodes)

    def about(self, cluster: str, now: float) -> ClusterEvidence:
        probe = self.probes.get(cluster, _Probe())
        fresh = [(at, r) for (at, r) in self.reports.values() if now - at <= self.fresh_s]
        mine = [at for (c, _), (at, _r) in self.reports.items() if c == cluster]
        insider_alive = insider_down = outsider_alive = outsider_down = 0
        failing_since = probe.first_failure if probe.failures else float("-inf")
        for at, r in fresh:
            alive, down = self.views[(r.cluster, r.node)].get(cluster, (0, 0))
            if r.cluster != cluster:
                outsider_alive, outsider_down = outsider_alive + alive, outsider_down + down
            elif at > failing_since:  # one sent before the API stopped answering is no proof of life since
                insider_alive, insider_down = insider_alive + alive, insider_down + down
        seen_from_outside = any(c != cluster and cluster in views for (c, _n), views in self.views.items())
        outsiders_silent = seen_from_outside and not (outsider_alive or outsider_down)
        return ClusterEvidence(
            cluster, now, probe.failures, now - probe.first_failure if probe.failures else 0.0, probe.last_ok >= 0,
            probe.error, len(mine), sum(1 for _at, r in fresh if r.cluster == cluster),
            now - max(mine) if mine else float("inf"), insider_alive, insider_down, outsider_alive, outsider_down,
            outsiders_silent, tuple(probe.nodes), tuple(r.summary for _at, r in fresh if r.cluster == cluster),
        )
