"""How often agents report: as often as the timings ask while the fleet is small, slower as it grows.

Every report costs the plane CPU when it arrives (decode, check, fold into the evidence book: a few hundred
microseconds for one carrying a hundred gossip peers, ``docs/scale.md``); 10,000 agents at the LAN default of
200 ms would send 50,000 a second. So each report's ack carries the interval the plane wants
(``AgentAck.report_interval_ms``, which agents honour): the timings' own, or ``agents / budget`` once that is
longer, so ingest stays within :data:`REPORT_BUDGET_PER_S` whatever the fleet. Freshness follows the pace: a report
stays fresh for as many intervals as the timings allow (``fresh_s / report_interval_s``, at least
:data:`MIN_FRESH_INTERVALS`), so a slower pace never reads as silent agents.

What the slower pace costs: an agent's own news (a dead peer, its load) reaches the plane later. Detection of a
cluster outage does not wait for it (probes fail within ``probe_failures`` intervals; outside views already held
say alive or not), see :mod:`controlplane.verdicts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REPORT_BUDGET_PER_S = 1000.0
"""Reports a second the plane takes at most in steady state (about a third of a core at the measured cost)."""
MIN_FRESH_INTERVALS = 3.0
"""A report is fresh for at least this many intervals: one late report (jitter, a busy host) is not silence."""


@dataclass(frozen=True, slots=True)
class Pacing:
    report_interval_s: float
    """The interval a small fleet reports at (``Timings.report_interval_s``)."""
    fresh_s: float
    """How long a report is fresh at that interval (``Timings.fresh_s``)."""
    budget_per_s: float = REPORT_BUDGET_PER_S

    def interval_s(self, agents: int) -> float:
        """The report interval to ask of each of ``agents`` agents: once the budget binds, in whole seconds rounded up,
        so the pace (and the fresh window, whose every move recounts the evidence) moves once per ``budget_per_s``
        agents that join, not with each."""
        needed = agents / self.budget_per_s
        return self.report_interval_s if needed <= self.report_interval_s else max(self.report_interval_s, float(math.ceil(needed)))

    def fresh_for(self, agents: int) -> float:
        """How long a report stays fresh at that pace (the timings' own while the pace is theirs)."""
        interval = self.interval_s(agents)
        if interval <= self.report_interval_s:
            return self.fresh_s
        return interval * max(MIN_FRESH_INTERVALS, self.fresh_s / self.report_interval_s)
