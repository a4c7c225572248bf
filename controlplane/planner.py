"""The planner: from verdicts, loads and placements to migrations, each with its reasons (sans-IO).

- Failover: every placement on a PARTITIONED or DOWN cluster is recreated elsewhere from the
  workload's desired state (targets chosen by :mod:`controlplane.admission`, failed clusters
  excluded); the runtime gives each a bumped fencing epoch. Not rate-limited: the source is lost.
  Replicas that found no room are planned again every round until they do.
- Return (failback): replicas failed over from a cluster move back, make-before-break, by their workload's
  failback policy (:mod:`controlplane.failbacks`; ``return_after_s`` is the default window, 0 = never), with
  hysteresis against flapping, groups moving together, paced by the eviction budget (:mod:`controlplane.returning`).
- Rebalance: a healthy cluster whose online load (:func:`online_load`) or forecast exceeds ``overload`` moves one
  movable online workload make-before-break to a cluster that stays under ``target_max`` after the move, at most
  ``evictions_per_window`` per cluster per ``window_s`` (a token bucket on injected time).
A workload with a migration in flight from a cluster is not planned again from that cluster, and its
failovers avoid clusters its migrations in flight touch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from controlplane import admission, returning
from controlplane.failbacks import Falls
from controlplane.journal import Kind, Migration
from controlplane.registry import Home, Placement, PlacementState
from controlplane.verdicts import Verdict
from controlplane.workloads import Workload
from fedcore.resources import Resources
from fedcore.topology import Topology


_STRANDED = (PlacementState.PLACED, PlacementState.STALE)
"""Placements on a failed cluster whose replicas still need a home: all of a placed one; of a stale one, the
replicas a partial failover left behind (``remove-source`` keeps them there for when the cluster returns)."""


@dataclass(frozen=True, slots=True)
class Plan:
    kind: Kind
    workload: str
    source: str
    target: str
    replicas: int
    target_total: int
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Load:
    now: float
    forecast: float


def online_load(capacity: Resources, online: Resources, booked: Resources, batch: Resources, reclaimed_milli: int) -> float:
    """A cluster's load as online work meets it (what rebalancing reads), over CPU and memory: its online placements'
    requests, or what its agents report booked (``booked``) less batch's part of it, whichever is more. Batch is
    preemptible (online outbids it), so a cluster full of batch is not loaded for online work. ``batch``: what batch
    placements request there, ``reclaimed_milli`` of it on reclaimed CPU (agents book that outside allocatable)."""
    batch_booked = batch - Resources(min(reclaimed_milli, batch.cpu_milli), 0)
    background = booked - batch_booked
    return max(
        max(online.cpu_milli, background.cpu_milli) / capacity.cpu_milli if capacity.cpu_milli else 0.0,
        max(online.memory_mib, background.memory_mib) / capacity.memory_mib if capacity.memory_mib else 0.0,
    )


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    overload: float = 0.85
    target_max: float = 0.75
    evictions_per_window: int = 1
    window_s: float = 30.0
    learned_profile: str = ""
    return_after_s: float = 0.0  # 0: failed-over replicas stay where they went


@dataclass(slots=True)
class Planner:
    topology: Topology
    config: PlannerConfig = PlannerConfig()
    _evictions: dict[str, list[float]] = field(default_factory=dict)
    falls: Falls = field(default_factory=Falls)
    """When each cluster fell, for failback's hysteresis (observed every round)."""
    learned_scores: admission.Scores = field(init=False, default=())
    """The learned profile's score plugins, built once (a model loads and its options are read here, never per choice)."""

    def __post_init__(self) -> None:
        self.learned_scores = admission.learned_scores(self.config.learned_profile)

    def plan(
        self, now: float, verdicts: Mapping[str, Verdict], views: Sequence[admission.ClusterView],
        loads: Mapping[str, Load], workloads: Mapping[str, Workload], placements: Sequence[Placement],
        active: Sequence[Migration], homes: Sequence[Home] = (), healthy_since: Mapping[str, float] = {}, wall: float = 0.0,
    ) -> tuple[list[Plan], list[str]]:
        """Migrations to start now, and notes on what could not be planned (also explainable). ``wall``: Unix seconds,
        for failback maintenance windows."""
        busy = {(m.workload, m.source) for m in active} | {(m.workload, m.target) for m in active}
        failed = {c for c, v in verdicts.items() if v.health.failed}
        self.falls.observe(now, failed)
        plans: list[Plan] = []
        notes: list[str] = []
        views = list(views)
        for p in placements:
            # a STALE placement with replicas is what an earlier failover could not place (no room then): keep trying
            if p.cluster in failed and p.state in _STRANDED and p.replicas and (p.workload, p.cluster) not in busy:
                w = workloads.get(p.workload)
                if w is not None:
                    moving_here = {c for workload, c in busy if workload == w.name}
                    made, note = self._failover(w, p, verdicts[p.cluster], views, [*placements, *_as_placements(plans)], failed, moving_here)
                    plans += made
                    notes += note
                    views = [_charged(v, w, made) for v in views]
        moving = {pl.workload for pl in plans} | {m.workload for m in active}
        x = returning.Inputs(now, wall, self.config.return_after_s, healthy_since, self.falls)
        for plan in self.failbacks(x, homes, workloads, placements, moving, lambda cs: self._spend(cs, now)):
            plans.append(plan)
            moving.add(plan.workload)
        for cluster, load in sorted(loads.items()):
            if cluster in failed or max(load.now, load.forecast) <= self.config.overload or not self._token(cluster, now):
                continue
            if any(m.source == cluster for m in active):
                continue
            moved = self._rebalance(cluster, load, views, loads, workloads, placements, moving, failed)
            if moved:
                self._evictions.setdefault(cluster, []).append(now)
                plans += moved
                moving.add(moved[0].workload)
        return plans, notes

    def _failover(
        self, w: Workload, p: Placement, verdict: Verdict, views: Sequence[admission.ClusterView],
        placements: Sequence[Placement], failed: set[str], moving: set[str],
    ) -> tuple[list[Plan], list[str]]:
        """Targets for ``p``'s replicas: never a failed cluster, nor one where ``w`` has a migration in flight
        (a rebalance's remove-source there would scale away what this failover adds)."""
        already = {q.cluster: q.replicas for q in placements if q.workload == w.name and q.state is PlacementState.PLACED and q.cluster not in failed}
        choice = admission.choose(w, views, self.topology, p.replicas, exclude=failed | moving, learned=self.learned_scores, already=already)
        why = (f"{p.cluster} is {verdict.health.value}", *verdict.reasons)
        plans = [
            Plan(Kind.FAILOVER, w.name, p.cluster, target, k, already.get(target, 0) + k, why + choice.reasons)
            for target, k in sorted(choice.counts.items())
        ]
        notes = [f"failover of {w.name} from {p.cluster}: {r}" for r in choice.reasons if "unplaced" in r] if choice.unplaced else []
        return plans, notes

    def _rebalance(
        self, cluster: str, load: Load, views: Sequence[admission.ClusterView], loads: Mapping[str, Load],
        workloads: Mapping[str, Workload], placements: Sequence[Placement], moving: set[str], failed: set[str],
    ) -> list[Plan]:
        """Move the biggest movable workload that fits elsewhere (one plan per target cluster)."""
        cool = {c for c, ld in loads.items() if max(ld.now, ld.forecast) > self.config.target_max}
        candidates = sorted(
            (p for p in placements if p.cluster == cluster and p.state is PlacementState.PLACED and p.workload not in moving
             and p.workload in workloads and workloads[p.workload].policy.movable
             and workloads[p.workload].template.qos != "batch"),  # the load is online's: moving batch relieves none of it
            key=lambda p: -p.replicas * workloads[p.workload].template.cpu_milli,
        )
        for p in candidates:
            w = workloads[p.workload]
            others = {q.cluster: q.replicas for q in placements if q.workload == w.name and q.cluster != cluster}
            choice = admission.choose(w, views, self.topology, p.replicas, exclude=failed | cool | {cluster}, already=others,
                                    learned=self.learned_scores)
            if choice.ok:
                why = (f"{cluster} load {load.now:.2f}, forecast {load.forecast:.2f} > {self.config.overload:.2f}",
                       f"{w.name} is movable ({p.replicas} replicas)", *choice.reasons)
                return [Plan(Kind.REBALANCE, w.name, cluster, target, k, others.get(target, 0) + k, why)
                        for target, k in sorted(choice.counts.items())]
        return []

    def failbacks(
        self, x: returning.Inputs, homes: Sequence[Home], workloads: Mapping[str, Workload], placements: Sequence[Placement],
        moving: set[str], tokens: Callable[[set[str]], bool],
    ) -> list[Plan]:
        """The returns due this round (see :mod:`controlplane.returning`)."""
        return [Plan(m.kind, m.workload, m.away, m.home, m.replicas, m.home_total, m.reasons)
                for p in returning.plan(homes, workloads, placements, moving, x, tokens) for m in p.moves]

    def failback_preview(
        self, x: returning.Inputs, homes: Sequence[Home], workloads: Mapping[str, Workload], placements: Sequence[Placement],
        moving: set[str],
    ) -> list[returning.Pending]:
        """What failback would move now and why the rest waits; spends no token (the dry run)."""
        return returning.plan(homes, workloads, placements, moving, x, lambda cs: all(self._token(c, x.now) for c in cs))

    def _spend(self, clusters: set[str], now: float) -> bool:
        """One eviction token of every cluster in ``clusters``, or none when one of them has none left."""
        if not all(self._token(c, now) for c in clusters):
            return False
        for c in clusters:
            self._evictions.setdefault(c, []).append(now)
        return True

    def _token(self, cluster: str, now: float) -> bool:
        recent = [t for t in self._evictions.get(cluster, []) if now - t < self.config.window_s]
        self._evictions[cluster] = recent
        return len(recent) < self.config.evictions_per_window


def _as_placements(plans: Sequence[Plan]) -> list[Placement]:
    """Plans of this round as if done, so later choices in the round see them."""
    return [Placement(p.workload, p.target, p.replicas, 0) for p in plans]


def _charged(view: admission.ClusterView, w: Workload, plans: Sequence[Plan]) -> admission.ClusterView:
    """``view`` with the replicas just planned onto it counted as used."""
    k = sum(p.replicas for p in plans if p.target == view.name)
    if not k:
        return view
    t = w.template
    extra = Resources(t.cpu_milli * k, t.memory_mib * k, 0, t.gpus * 1000 * k)
    return replace(view, used=view.used + extra, batch_used=view.batch_used + extra if t.qos == "batch" else view.batch_used)
