"""Load forecasts from recent samples: an EWMA level plus a least-squares trend over a window.

Sans-IO: samples carry their own time. The trend only counts once the window spans
``min_span_s``, so a step change (a failover landing replicas) is not mistaken for growth;
the forecast looks ``horizon_s`` ahead. A cluster is overloaded when the measured load or the
forecast crosses the planner's threshold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

REBASE_WINDOWS = 4.0
"""The sums are recomputed over the window once their origin is this many windows old."""


@dataclass(slots=True)
class LoadForecast:
    """Running sums over the window make each sample and each forecast O(1): the plane forecasts every cluster on
    every tick (a hundred clusters, hundreds of samples each, summed four times a tick, was a tenth of a tick)."""

    alpha: float = 0.3        # EWMA smoothing of the level
    window_s: float = 120.0   # samples kept for the trend
    min_span_s: float = 30.0  # no trend before the window spans this long
    level: float | None = None
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    _origin: float = 0.0
    """Sums are over time since this (re-based now and then, so they keep their precision)."""
    _sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    """Sum of t, v, t*t and t*v over the samples (t since ``_origin``)."""

    def add(self, t: float, load: float) -> None:
        self.level = load if self.level is None else self.alpha * load + (1 - self.alpha) * self.level
        if not self.samples or t - self._origin > REBASE_WINDOWS * self.window_s:
            self._rebase(self.samples[0][0] if self.samples else t)
        self.samples.append((t, load))
        self._sum(t, load, 1.0)
        while self.samples and t - self.samples[0][0] > self.window_s:
            self._sum(*self.samples.popleft(), -1.0)

    def trend(self) -> float:
        """Load change per second (least squares over the window), 0 until the window is long enough."""
        if len(self.samples) < 3 or self.samples[-1][0] - self.samples[0][0] < self.min_span_s:
            return 0.0
        n = len(self.samples)
        st, sv, stt, stv = self._sums
        var = stt - st * st / n
        return (stv - st * sv / n) / var if var > 1e-9 * stt else 0.0

    def _sum(self, t: float, v: float, sign: float) -> None:
        d = t - self._origin
        s = self._sums
        s[0] += sign * d
        s[1] += sign * v
        s[2] += sign * d * d
        s[3] += sign * d * v

    def _rebase(self, origin: float) -> None:
        self._origin, self._sums = origin, [0.0, 0.0, 0.0, 0.0]
        for t, v in self.samples:
            self._sum(t, v, 1.0)

    def at(self, horizon_s: float) -> float:
        """Forecast load ``horizon_s`` ahead (never below zero)."""
        if self.level is None:
            return 0.0
        return max(0.0, self.level + self.trend() * horizon_s)
