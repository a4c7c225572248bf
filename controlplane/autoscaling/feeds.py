"""Demand and forecast feeds on the replica simulator's tick, shared by the residual's training and the autoscale bench.

A series is sampled every ``stride_s``; the simulator ticks every ``TICK_S``. These functions turn
one into the other and give each tick the forecast made from the samples seen up to it.
"""

from __future__ import annotations

import math

import numpy as np

from controlplane.autoscaling import forecasters as fc
from controlplane.autoscaling.peaks import PeakForecast
from controlplane.autoscaling.series import Series
from controlplane.autoscaling.replicas import TICK_S, Forecast


def horizon_steps(s: Series, seconds: float) -> int:
    """Samples of ``s`` that cover ``seconds`` (at least one)."""
    return max(1, math.ceil(seconds / s.stride_s))


def tick_demand(s: Series, start: int, days: float | None) -> np.ndarray:
    """Demand every ``TICK_S`` from sample ``start`` on (``days`` of it, or all), linearly between samples."""
    end = len(s.values) - 1 if days is None else min(len(s.values) - 1, start + int(days * 86400 / s.stride_s))
    t = np.arange(0.0, (end - start) * s.stride_s, TICK_S)
    return np.interp(t, np.arange(end - start + 1) * s.stride_s, s.values[start:end + 1])


def peak_feed(s: Series, startup_s: float, model: str) -> np.ndarray:
    """Per sample, over start-up + one HPA period, made after seeing that sample only: the guarded q95 peak (what the
    forecast-fed HPA follows, :meth:`PeakForecast.guarded`), the q99 peak as calibrated (what the residual's floor is
    sized on: less trust must not mean a lower floor) and the forecast's trust."""
    h = horizon_steps(s, startup_s + 15.0)
    pf = PeakForecast(fc.make(model, s.train, s.season, s.stride_s, h), h)
    out = np.empty((len(s.values), 3))
    for i, x in enumerate(s.values):
        pf.observe(float(x))
        out[i] = pf.guarded(), pf.peak(tail=True), pf.trust()
    return out


def feed_at(s: Series, start: int, feed: np.ndarray) -> Forecast:
    """The forecast a controller sees at tick ``i``: the one from the last sample at or before it."""
    per = s.stride_s / TICK_S

    def at(i: int) -> tuple[float, float, float]:
        peak, tail, trust = feed[start + int(i / per)]
        return float(peak), float(tail), float(trust)
    return at
