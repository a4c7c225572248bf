"""What no autoscaler beats on the bench's held-out days: the cost of perfect foresight and of ready pods alone.

The #42 goals ask ``learned`` for a cost ÷ HPA's; these bounds say how much of it a better forecast could
still win. ``foresight``: a controller told the future demand asks, every tick, for the peak over the pods'
start-up ahead (at 100% and at 95% utilization) — never late, and feasible only with the future in hand.
``ready_only``: the replica-seconds of exactly ceil(demand) ready pods with nothing starting — no
controller that is never late costs less.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controlplane.autoscaling import controllers as ctl
from controlplane.autoscaling.feeds import tick_demand
from controlplane.autoscaling.replicas import TICK_S, simulate
from controlplane.autoscaling.series import Series

FORESIGHT_UTILS = {"foresight": 1.0, "foresight_95": 0.95}


@dataclass(slots=True)
class Foresight:
    """Knows ``demand`` ahead: asks for its peak over the next start-up at ``util`` (so it is never late)."""

    demand: np.ndarray
    startup_s: float
    util: float = 1.0
    name: str = "foresight"

    def decide(self, obs: ctl.Observation) -> int:
        i = round(obs.now / TICK_S)
        ahead = self.demand[i: i + int(self.startup_s / TICK_S) + 1]
        return max(1, math.ceil(float(ahead.max()) / self.util))


def bounds(series: Sequence[Series], startups: Sequence[float], days: float) -> dict[str, dict[str, float]]:
    """Per start-up, pooled over the held-out parts' first ``days``: each bound's cost ÷ HPA's (and foresight's late share)."""
    out = {}
    for st in startups:
        cost = dict.fromkeys(("hpa", *FORESIGHT_UTILS, "ready_only"), 0.0)
        late = demand_sum = 0.0
        for s in series:
            demand = tick_demand(s, s.split, days)
            initial = math.ceil(float(demand[0]) / ctl.TARGET)
            cost["hpa"] += simulate(ctl.Hpa(), demand, st, initial).cost
            for name, util in FORESIGHT_UTILS.items():
                run = simulate(Foresight(demand, st, util), demand, st, initial)
                cost[name] += run.cost
                late += float(run.late.sum())
            cost["ready_only"] += float(np.ceil(demand).sum()) * TICK_S
            demand_sum += float(demand.sum())
        out[f"{st:.0f}"] = {f"{k}_cost_rel_hpa": round(v / cost["hpa"], 4) for k, v in cost.items() if k != "hpa"} | {
            "foresight_late_pct": round(100 * late / max(demand_sum, 1e-12), 5)}
    return out
