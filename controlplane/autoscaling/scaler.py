"""One workload's autoscaler inside the control plane: demand replay, forecast and HPA, sans-IO.

``step(now, ready, replicas)`` returns a :class:`Decision`; the runtime scales the back end and
journals the reason. Demand is the spec's series replayed from its held-out part on the caller's
clock (``speed`` series seconds per second); the part before is the forecaster's history.

A packaged series that cannot feed a forecast — gaps or NaN, too little history — is not an
error: the autoscaler says why in ``fallback`` and behaves as the plain HPA (a missing sample is
a missing metric: HPA keeps the count). A series that cannot be loaded at all is refused on
enable; a stored one that no longer loads (after a restart) falls back the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from controlplane.autoscaling import forecasters as fc, series as sr
from controlplane.autoscaling.controllers import Hpa, Observation
from controlplane.autoscaling.peaks import PeakForecast
from controlplane.autoscaling.specs import AutoscaleSpec

MIN_HISTORY = 128   # samples before the held-out part: fewer and the quantile cannot be calibrated
FIT_SAMPLES = 20_000  # the model's parameters are fitted on the most recent history only (~1-3 s of grid search)
MAX_FEED_PER_S = 100  # replay samples fed per second of the plane's clock (~0.5 ms each at the largest horizon)
MAX_HORIZON = 2_000   # samples the forecast reaches ahead, (start-up + one HPA period) x speed / stride: the residual window


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    demand: float
    forecast: float | None
    reason: str


def load(spec: AutoscaleSpec, traces: Path | None) -> tuple[float, np.ndarray]:
    """The spec's raw series and its stride: the samples sent with it, a packaged name or a DLRM service (``dlrm-app_N``).

    Never a file the spec names: the control plane opens no path a client chose (a client reads its CSV itself)."""
    if spec.values:
        return spec.stride_s or 60.0, np.asarray(spec.values, dtype=float)
    names = {n: (d, f, c, s) for n, d, f, c, s in sr.PUBLIC}
    if spec.series in names:
        d, f, c, s = names[spec.series]
        return s, sr.packaged_column(d, f, c)
    if sr.DLRM_NAME.match(spec.series):
        from fedcore.traces.errors import TraceError
        from fedcore.traces.locate import DLRM, traces_dir

        app = spec.series.removeprefix("dlrm-")
        try:
            return 300.0, sr.dlrm_instances((traces or traces_dir()) / DLRM, [app])[app]
        except (TraceError, OSError, KeyError, ValueError) as e:
            raise sr.SeriesError(f"series {spec.series!r}: {e}") from None
    raise sr.SeriesError(
        f"series {spec.series[:60]!r} is neither a packaged series ({', '.join(names)}) nor dlrm-app_N; the control plane "
        "opens no file a client names: a CSV's samples travel with the request (fedplane autoscale enable --series FILE reads it)")


def paced(spec: AutoscaleSpec, stride: float) -> None:
    """Refuse a replay the plane's tick could not keep up with: every sample passed is fed to the forecaster, whose
    cost grows with the horizon (its point forecasts reach ``horizon`` samples ahead)."""
    per_s, horizon = spec.speed / stride, (spec.startup_s + 15.0) * spec.speed / stride
    if per_s > MAX_FEED_PER_S or horizon > MAX_HORIZON:
        raise sr.SeriesError(
            f"series {spec.series[:60]!r} replayed at speed {spec.speed:g} with {stride:g} s samples: {per_s:.4g} samples per second "
            f"(at most {MAX_FEED_PER_S}) and a start-up horizon of {horizon:.4g} samples (at most {MAX_HORIZON}); lower --speed")


@dataclass(slots=True)
class Autoscaler:
    spec: AutoscaleSpec
    stride_s: float
    replay: np.ndarray               # demand in replica units (NaN = missing sample)
    peaks: PeakForecast | None       # None: HPA behaviour
    fallback: str = ""
    hpa: Hpa = field(default_factory=Hpa)
    fed: int = 0                     # replay samples the forecaster has seen
    last: Decision | None = None
    failed: str = ""                 # why its last tick raised ("" when it did not): this workload only stops scaling

    @classmethod
    def build(cls, spec: AutoscaleSpec, traces: Path | None = None, strict: bool = False) -> Autoscaler:
        """The workload's autoscaler; a series that cannot be loaded raises :class:`SeriesError` when ``strict`` (on
        enable: the user hears why), else (a stored spec on restart) gives an HPA without demand that says why."""
        try:
            stride, raw = load(spec, traces)
            paced(spec, stride)
        except sr.SeriesError as e:
            if strict:
                raise
            return cls.hpa_only(spec, 60.0, np.array([math.nan]), f"{e}; autoscaling as HPA without demand")
        split = int(len(raw) * (1 - sr.HOLDOUT))
        history = raw[:split]
        finite = raw[np.isfinite(raw)]
        scale = spec.peak_replicas / max(float(np.percentile(finite, 99)), 1e-9) if len(finite) else 1.0
        replay = raw[split:] * scale if len(raw) - split >= 2 else raw * scale
        try:
            sr.checked(spec.series, history, MIN_HISTORY)
        except sr.SeriesError as e:
            return cls.hpa_only(spec, stride, replay, f"{e}; forecasting off, HPA behaviour")
        h = max(1, math.ceil((spec.startup_s + 15.0) * spec.speed / stride))  # the horizon in series time
        x = history * scale
        try:
            peaks = PeakForecast(fc.make("mstl_ets", x[-FIT_SAMPLES:], int(round(86400 / stride)), stride, h), h)
            for v in x:
                peaks.observe(float(v))
        except (ArithmeticError, ValueError, np.linalg.LinAlgError) as e:  # a series the model cannot fit: HPA still serves
            return cls.hpa_only(spec, stride, replay, f"forecaster cannot fit series {spec.series!r} ({type(e).__name__}: {e}); "
                                                      "forecasting off, HPA behaviour")
        hpa = Hpa(forecast_metric=spec.policy == "forecast_hpa", min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
                  name=spec.policy)
        return cls(spec, stride, replay, peaks, hpa=hpa)

    @classmethod
    def hpa_only(cls, spec: AutoscaleSpec, stride: float, replay: np.ndarray, why: str) -> Autoscaler:
        return cls(spec, stride, replay, None, why, Hpa(min_replicas=spec.min_replicas, max_replicas=spec.max_replicas))

    def demand(self, now: float) -> float:
        """Replayed demand at ``now`` (looping over the replay; NaN where a sample is missing)."""
        t = max(0.0, now - self.spec.enabled_at) * self.spec.speed / self.stride_s
        i = int(t) % len(self.replay)
        a, b = self.replay[i], self.replay[(i + 1) % len(self.replay)]
        return float(a + (b - a) * (t - int(t)))

    def step(self, now: float, ready: int, replicas: int) -> Decision:
        forecast = None
        if self.peaks is not None:
            due = int(max(0.0, now - self.spec.enabled_at) * self.spec.speed / self.stride_s) + 1
            self.fed = max(self.fed, due - len(self.replay))  # after a long pause (a restart) one loop of the replay is all it needs
            while self.fed < due:  # every replay sample up to now, once
                v = float(self.replay[self.fed % len(self.replay)])
                if math.isfinite(v):
                    self.peaks.observe(v)
                self.fed += 1
            forecast = self.peaks.guarded()  # the calibrated peak, back towards the point forecast as trust falls
        d = self.demand(now)
        trust = self.peaks.trust() if self.peaks is not None else 0.0
        want = self.hpa.decide(Observation(now, d, ready, replicas, forecast, None, trust))
        why = self.hpa.reason + (f" [{self.fallback}]" if self.fallback else "")
        self.last = Decision(want, d, forecast, f"{self.spec.policy if self.peaks else 'hpa'}: {why}")
        return self.last
