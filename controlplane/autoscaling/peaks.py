"""The forecast a controller acts on: the peak demand over the next ``horizon`` strides, at a quantile.

Online and causal: every sample, the point forecasts 1…horizon strides ahead give a predicted
peak; ``horizon`` samples later the realized peak is known, and the residual joins a window.
The answer is the predicted peak plus the residuals' ``q`` quantile over that window — a
quantile calibrated on history (q90–q95), which widens by itself where the model does badly.
A second, tail quantile (q99) of the same residuals is what the learned residual's floor is sized
on: it runs hotter than the forecast-fed HPA, so it needs the rarer misses priced in.

The calibration also says how far to trust the forecast: :meth:`PeakForecast.trust` is 1 while the q95
margin is at most ``TRUSTED_SPREAD`` of the demand's recent level and falls to 0 at ``UNTRUSTED_SPREAD``.
On spiky or bursty demand (request counts, fleets that step) the margin is most of the level: a
controller that followed that tail would hold capacity for every spike all the time, so autoscalers
fall back towards HPA as trust falls (:meth:`PeakForecast.guarded`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from controlplane.autoscaling.forecasters import Forecaster

QUANTILE = 0.95
TAIL_QUANTILE = 0.99
WINDOW = 2000   # residuals kept: ~2 days at 300 s strides, ~5.5 h at 10 s
TRUSTED_SPREAD, UNTRUSTED_SPREAD = 0.25, 0.75   # q95 margin ÷ recent level: full trust below, none above
LEVEL_ALPHA = 2 / (WINDOW + 1)   # the level is an EWMA over about the residuals' window


@dataclass(slots=True)
class PeakForecast:
    model: Forecaster
    horizon: int
    q: float = QUANTILE
    tail_q: float = TAIL_QUANTILE
    recent: deque[float] = field(default_factory=deque)         # the last `horizon` + 1 samples
    pending: deque[float] = field(default_factory=deque)        # predicted peaks awaiting their outcome
    residuals: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    offset: float = 0.0
    tail_offset: float = 0.0
    level: float | None = None   # the demand's recent level (EWMA), what the margin is judged against

    def observe(self, x: float) -> None:
        self.model.observe(x)
        self.level = x if self.level is None else self.level + LEVEL_ALPHA * (x - self.level)
        self.recent.append(x)
        if len(self.recent) > self.horizon + 1:
            self.recent.popleft()
        if len(self.pending) == self.horizon:  # the oldest was made `horizon` samples ago: its window is complete
            self.residuals.append(max(self.recent) - self.pending.popleft())
            if len(self.residuals) % 16 == 0 or len(self.residuals) < 64:
                self.offset, self.tail_offset = (float(v) for v in np.quantile(np.fromiter(self.residuals, float), (self.q, self.tail_q)))
        self.pending.append(self.point())

    def point(self) -> float:
        """Predicted peak over the next ``horizon`` strides (the current sample included)."""
        return max(self.recent[-1] if self.recent else 0.0, float(self.model.path(self.horizon).max()))

    def peak(self, tail: bool = False) -> float:
        """The calibrated ``q`` (``tail``: ``tail_q``) quantile of the coming peak (0 before any sample)."""
        return max(0.0, self.pending[-1] + (self.tail_offset if tail else self.offset)) if self.pending else 0.0

    def trust(self) -> float:
        """1 while the q95 margin is a small share of the recent level, falling linearly to 0 (see the module doc)."""
        spread = self.offset / max(self.level or 0.0, 1e-9)
        return min(1.0, max(0.0, (UNTRUSTED_SPREAD - spread) / (UNTRUSTED_SPREAD - TRUSTED_SPREAD)))

    def guarded(self, tail: bool = False) -> float:
        """The calibrated peak, its margin scaled by :meth:`trust`: the point forecast alone when it is not trusted."""
        if not self.pending:
            return 0.0
        return max(0.0, self.pending[-1] + self.trust() * (self.tail_offset if tail else self.offset))

    @property
    def calibrated(self) -> bool:
        return len(self.residuals) >= 64
