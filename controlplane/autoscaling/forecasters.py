"""Load forecasters for autoscaling: baselines, a compact ETS on a daily profile, and the planner's EWMA.

Each forecaster is online — ``observe(x)`` one sample per stride, ``ahead(h)`` the point forecast
``h`` strides out — so the benchmark and the product run the same code, and a forecast at time t
never sees a sample after t. ``fit`` picks parameters on training data only.

- ``naive``: the last sample. ``seasonal_naive``: the sample one day before the target.
- ``ewma_trend``: the planner's :class:`controlplane.forecast.LoadForecast`, reused as is.
- ``mstl_ets``: an MSTL-class model in numpy — a daily profile (median by time of day over the
  training days, the seasonal part) plus Holt's damped-trend exponential smoothing (ETS(A,Ad,N))
  on what remains, alpha/beta/phi chosen by grid search on the training MAE at the horizon used.
  statsforecast does the same in ~550 MB and pins pandas < 3; this is ~100 lines.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from controlplane.forecast import LoadForecast


class Forecaster(Protocol):
    name: str

    def observe(self, x: float) -> None: ...

    def ahead(self, h: int) -> float: ...

    def path(self, h: int) -> np.ndarray:
        """Forecasts 1…h strides ahead."""
        ...


@dataclass(slots=True)
class Naive:
    name: str = "naive"
    last: float = 0.0

    def observe(self, x: float) -> None:
        self.last = x

    def ahead(self, h: int) -> float:
        return self.last

    def path(self, h: int) -> np.ndarray:
        return np.full(h, self.last)


@dataclass(slots=True)
class SeasonalNaive:
    season: int
    name: str = "seasonal_naive"
    history: deque[float] = field(default_factory=deque)

    def observe(self, x: float) -> None:
        self.history.append(x)
        if len(self.history) > self.season:
            self.history.popleft()

    def ahead(self, h: int) -> float:
        if not self.history:
            return 0.0
        if len(self.history) < self.season or h > self.season:
            return self.history[-1]
        return self.history[h - 1]  # history[0] is one season before the next sample

    def path(self, h: int) -> np.ndarray:
        return np.array([self.ahead(k) for k in range(1, h + 1)])


@dataclass(slots=True)
class EwmaTrend:
    """The planner's forecaster on a regular clock (time = samples × stride)."""

    stride_s: float
    name: str = "ewma_trend"
    core: LoadForecast = field(default_factory=LoadForecast)
    t: float = 0.0

    def observe(self, x: float) -> None:
        self.t += self.stride_s
        self.core.add(self.t, x)

    def ahead(self, h: int) -> float:
        return self.core.at(h * self.stride_s)

    def path(self, h: int) -> np.ndarray:
        return np.array([self.ahead(k) for k in range(1, h + 1)])


@dataclass(slots=True)
class ProphetDaily:
    """Prophet (optional ``prophet`` extra), refitted once a day on everything seen so far (at
    ~5-minute resolution) from sample ``start`` on; each fit forecasts the next two days at once, as
    a daily batch job would. Before ``start`` it answers the last sample (it is not scored there)."""

    stride_s: float
    start: int
    name: str = "prophet"
    history: list[float] = field(default_factory=list)
    cache: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fitted_at: int = -1

    def observe(self, x: float) -> None:
        self.history.append(x)
        day = int(86400 / self.stride_s)
        if len(self.history) >= self.start and (self.fitted_at < 0 or len(self.history) - self.fitted_at >= day):
            self._refit(2 * day)

    def _refit(self, span: int) -> None:
        import logging

        import pandas as pd
        from prophet import Prophet

        logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
        k = max(1, int(300 / self.stride_s))
        y = np.asarray(self.history)[: len(self.history) // k * k].reshape(-1, k).mean(axis=1)
        df = pd.DataFrame({"ds": pd.to_datetime((np.arange(len(y)) * k + k / 2) * self.stride_s, unit="s"), "y": y})
        fit = Prophet(daily_seasonality=True, weekly_seasonality=False, yearly_seasonality=False).fit(df)
        self.fitted_at = len(self.history)
        t = (self.fitted_at - 1 + np.arange(span + 1)) * self.stride_s
        self.cache = np.maximum(0.0, fit.predict(pd.DataFrame({"ds": pd.to_datetime(t, unit="s")}))["yhat"].to_numpy())

    def ahead(self, h: int) -> float:
        return float(self.path(h)[-1])

    def path(self, h: int) -> np.ndarray:
        if self.fitted_at < 0:
            return np.full(h, self.history[-1] if self.history else 0.0)
        i = len(self.history) - self.fitted_at + np.arange(1, h + 1)
        return self.cache[np.minimum(i, len(self.cache) - 1)]


def daily_profile(train: np.ndarray, season: int) -> np.ndarray:
    """Seasonal part: per time of day, the median over training days of the sample minus its day's mean."""
    days = len(train) // season
    if days < 2:
        return np.zeros(season)
    d = train[: days * season].reshape(days, season)
    prof = np.median(d - d.mean(axis=1, keepdims=True), axis=0)
    k = max(1, season // 96)  # smooth over ~15 minutes: the profile is a shape, not noise
    return np.convolve(np.concatenate([prof[-k:], prof, prof[:k]]), np.ones(2 * k + 1) / (2 * k + 1), "same")[k:-k]


@dataclass(slots=True)
class MstlEts:
    profile: np.ndarray
    alpha: float = 0.3
    beta: float = 0.05
    phi: float = 0.9
    name: str = "mstl_ets"
    phase: int = 0          # index in the profile of the next sample
    level: float | None = None
    trend: float = 0.0

    def observe(self, x: float) -> None:
        y = x - self.profile[self.phase % len(self.profile)]
        self.phase += 1
        if self.level is None:
            self.level = y
            return
        prev = self.level
        self.level = self.alpha * y + (1 - self.alpha) * (prev + self.phi * self.trend)
        self.trend = self.beta * (self.level - prev) + (1 - self.beta) * self.phi * self.trend

    def ahead(self, h: int) -> float:
        if self.level is None:
            return 0.0
        if self.level is None:
            return 0.0
        damp = self.phi * (1 - self.phi ** h) / (1 - self.phi)
        return max(0.0, self.level + damp * self.trend + self.profile[(self.phase + h - 1) % len(self.profile)])

    def path(self, h: int) -> np.ndarray:
        if self.level is None:
            return np.zeros(h)
        k = np.arange(1, h + 1)
        damp = self.phi * (1 - self.phi ** k) / (1 - self.phi)
        season = self.profile[(self.phase + k - 1) % len(self.profile)]
        return np.maximum(0.0, self.level + damp * self.trend + season)


def fit_mstl_ets(train: np.ndarray, season: int, h: int) -> MstlEts:
    """Grid-search profile or none, alpha, beta, phi on the training MAE ``h`` strides ahead."""
    profiles = (daily_profile(train, season), np.zeros(season))  # without one if days do not repeat
    best: tuple[float, MstlEts] | None = None
    for prof, a, b, p in itertools.product(profiles, (0.05, 0.15, 0.3, 0.6, 1.0), (0.0, 0.02, 0.1), (0.8, 0.95)):  # phi < 1
        m = MstlEts(prof, a, b, p)
        err = mae(forecasts(m, train, h), train, h)
        if best is None or err < best[0]:
            best = (err, m)
    assert best is not None
    return MstlEts(best[1].profile, best[1].alpha, best[1].beta, best[1].phi)


def forecasts(model: Forecaster, x: np.ndarray, h: int) -> np.ndarray:
    """``f[t]``: the forecast of ``x[t + h]`` made after observing ``x[: t + 1]`` (rolling origin, one pass)."""
    f = np.empty(len(x))
    for t, v in enumerate(x):
        model.observe(float(v))
        f[t] = model.ahead(h)
    return f


def mae(f: np.ndarray, x: np.ndarray, h: int, start: int = 0) -> float:
    """MAE of forecasts made at origins ``t >= start`` whose target ``t + h`` is inside ``x``."""
    n = len(x) - h
    return float(np.mean(np.abs(f[start:n] - x[start + h:]))) if n > start else float("nan")


def make(name: str, train: np.ndarray, season: int, stride_s: float, h: int) -> Forecaster:
    """A fresh forecaster by name, its parameters (if any) fitted on ``train``."""
    if name == "naive":
        return Naive()
    if name == "seasonal_naive":
        return SeasonalNaive(season)
    if name == "ewma_trend":
        return EwmaTrend(stride_s)
    if name == "mstl_ets":
        return fit_mstl_ets(train, season, h)
    if name == "prophet":
        return ProphetDaily(stride_s, len(train))
    raise ValueError(f"unknown forecaster {name!r}")


MODELS = ("naive", "seasonal_naive", "ewma_trend", "mstl_ets")
OPTIONAL = ("prophet",)  # measured when installed (the ``prophet`` extra)
