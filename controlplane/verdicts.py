"""Verdicts: what the evidence from every vantage point says about a cluster, and why.

Rules (first match wins), with ``probe down`` = at least ``probe_failures`` probes failed in a row, and ``heard since``
= an agent of another cluster heard from one of its nodes (a packet the node sealed, or its relayed ack) more than
``heard_margin_s`` after the probe first failed:
- probe down for ``confirm_s``, insiders report, seeing peers alive -> PARTITIONED (alive, cut from us; sooner: UNKNOWN)
- probe down for ``confirm_s``, other clusters' agents see it alive, none suspect, some heard since -> PARTITIONED
- probe down less than ``confirm_s``, others still see it alive   -> UNKNOWN (a short blip of its API fails nothing
  over)
- probe down less than ``settle_s``, others still see it alive, none suspect, none heard since -> UNKNOWN ("alive" in a
  gossip view is sticky until a probe of the node fails: how soon one does depends on the pool's size, probe interval
  and load, so a fixed window cannot tell an outage from a partition; evidence a dead node cannot produce can)
- probe down less than ``settle_s``, other clusters' agents have seen its nodes but no fresh report
  carries a view of them                                           -> UNKNOWN (no outside view yet: a late
  report is not a death; a busy host delays reports before it delays probes)
- probe down less than ``settle_s``, outside views split, most alive -> UNKNOWN (a suspicion that a live node
  refutes within the suspicion timeout: one slow prober on a busy host is no outage)
- probe down, otherwise                                            -> DOWN (most outside views suspect/dead,
  or still split, absent or unheard since after ``settle_s``, or none to wait for: crash, outage or total partition)
- probe up, agents known or expected but none fresh                -> AGENTS_SILENT (no failover: the API answers;
  ``expected``: agents that reported to an earlier leader, :mod:`controlplane.expecting`, so a new leader that has
  heard none yet never reads their silence as health)
- probe up, insiders see some peers suspect/dead                   -> DEGRADED
- probe up                                                         -> HEALTHY
- never probed, no reports                                         -> UNKNOWN
PARTITIONED and DOWN fail the cluster's workloads over alike (the same NoExecute taint key, the planner moves both);
they differ in name and evidence. Views without heard records (agents that predate them, or without a federation pool)
never read PARTITIONED by themselves: such a partition reads DOWN after ``settle_s``. Each verdict carries its evidence.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from controlplane.evidence import ClusterEvidence
from fedcore.nodes import Taint, TaintEffect


class Health(enum.Enum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    AGENTS_SILENT = "agents-silent"
    PARTITIONED = "partitioned"
    DOWN = "down"
    UNKNOWN = "unknown"

    @property
    def failed(self) -> bool:
        """The control plane cannot manage the cluster: its workloads must run elsewhere."""
        return self in (Health.PARTITIONED, Health.DOWN)


@dataclass(frozen=True, slots=True)
class Timings:
    """LAN defaults: probe and report every 200 ms; three failed probes in a row mark a probe down."""

    probe_interval_s: float = 0.2
    report_interval_s: float = 0.2
    fresh_s: float = 1.0
    probe_failures: int = 3
    confirm_s: float = 2.0
    """Seconds the probe must have failed before other clusters' agents that heard from the cluster's nodes since make it
    PARTITIONED: a blip of its API shorter than this fails nothing over. Not a wait for their failure detectors: they
    need a probe round that reaches a dead node first, which a pool's size and load can stretch well past it."""
    heard_margin_s: float = 0.5
    """An outside agent proves a node alive only if it heard from it this long after the probe first failed: the book
    dates a hearing by the report's arrival less its age, so a report's transit (hundreds of ms on a loaded host) would
    date an ack from just before an outage after the failure."""
    settle_s: float = 4.0
    """Seconds the probe may fail while outside views stay split (some suspect, most alive) or absent before that
    reads DOWN: a live node refutes a suspicion, and a late report arrives, well within it. An outage settles
    sooner: its suspicion spreads to most views within a few gossip rounds."""
    context_stabilization_s: float = 30.0
    """A cluster's workload context moves at most once in this many seconds (the HPA's stabilization window, for the
    profile agents score against): a workload of a few dozen short pods reads a new mix every few seconds."""
    scorer_selection_s: float = 300.0
    """A cluster's lookahead selection of its scorer family (controlplane.selecting) starts at most once in this many
    seconds: each replays its workload in the twin under every candidate (tens of CPU-seconds on a full openb fleet)."""
    scorer_selection_timeout_s: float = 600.0
    """A selection still running after this many seconds is killed; the cluster keeps its previous family."""


@dataclass(frozen=True, slots=True)
class Verdict:
    health: Health
    reasons: tuple[str, ...]

    @property
    def taints(self) -> tuple[Taint, ...]:
        return TAINTS.get(self.health, ())


TAINTS: dict[Health, tuple[Taint, ...]] = {
    Health.DOWN: (Taint("fedplane.io/unreachable", "down", TaintEffect.NO_EXECUTE),),
    Health.PARTITIONED: (Taint("fedplane.io/unreachable", "partitioned", TaintEffect.NO_EXECUTE),),
    Health.AGENTS_SILENT: (Taint("fedplane.io/agents-silent", "", TaintEffect.PREFER_NO_SCHEDULE),),
    Health.DEGRADED: (Taint("fedplane.io/degraded", "", TaintEffect.PREFER_NO_SCHEDULE),),
    Health.UNKNOWN: (Taint("fedplane.io/not-ready", "", TaintEffect.NO_SCHEDULE),),
}


def judge(ev: ClusterEvidence, t: Timings, expected: int = 0) -> Verdict:
    """The verdict for one cluster from its evidence and the number of agents it should have (pure; see the module
    docstring for the rules)."""
    known = max(ev.agents_known, expected)
    reports = f"{ev.agents_fresh}/{known} agents reporting"
    if ev.agents_known and ev.last_report_age != float("inf"):
        reports += f" (newest {ev.last_report_age:.1f}s ago)"
    if ev.probe_failures >= t.probe_failures:
        probes = f"{ev.probe_failures} probes failed over {ev.probe_failing_for:.1f}s ({ev.probe_error or 'no answer'})"
        confirming = ev.probe_failing_for < t.confirm_s
        if ev.agents_fresh and ev.insider_alive > ev.insider_down:
            inside = f"its agents see {ev.insider_alive} peer views alive, {ev.insider_down} down: alive but cut off from us"
            if confirming:
                return Verdict(Health.UNKNOWN, (probes, reports, inside, f"confirming for {t.confirm_s:g}s: a blip of its API fails nothing over"))
            return Verdict(Health.PARTITIONED, (probes, reports, inside))
        settling = ev.probe_failing_for < t.settle_s
        heard = heard_since(ev, t)
        if ev.outsider_alive and not ev.outsider_down:
            views = (f"agents of other clusters see its nodes alive ({ev.outsider_alive} alive / {ev.outsider_down} down views; "
                     f"{heard} of their agents heard from one since the probe failed)")
            if heard and not confirming:
                return Verdict(Health.PARTITIONED, (probes, reports, views))
            if confirming:
                return Verdict(Health.UNKNOWN, (probes, reports, views, f"confirming for {t.confirm_s:g}s: a blip of its API fails nothing over"))
            if settling:
                return Verdict(Health.UNKNOWN, (probes, reports, views, "'alive' in a gossip view lasts until a probe of the node fails",
                                                f"waiting up to {t.settle_s:g}s for one of them to hear from it or suspect it"))
        if settling and ev.outsiders_silent:
            return Verdict(Health.UNKNOWN, (probes, reports, "no recent view of its nodes from other clusters' agents",
                                            f"waiting up to {t.settle_s:g}s for an outside view"))
        if settling and ev.outsider_alive >= ev.outsider_down > 0:
            return Verdict(Health.UNKNOWN, (probes, reports, f"outside views split: {ev.outsider_alive} alive, {ev.outsider_down} suspect/dead",
                                            f"waiting up to {t.settle_s:g}s for the suspicion to be refuted or confirmed"))
        remote = f"remote views: {ev.outsider_alive} alive ({heard} agents heard from it since the probe failed), {ev.outsider_down} suspect/dead"
        return Verdict(Health.DOWN, (probes, reports, remote, "no vantage point sees it alive: crash, outage or total partition"))
    if not ev.probed_ok and not ev.agents_known:
        return Verdict(Health.UNKNOWN, ("not probed yet and no agent has reported",))
    if known and not ev.agents_fresh:
        return Verdict(Health.AGENTS_SILENT, ("API answers probes", reports, "agents silent: no failover while the API answers"))
    if ev.insider_down:
        return Verdict(Health.DEGRADED, ("API answers probes", reports, f"{ev.insider_down} peer views suspect/dead inside the cluster"))
    return Verdict(Health.HEALTHY, ("API answers probes", reports))


def heard_since(ev: ClusterEvidence, t: Timings) -> int:
    """Outside agents that heard from one of the cluster's nodes ``heard_margin_s`` after its probe first failed: proof of
    life no sticky view and no dead node can give (read for PARTITIONED only while no outside view suspects any)."""
    return sum(1 for age in ev.outsider_heard if age < ev.probe_failing_for - t.heard_margin_s)
