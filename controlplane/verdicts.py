"""Verdicts: what the evidence from every vantage point says about a cluster, and why.

Rules (first match wins), with ``probe down`` = at least ``probe_failures`` probes failed in a row:
- probe down, insiders report since it failed, seeing peers alive -> PARTITIONED (alive, cut from us)
- probe down for ``confirm_s``, other clusters' agents see it alive, none suspect -> PARTITIONED
- probe down less than ``confirm_s``, others still see it alive   -> UNKNOWN (their failure detectors
  need that long to notice a real outage: "alive" in a gossip view is sticky until then)
- probe down less than ``settle_s``, other clusters' agents have seen its nodes but no fresh report
  carries a view of them                                           -> UNKNOWN (no outside view yet: a late
  report is not a death; a busy host delays reports before it delays probes)
- probe down less than ``settle_s``, outside views split, most alive -> UNKNOWN (a suspicion that a live node
  refutes within the suspicion timeout: one slow prober on a busy host is no outage)
- probe down, otherwise                                            -> DOWN (most outside views suspect/dead,
  or still split or absent after ``settle_s``, or none to wait for: crash, outage or total partition)
- probe up, agents known or expected but none fresh                -> AGENTS_SILENT (no failover: the API answers;
  ``expected``: agents that reported to an earlier leader, :mod:`controlplane.expecting`, so a new leader that has
  heard none yet never reads their silence as health)
- probe up, insiders see some peers suspect/dead                   -> DEGRADED
- probe up                                                         -> HEALTHY
- never probed, no reports                                         -> UNKNOWN
PARTITIONED and DOWN fail the cluster's workloads over; each verdict carries its evidence.
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
    """Seconds the probe must have failed while other clusters' agents still see the cluster alive before that
    reads PARTITIONED (about a gossip probe round plus a suspicion broadcast and a report at LAN timings)."""
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
        if ev.agents_fresh and ev.insider_alive > ev.insider_down:
            return Verdict(Health.PARTITIONED, (
                probes, reports, f"its agents see {ev.insider_alive} peer views alive, {ev.insider_down} down: alive but cut off from us"))
        confirming = ev.probe_failing_for < t.confirm_s
        if ev.outsider_alive and not ev.outsider_down:
            views = f"agents of other clusters see its nodes alive ({ev.outsider_alive} alive / {ev.outsider_down} down views)"
            if not confirming:
                return Verdict(Health.PARTITIONED, (probes, reports, views))
            return Verdict(Health.UNKNOWN, (probes, reports, views, f"confirming for {t.confirm_s:g}s: an outage would show in their views by then"))
        settling = ev.probe_failing_for < t.settle_s
        if settling and ev.outsiders_silent:
            return Verdict(Health.UNKNOWN, (probes, reports, "no recent view of its nodes from other clusters' agents",
                                            f"waiting up to {t.settle_s:g}s for an outside view"))
        if settling and ev.outsider_alive >= ev.outsider_down > 0:
            return Verdict(Health.UNKNOWN, (probes, reports, f"outside views split: {ev.outsider_alive} alive, {ev.outsider_down} suspect/dead",
                                            f"waiting up to {t.settle_s:g}s for the suspicion to be refuted or confirmed"))
        remote = f"remote views: {ev.outsider_alive} alive, {ev.outsider_down} suspect/dead"
        return Verdict(Health.DOWN, (probes, reports, remote, "no vantage point sees it alive: crash, outage or total partition"))
    if not ev.probed_ok and not ev.agents_known:
        return Verdict(Health.UNKNOWN, ("not probed yet and no agent has reported",))
    if known and not ev.agents_fresh:
        return Verdict(Health.AGENTS_SILENT, ("API answers probes", reports, "agents silent: no failover while the API answers"))
    if ev.insider_down:
        return Verdict(Health.DEGRADED, ("API answers probes", reports, f"{ev.insider_down} peer views suspect/dead inside the cluster"))
    return Verdict(Health.HEALTHY, ("API answers probes", reports))
