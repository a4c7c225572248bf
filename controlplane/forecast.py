"""Load forecasts from recent samples: an EWMA level plus a linear trend (Holt's method).

Sans-IO: samples carry their own time; the forecast looks ``horizon_s`` ahead. A cluster is
overloaded when the measured load or the forecast crosses the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class LoadForecast:
    alpha: float = 0.5  # level smoothing
    beta: float = 0.3   # trend smoothing
    level: float | None = None
    trend: float = 0.0  # load per second
    last_t: float = 0.0

    def add(self, t: float, load: float) -> None:
        if self.level is None:
            self.level, self.last_t = load, t
            return
        dt = t - self.last_t
        if dt <= 0:
            return
        predicted = self.level + self.trend * dt
        level = self.alpha * load + (1 - self.alpha) * predicted
        self.trend = self.beta * (level - self.level) / dt + (1 - self.beta) * self.trend
        self.level, self.last_t = level, t

    def at(self, horizon_s: float) -> float:
        """Forecast load ``horizon_s`` after the last sample (never below zero)."""
        if self.level is None:
            return 0.0
        return max(0.0, self.level + self.trend * horizon_s)
