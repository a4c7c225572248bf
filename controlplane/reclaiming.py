"""Reclaimed capacity: what a node's online pods reserve but, by forecast, will not use over the horizon.

The plane holds this (not the agent) because the forecasters live here (:mod:`controlplane.autoscaling`)
and the layers keep ``edgeagent`` from importing them; the agents report their online pods' usage in
their summaries and apply the batch quota the auction (:mod:`controlplane.auctions`) grants.

Sans-IO: one sample per stride goes in, the estimate comes out. The estimate is the calibrated tail
quantile (q99) of the online usage's peak over the next ``horizon`` strides (:class:`PeakForecast`),
so a forecast that misses often widens its own margin. Until it is calibrated nothing is reclaimed:
batch gets only what online pods do not request at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.autoscaling.forecasters import Forecaster, Naive
from controlplane.autoscaling.peaks import PeakForecast

HORIZON = 10
"""Strides looked ahead: at 30 s strides, 5 minutes — longer than the auction takes to evict (see auctions)."""


@dataclass(slots=True)
class NodeReclaim:
    """One node's online usage forecast and the capacity it leaves to batch (millicores)."""

    capacity_milli: int
    forecast: PeakForecast
    headroom_milli: int = 0
    """Kept free of batch whatever the forecast says (the node's system daemons, the agent)."""

    @classmethod
    def on(cls, capacity_milli: int, *, horizon: int = HORIZON, model: Forecaster | None = None, headroom_milli: int = 0) -> NodeReclaim:
        if capacity_milli <= 0 or horizon < 1 or headroom_milli < 0:
            raise ValueError(f"capacity {capacity_milli}, horizon {horizon}, headroom {headroom_milli}: need positive, >= 1, >= 0")
        return cls(capacity_milli, PeakForecast(model or Naive(), horizon), headroom_milli)

    def observe(self, online_used_milli: float) -> None:
        """One stride's online usage on the node (what its online pods' cgroups used, averaged over the stride)."""
        if not math.isfinite(online_used_milli) or online_used_milli < 0:
            raise ValueError(f"online usage must be a finite non-negative number, got {online_used_milli!r}")
        self.forecast.observe(online_used_milli)

    def online_peak(self, online_request_milli: int) -> int:
        """What online work may use over the horizon: the forecast's tail, or every request before calibration."""
        if not self.forecast.calibrated:
            return online_request_milli
        return min(self.capacity_milli, math.ceil(self.forecast.peak(tail=True)))

    def reclaimed(self, online_request_milli: int) -> int:
        """Reserved by online pods, forecast unused: what batch may borrow and online may take back."""
        return max(0, online_request_milli - self.online_peak(online_request_milli))

    def batch_supply(self, online_request_milli: int) -> int:
        """Capacity batch may hold now: unrequested plus reclaimed, less the headroom."""
        peak = max(self.online_peak(online_request_milli), 0)
        return max(0, self.capacity_milli - self.headroom_milli - peak)
