"""The learned controller: a PPO residual on a forecast floor rule, on top of the forecast-fed HPA.

The floor rule: serve the tail (q99) forecast peak, or the demand now if higher, at a *ceiling*
utilization (chosen in the benchmark on training parts only); replicas of the forecast-fed HPA beyond
that are removed, none are ever added above it. Every HPA period the PPO policy sees the workload
relative to its replicas and answers ``a`` in [-1, 1]: the utilization the rule uses, moved ``a`` ×
``STRETCH`` from the ceiling (within 70%..100%). An untrained policy (``a`` = 0) *is* the floor rule,
so training starts from it and keeps what beats it. A *hold* (``hold_s``, chosen on training days like the
ceiling) scales down only to the highest answer of its last ``hold_s``: a pod removed and asked for again
within its start-up serves late, and on training days that churn, not the margin, was most of the rule's
late share at 60 s start-up. The floor is sized on the tail as calibrated, never
on the trust-guarded peak the forecast-fed HPA follows: on demand the forecast cannot calibrate (spikes,
bursts) the tail is far above the base, so the residual removes nothing there, and the base itself falls
back towards HPA (:meth:`controlplane.autoscaling.peaks.PeakForecast.trust`); where that trust is 0 the residual
steps aside altogether and the base's count stands (on a request rate whose intervals are half empty the
tail still sat below the spikes often enough to make the rule later than HPA).

Inference is numpy (the policy's two tanh layers and its mean head), so the control plane runs a
trained policy without torch; training (stable-baselines3, the ``train`` extra) happens on the
training part of each series only.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from controlplane.autoscaling.controllers import Hpa, Observation

UTIL_LOW, UTIL_HIGH = 0.7, 1.0   # the widest range the policy's utilization answer maps onto
STRETCH = 0.1      # how far from the rule's ceiling the policy's answer reaches (a = ±1)
FEATURES = 10
MEMORY_S = 300.0   # demand kept for the volatility features


def utilization(a: float, ceiling: float = UTIL_HIGH) -> float:
    """The rule's utilization moved ``a`` × ``STRETCH`` from ``ceiling`` (a = 0: the floor rule itself)."""
    return min(UTIL_HIGH, max(UTIL_LOW, ceiling + min(1.0, max(-1.0, a)) * STRETCH))


def floor_rule(x: np.ndarray) -> float:
    """The floor rule as a policy: the ceiling's utilization every period."""
    return 0.0


def floor_for(obs: Observation, util: float = UTIL_HIGH) -> int:
    """Fewest replicas that serve the tail peak (else the q95 one; and the demand now) at ``util``."""
    peak = obs.tail if obs.tail is not None else obs.forecast
    return max(1, math.ceil(max(peak or 0.0, obs.demand) / util))


def features(obs: Observation, base: Hpa, recent: deque[tuple[float, float]]) -> np.ndarray:
    """What the policy sees, relative to the replicas asked for (so one policy fits every workload size)."""
    scale = max(obs.replicas, 1)
    values = [v for _, v in recent] or [obs.demand]
    minute_ago = next((v for t, v in recent if t >= obs.now - 60.0), obs.demand)
    forecast = obs.forecast or obs.demand
    return np.array([obs.demand / scale, forecast / scale, obs.ready / scale,
                     base.desired / scale, floor_for(obs) / scale, math.log(scale) / 5,
                     (max(values) - min(values)) / scale, (obs.demand - minute_ago) / scale,
                     ((obs.tail or forecast) - forecast) / scale, obs.trust], dtype=np.float32)


def adjusted(base: int, obs: Observation, a: float, ceiling: float = UTIL_HIGH) -> int:
    """The base's count, less what the tail peak at the policy's utilization does not need."""
    return min(base, floor_for(obs, utilization(a, ceiling)))


@dataclass(slots=True)
class Residual:
    policy: Callable[[np.ndarray], float]
    forecast_target: float = 1.0
    ceiling: float = UTIL_HIGH     # the utilization of the forecast-safe floor
    hold_s: float = 0.0            # scale down only to the highest answer of this long (0: at once)
    name: str = "learned"
    base: Hpa = field(init=False)
    desired: int = 1
    reason: str = ""
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    answers: deque[tuple[float, int]] = field(default_factory=deque)   # the last ``hold_s`` of answers

    def __post_init__(self) -> None:
        self.base = Hpa(forecast_metric=True, forecast_target=self.forecast_target, name="forecast_hpa")

    def features(self, obs: Observation) -> np.ndarray:
        return features(obs, self.base, self.recent)

    def decide(self, obs: Observation) -> int:
        due = obs.now >= self.base.next_at
        x = self.features(obs) if due else None  # seen before this sample joins the memory, as the trainer sees it
        self.recent.append((obs.now, obs.demand))
        while self.recent[0][0] < obs.now - MEMORY_S:
            self.recent.popleft()
        if x is None:
            self.base.decide(obs)  # keeps its metric window
            return self.desired
        a = float(self.policy(x))
        want = self.base.decide(obs)
        now = max(1, adjusted(want, obs, a, self.ceiling))
        self.answers.append((obs.now, now))
        while self.answers[0][0] < obs.now - self.hold_s:
            self.answers.popleft()
        if obs.trust <= 0.0:  # a forecast its calibration does not trust at all sizes nothing: the base's count stands
            self.desired, self.reason = want, f"{self.base.reason} {want} (forecast untrusted: no residual)"
            return self.desired
        self.desired = max(n for _, n in self.answers)
        held = f"; {self.hold_s:.0f} s hold keeps {self.desired}" if self.desired > now else ""
        self.reason = f"{self.base.reason} {want} {'+' if a >= 0 else ''}{now - want} (tail peak fits at {utilization(a, self.ceiling):.0%}){held}"
        return self.desired


@dataclass(frozen=True, slots=True)
class MlpPolicy:
    """A PPO actor's deterministic action in numpy: tanh(tanh(x W1 + b1) W2 + b2) W3 + b3."""

    weights: tuple[np.ndarray, ...]

    def __call__(self, x: np.ndarray) -> float:
        w1, b1, w2, b2, w3, b3 = self.weights
        h = np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2)
        return float(np.clip((h @ w3 + b3)[0], -1.0, 1.0))

    def save(self, path: str) -> None:
        np.savez(path, *self.weights)

    @classmethod
    def load(cls, path: str) -> MlpPolicy:
        with np.load(path) as z:
            return cls(tuple(z[f"arr_{i}"] for i in range(6)))


def from_sb3(model: object) -> MlpPolicy:
    """The numpy copy of a stable-baselines3 PPO MlpPolicy (default [64, 64] tanh net)."""
    pol = model.policy  # type: ignore[attr-defined]
    layers = [m for m in pol.mlp_extractor.policy_net if hasattr(m, "weight")] + [pol.action_net]
    ws: list[np.ndarray] = []
    for layer in layers:
        ws += [layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()]
    return MlpPolicy(tuple(ws))
