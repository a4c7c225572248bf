"""Load forecasts from recent samples: an EWMA level plus a least-squares trend over a window.

Sans-IO: samples carry their own time. The trend only counts once the window spans
``min_span_s``, so a step change (a failover landing replicas) is not mistaken for growth;
the forecast looks ``horizon_s`` ahead. A cluster is overloaded when the measured load or the
forecast crosses the planner's threshold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class LoadForecast:
    alpha: float = 0.3        # EWMA smoothing of the level
    window_s: float = 120.0   # samples kept for the trend
    min_span_s: float = 30.0  # no trend before the window spans this long
    level: float | None = None
    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def add(self, t: float, load: float) -> None:
        self.level = load if self.level is None else self.alpha * load + (1 - self.alpha) * self.level
        self.samples.append((t, load))
        while self.samples and t - self.samples[0][0] > self.window_s:
            self.samples.popleft()

    def trend(self) -> float:
        """Load change per second (least squares over the window), 0 until the window is long enough."""
        if len(self.samples) < 3 or self.samples[-1][0] - self.samples[0][0] < self.min_span_s:
            return 0.0
        n = len(self.samples)
        mt = sum(t for t, _ in self.samples) / n
        ml = sum(v for _, v in self.samples) / n
        var = sum((t - mt) ** 2 for t, _ in self.samples)
        return sum((t - mt) * (v - ml) for t, v in self.samples) / var if var else 0.0

    def at(self, horizon_s: float) -> float:
        """Forecast load ``horizon_s`` ahead (never below zero)."""
        if self.level is None:
            return 0.0
        return max(0.0, self.level + self.trend() * horizon_s)
