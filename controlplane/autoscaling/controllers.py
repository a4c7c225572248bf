"""Autoscaling controllers, side by side: each maps what it observes to a replica count.

Sans-IO: ``decide(obs)`` is called every simulator tick with the time inside ``obs``; each
controller keeps its own period and windows. Demand and capacity are in replica units (one
replica serves 1.0 at 100%); every controller aims at the same ``TARGET`` utilization.

- :class:`Hpa`: the Kubernetes HPA v2 algorithm as documented — every 15 s, per metric
  ``desired = ceil(current × metric / target)`` skipped within a 0.1 tolerance; not-yet-ready pods
  count as 0 usage when scaling up; the max over metrics; scale-up at most +100% or +4 pods per
  15 s (whichever is larger); scale-down to the highest recommendation of the last 300 s.
- :class:`Keda`: KEDA's loop — poll the external metric every 30 s, ``ceil(total / target)``,
  up at once, down only after a 300 s cooldown without a higher need.
- :class:`Kpa`: Knative's KPA — stable window 60 s, panic window 6 s; panic when the panic-window
  desire reaches 2× the ready pods; in panic never scale down; leave after a stable window calm.
- :class:`Static`: the training part's peak at the target, from the start.
- Forecast-fed HPA is :class:`Hpa` with a second, external metric — the forecast's calibrated
  quantile of peak demand over the start-up horizon (Crane EffectiveHPA: HPA stays the actuator),
  its per-pod target between the HPA's and 1.0 (the quantile already is headroom), chosen on history.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

TARGET = 0.7        # utilization every controller aims at (Knative's default target utilization)
MAX_REPLICAS = 500


@dataclass(frozen=True, slots=True)
class Observation:
    now: float
    demand: float       # load arriving now, replica units
    ready: int          # pods serving
    replicas: int       # pods asked for (ready + starting)
    forecast: float | None = None  # calibrated (q95) peak demand over the start-up horizon, if any
    tail: float | None = None      # the same peak at the tail quantile (q99), if any
    trust: float = 1.0             # how far the forecast's calibration trusts it, 0..1 (peaks.PeakForecast.trust)


@dataclass(slots=True)
class Hpa:
    """HPA v2 with its default behaviour; ``forecast_metric`` adds the forecast as an external metric."""

    forecast_metric: bool = False
    target: float = TARGET         # the utilization metric's target
    forecast_target: float = 1.0   # per pod: the calibrated peak must fit at this utilization (1.0: the quantile is the headroom)
    sync_s: float = 15.0
    tolerance: float = 0.1
    window_s: float = 300.0        # scale-down stabilization
    min_replicas: int = 1
    max_replicas: int = MAX_REPLICAS
    name: str = "hpa"
    next_at: float = 0.0
    desired: int = 1
    samples: deque[tuple[float, float]] = field(default_factory=deque)  # metrics window (the last sync period)
    recs: deque[tuple[float, int]] = field(default_factory=deque)       # recommendations, for stabilization
    reason: str = ""

    def decide(self, obs: Observation) -> int:
        self.samples.append((obs.now, obs.demand))
        while self.samples[0][0] <= obs.now - self.sync_s:
            self.samples.popleft()
        if obs.now < self.next_at:
            return self.desired
        self.next_at = obs.now + self.sync_s
        cur = max(obs.replicas, 1)
        if not self.samples or any(v != v for _, v in self.samples):  # a missing metric: HPA keeps the count
            self.reason = "metric missing: replicas kept"
            return self.desired
        demand = sum(v for _, v in self.samples) / len(self.samples)
        rec = self.utilization_rec(demand, obs.ready, cur)
        self.reason = f"utilization {demand / max(obs.ready, 1):.2f} (target {self.target})"
        if self.forecast_metric and obs.forecast is not None:
            f = self.external_rec(obs.forecast, cur)
            if f > rec:
                rec, self.reason = f, f"forecast peak {obs.forecast:.1f} ahead" + (f" (trust {obs.trust:.0%})" if obs.trust < 1 else "")
        self.desired = self.behave(obs.now, cur, rec)
        if self.desired < rec:
            self.reason += f"; scale-up limited to {self.desired}"
        elif self.desired > rec:
            self.reason += f"; {self.window_s:.0f} s stabilization holds {self.desired}"
        return self.desired

    def utilization_rec(self, demand: float, ready: int, cur: int) -> int:
        """As the HPA: utilization in whole percent of the ready pods' requests, against the target percent."""
        if ready == 0:
            return cur
        target = round(self.target * 100)
        ratio = int(demand * 100 / ready) / target
        if abs(ratio - 1) <= self.tolerance:
            return cur
        unready = cur - ready
        if ratio > 1 and unready > 0:  # not-yet-ready pods count as 0 usage: dampens the scale-up
            ratio = int(demand * 100 / cur) / target
            if ratio <= 1 + self.tolerance:
                return cur
            return math.ceil(ratio * cur)
        return math.ceil(ratio * ready)

    def external_rec(self, peak: float, cur: int) -> int:
        """AverageValue target per pod: the calibrated peak must fit once the new pods are ready."""
        ratio = peak / (self.forecast_target * cur)
        return cur if abs(ratio - 1) <= self.tolerance else math.ceil(peak / self.forecast_target)

    def behave(self, now: float, cur: int, rec: int) -> int:
        rec = min(max(rec, self.min_replicas), self.max_replicas)
        self.recs.append((now, rec))
        while self.recs[0][0] < now - self.window_s:
            self.recs.popleft()
        if rec > cur:
            return min(rec, max(2 * cur, cur + 4))
        return min(cur, max(r for _, r in self.recs))


@dataclass(slots=True)
class Keda:
    poll_s: float = 30.0
    cooldown_s: float = 300.0
    name: str = "keda"
    next_at: float = 0.0
    desired: int = 1
    high_at: float = -1e18   # last time the metric asked for the current count or more

    def decide(self, obs: Observation) -> int:
        if obs.now < self.next_at:
            return self.desired
        self.next_at = obs.now + self.poll_s
        want = min(max(math.ceil(obs.demand / TARGET), 1), MAX_REPLICAS)
        if want >= self.desired:
            self.desired, self.high_at = want, obs.now
        elif obs.now - self.high_at >= self.cooldown_s:
            self.desired = want
        return self.desired


@dataclass(slots=True)
class Kpa:
    stable_s: float = 60.0
    panic_s: float = 6.0
    panic_threshold: float = 2.0
    name: str = "kpa"
    desired: int = 1
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    panic_until: float = -1.0

    def decide(self, obs: Observation) -> int:
        self.samples.append((obs.now, obs.demand))
        while self.samples[0][0] <= obs.now - self.stable_s:
            self.samples.popleft()
        stable = sum(v for _, v in self.samples) / len(self.samples)
        recent = [v for t, v in self.samples if t > obs.now - self.panic_s]
        panic = sum(recent) / len(recent)
        want_stable, want_panic = math.ceil(stable / TARGET), math.ceil(panic / TARGET)
        if want_panic / max(obs.ready, 1) >= self.panic_threshold:
            self.panic_until = obs.now + self.stable_s
        if obs.now < self.panic_until:
            self.desired = max(self.desired, want_panic)  # panic: never scale down
        else:
            self.desired = want_stable
        self.desired = min(max(self.desired, 1), MAX_REPLICAS)
        return self.desired


@dataclass(slots=True)
class Static:
    replicas: int
    name: str = "static"

    def decide(self, obs: Observation) -> int:
        return self.replicas
