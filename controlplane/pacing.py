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

Backpressure (:class:`Backpressure`): the budget is what the plane takes on a core of its own; on a host that gives it
less (a 10,000-agent run on a shared 2-core host got 6-35% of a core), ingest alone filled what it got and submits and
ticks waited behind it. So while the plane's event loop runs late (its lag, sampled by the serving loop) the pace is
slowed, by halves, up to :data:`MAX_SLOWDOWN` times, and quickened again once the loop is on time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REPORT_BUDGET_PER_S = 1000.0
"""Reports a second the plane takes at most in steady state (about a third of a core at the measured cost)."""
MIN_FRESH_INTERVALS = 3.0
"""A report is fresh for at least this many intervals: one late report (jitter, a busy host) is not silence."""
MAX_SLOWDOWN = 4.0
"""At most this many times slower than the budget's pace (10,000 agents: every 40 s, not 10 s)."""
LATE_S, ON_TIME_S = 0.05, 0.01
"""The event loop's mean lag over a window that slows the pace (above the first) or quickens it (below the second)."""
WINDOW_S = 10.0
"""The shortest window the lag is judged over (and never shorter than the pace: every agent heard the last change)."""


@dataclass(frozen=True, slots=True)
class Pacing:
    report_interval_s: float
    """The interval a small fleet reports at (``Timings.report_interval_s``)."""
    fresh_s: float
    """How long a report is fresh at that interval (``Timings.fresh_s``)."""
    budget_per_s: float = REPORT_BUDGET_PER_S

    def interval_s(self, agents: int, slowdown: float = 1.0) -> float:
        """The report interval to ask of each of ``agents`` agents: once the budget binds, in whole seconds rounded up,
        so the pace (and the fresh window, whose every move recounts the evidence) moves once per ``budget_per_s``
        agents that join, not with each; ``slowdown`` (:class:`Backpressure`) stretches it then, never a small fleet's."""
        needed = agents / self.budget_per_s
        if needed <= self.report_interval_s:
            return self.report_interval_s
        return max(self.report_interval_s, float(math.ceil(needed)) * slowdown)

    def fresh_for(self, agents: int, slowdown: float = 1.0) -> float:
        """How long a report stays fresh at that pace (the timings' own while the pace is theirs)."""
        interval = self.interval_s(agents, slowdown)
        if interval <= self.report_interval_s:
            return self.fresh_s
        return interval * max(MIN_FRESH_INTERVALS, self.fresh_s / self.report_interval_s)


class Backpressure:
    """How many times slower than the budget's pace agents are asked to report: doubled when the event loop's mean lag
    over a window is above :data:`LATE_S`, halved when below :data:`ON_TIME_S` (1 to :data:`MAX_SLOWDOWN`). A window
    lasts at least the pace itself, so every agent has been told the last change before the next: a halving leaves
    the fresh window (at least three intervals) over the old interval, and no agent on the old pace reads as silent."""

    def __init__(self) -> None:
        self.slowdown = 1.0
        self._since: float | None = None
        self._lag_s = 0.0
        self._samples = 0

    def lag(self, lag_s: float, now: float, interval_s: float) -> None:
        """One sample of the event loop's lag (``now`` on a monotonic clock; ``interval_s``: the pace asked now)."""
        if self._since is None:
            self._since = now
        self._lag_s, self._samples = self._lag_s + max(0.0, lag_s), self._samples + 1
        if now - self._since < max(WINDOW_S, interval_s):
            return
        mean = self._lag_s / self._samples
        if mean > LATE_S:
            self.slowdown = min(MAX_SLOWDOWN, self.slowdown * 2)
        elif mean < ON_TIME_S:
            self.slowdown = max(1.0, self.slowdown / 2)
        self._since, self._lag_s, self._samples = now, 0.0, 0
