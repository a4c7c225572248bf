"""What the console shows, copied out of a running plane in one go: plain frozen values, times on the wall clock.

The plane keeps its times on its own monotonic clock (decisions, migrations, verdicts); an operator reads wall
time. :func:`take` reads both clocks once and shifts every time by their difference, so the pages
(:mod:`controlplane.console.pages`) are pure functions of a :class:`Snapshot` and tests build one by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from controlplane.autoscaling.scaler import Autoscaler
from controlplane.campaigning import Leadership
from controlplane.evidence import AgentRow, PeerState
from controlplane.runtime import ControlPlane

HISTORY_POINTS = 60
"""Points per drawn series: enough for a line that reads, few enough for a page update of a few kilobytes."""
DEMAND_SHOWN_S = 600.0
"""The autoscaling page draws each workload's replayed demand over the last ten minutes of plane time."""
PODS_SHOWN = 2000
"""Twin pods copied per snapshot, at most: a workload page lists its own; a twin of tens of thousands is not copied whole."""
DECISIONS_SHOWN = 200
MIGRATIONS_SHOWN = 100
"""The newest this many: a page stays well under its 512 KiB budget however long the plane has run."""


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    ready: bool
    cpu_milli: int
    memory_mib: int
    gpus: int
    arch: str
    problem: str


@dataclass(frozen=True, slots=True)
class AgentView:
    node: str
    agent_id: str
    state: str                  # reporting, unhealthy or silent
    age_s: float                # since its newest report
    health_reason: str
    model_version: str
    scorer: str                 # the scorer family it says it places with
    context_version: int
    pods: int                   # as the agent last reported them
    load: float
    own: tuple[int, int, int]     # its gossip view of its own cluster's peers: alive, suspect, dead or left
    others: tuple[int, int, int]  # ... of other clusters' nodes


@dataclass(frozen=True, slots=True)
class ClusterView:
    name: str
    region: str
    backend: str
    health: str
    since: float                # wall time of the verdict's last change
    reasons: tuple[str, ...]    # the verdict's evidence
    cpu_milli: int
    cpu_used: int
    memory_mib: int
    memory_used: int
    load: float
    forecast: float
    scorer: str                 # the family the plane sends its agents
    nodes: tuple[NodeView, ...]
    agents: tuple[AgentView, ...]
    load_history: tuple[tuple[float, float], ...] = ()  # (wall time, load) over the forecaster's window

    @property
    def agents_reporting(self) -> int:
        return sum(1 for a in self.agents if a.state != "silent")


@dataclass(frozen=True, slots=True)
class PlacementView:
    cluster: str
    replicas: int
    epoch: int
    state: str
    reclaimed_milli: int = 0
    """Batch: CPU its pods there hold on reclaimed capacity (:mod:`controlplane.colocating`)."""
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadView:
    name: str
    replicas: int
    cpu_milli: int
    memory_mib: int
    gpus: int
    placements: tuple[PlacementView, ...]
    qos: str = "online"


@dataclass(frozen=True, slots=True)
class PodView:
    cluster: str
    name: str
    workload: str
    epoch: int
    phase: str
    ready: bool
    node: str                   # where it is bound ("" pending)


@dataclass(frozen=True, slots=True)
class StepView:
    at: float
    step: str
    phase: str
    detail: str


@dataclass(frozen=True, slots=True)
class MigrationView:
    id: str
    workload: str
    kind: str
    source: str
    target: str
    replicas: int
    epoch: int
    state: str
    created: float
    updated: float
    error: str
    reasons: tuple[str, ...]
    steps: tuple[StepView, ...]


@dataclass(frozen=True, slots=True)
class DecisionView:
    at: float
    kind: str
    workload: str
    source: str
    target: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AutoscaleView:
    workload: str
    policy: str
    series: str
    min_replicas: int
    max_replicas: int
    demand: float
    forecast: float
    desired: int
    ready: int
    replicas: int
    reason: str
    fallback: str
    demand_history: tuple[tuple[float, float], ...] = ()  # (wall time, replicas' worth of demand), the last DEMAND_SHOWN_S


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken: float                # wall time
    leading: bool               # this process acts (a standby only answers reads)
    member: str                 # this member's name (replicated mode; "" embedded)
    leader: str                 # the leader's address ("" embedded: this process)
    clusters: tuple[ClusterView, ...]
    workloads: tuple[WorkloadView, ...] = ()
    migrations: tuple[MigrationView, ...] = ()      # oldest first
    decisions: tuple[DecisionView, ...] = ()        # newest first
    autoscaling: tuple[AutoscaleView, ...] = ()
    pods: tuple[PodView, ...] = ()                  # twin clusters' pods, as far as their API answers (at most PODS_SHOWN)

    def cluster(self, name: str) -> ClusterView | None:
        return next((c for c in self.clusters if c.name == name), None)


def _peers(row: AgentRow, own: bool) -> tuple[int, int, int]:
    return (row.peers(PeerState.ALIVE, own), row.peers(PeerState.SUSPECT, own),
            row.peers(PeerState.DEAD, own) + row.peers(PeerState.LEFT, own))


def _agent(row: AgentRow) -> AgentView:
    r = row.report
    return AgentView(r.node, r.agent_id, row.state, row.age, r.health_reason, r.summary.model_version, r.context.scorer,
                     r.context.version, r.summary.pods, r.summary.load, _peers(row, True), _peers(row, False))


def _thin(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """At most :data:`HISTORY_POINTS` of ``points``, evenly spread, the newest always kept."""
    step = max(1, -(-len(points) // HISTORY_POINTS))
    return tuple(points[::-1][::step][::-1])


def _demand(scaler: Autoscaler, now: float, shift: float) -> tuple[tuple[float, float], ...]:
    """A workload's replayed demand (a function of plane time) since it was enabled, at most the last :data:`DEMAND_SHOWN_S`;
    missing samples are left out."""
    start = max(now - DEMAND_SHOWN_S, scaler.spec.enabled_at)
    times = [start + (now - start) * i / (HISTORY_POINTS - 1) for i in range(HISTORY_POINTS)]
    return tuple((t + shift, d) for t in times if math.isfinite(d := scaler.demand(t)))


def _twin_pods(plane: ControlPlane) -> tuple[PodView, ...]:
    """The embedded twins' pods by their read that drives nothing (``snapshot``), from twins whose API answers: a dark
    cluster shows no pods here, as the plane cannot see them either."""
    found: list[PodView] = []
    for cluster, twin in sorted(plane.backends.twins().items()):
        if twin.reachable and len(found) < PODS_SHOWN:
            found += [PodView(cluster, p.name, p.workload, p.epoch, p.phase.value, p.ready, p.node) for p in twin.snapshot()]
    return tuple(found[:PODS_SHOWN])


def take(plane: ControlPlane, leadership: Leadership, wall: Callable[[], float]) -> Snapshot:
    """Copy the plane's state under its lock (blocking: call it off the event loop)."""
    with plane.lock:
        taken, now = wall(), plane.clock()
        shift = taken - now
        # the evidence book, not plane.agents(): that asks each back end for its pods, an API call per cluster per update
        agents = {spec.name: (plane.evidence.nodes(spec.name), plane.evidence.agents(spec.name, now)) for spec in plane.registry.clusters()}
        clusters = tuple(
            ClusterView(
                row.spec.name, row.spec.region, row.spec.backend.value, row.verdict.health.value, row.since + shift, row.verdict.reasons,
                row.capacity.cpu_milli, row.used.cpu_milli, row.capacity.memory_mib, row.used.memory_mib, row.load, row.forecast,
                row.context.scorer,
                tuple(NodeView(n.name, n.ready, n.capacity.cpu_milli, n.capacity.memory_mib, n.capacity.gpu_milli // 1000, n.arch, n.problem)
                      for n in agents.get(row.spec.name, ([], []))[0]),
                tuple(_agent(a) for a in agents.get(row.spec.name, ([], []))[1]),
                _thin([(t + shift, load) for t, load in plane.forecasts[row.spec.name].samples] if row.spec.name in plane.forecasts else []),
            )
            for row in plane.clusters()
        )
        placements = plane.registry.placements()
        workloads = tuple(
            WorkloadView(w.name, w.replicas, w.template.cpu_milli, w.template.memory_mib, w.template.gpus,
                         tuple(PlacementView(p.cluster, p.replicas, p.epoch, p.state.value, share.reclaimed_milli, share.preemptions)
                               for p in sorted(placements, key=lambda p: p.cluster) if p.workload == w.name
                               for share in (plane.colocation.share(w.name, p.cluster),)), w.template.qos)
            for w in sorted(plane.registry.workloads(), key=lambda w: w.name)
        )
        shown = plane.journal.all()[-MIGRATIONS_SHOWN:]
        ids = {m.id for m in shown}
        steps: dict[str, list[StepView]] = {}
        for e in plane.journal.entries():
            if e.migration in ids:
                steps.setdefault(e.migration, []).append(StepView(e.at + shift, e.step, e.phase, e.detail))
        migrations = tuple(
            MigrationView(m.id, m.workload, m.kind.value, m.source, m.target, m.replicas, m.epoch, m.state.value, m.created + shift,
                          m.updated + shift, m.error, m.reasons, tuple(steps.get(m.id, ())))
            for m in shown
        )
        decisions = tuple(DecisionView(d.at + shift, d.kind, d.workload, d.source, d.target, d.reasons)
                          for d in plane.registry.decisions(DECISIONS_SHOWN))
        autoscaling = tuple(
            AutoscaleView(s.spec.workload, s.spec.policy, s.spec.series, s.spec.min_replicas, s.spec.max_replicas, s.demand, s.forecast,
                          s.desired, s.ready, s.replicas, s.reason, s.fallback,
                          _demand(plane.autoscaling.scalers[s.spec.workload], now, shift))
            for s in plane.autoscaling.statuses()
        )
        pods = _twin_pods(plane)
    leader = leadership.leader()
    return Snapshot(taken, plane.leading, leadership.member, leader.address if leader else "", clusters, workloads,
                    migrations, decisions, autoscaling, pods)
