"""``fedplane bench autoscale``: every controller on every held-out series, at 60 s and 300 s start-up.

All runs happen in this process on the same demand: HPA is the baseline of ``cost_rel_hpa``.
Figures pool the series (all in replica units): late_pct = late demand ÷ demand, cost = replica-
seconds ÷ HPA's, util_mean = mean over series of the time-averaged utilization of ready pods,
actions = replica-count changes per series and day. The forecasters are scored at one hour ahead
(rolling origin over the held-out part, parameters fitted on the training part): MAE summed over
series ÷ the naive forecast's.

Two comparison variants run beside the issue's six policies, labelled under ``variants`` in the
JSON: ``hpa_80`` (the same HPA at an 80% target, autoscaling/v1's default: does HPA reach ours by
just running hotter?) and ``floor_rule`` (the learned residual's floor rule alone, its action pinned
at 0: what PPO adds or costs on top of it).

PPO earns its place or leaves the default: every attempt in ``ATTEMPTS`` is trained, then judged on
the last two days of every training part (never trained on) against the floor rule; the cheapest
attempt that was cheaper at no more late share there is what ``learned`` runs, else ``learned`` is the
floor rule. Every attempt's validation and held-out figures are in ``ppo_attempts``, failures included.

When no PPO attempt ships, a *schedule attempt* is judged the same way, start-up by start-up: the floor's
ceiling and a scale-down hold (:class:`controlplane.autoscaling.learned.Residual`) chosen on the two-day blocks
of training days just before the validation days; ``learned`` runs it at a start-up only where it beat the
rule on the validation days (``schedule_attempt``, and ``learned_is`` per start-up, say which).

``bounds``: what perfect foresight and ready pods alone would cost ÷ HPA's on the same held-out days
(:mod:`fedplane.lab.benches.autoscalebounds`): how far any forecast could take ``learned``.

``unseen``: every controller as chosen on the bench's series (forecast target, ceiling, PPO), run on
kinds of series none of them saw (:mod:`fedplane.lab.benches.autoscaleunseen`: traffic, request rates,
memory, fleet totals), pooled the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from controlplane.autoscaling import controllers as ctl
from controlplane.autoscaling import forecasters as fc
from controlplane.autoscaling import learned
from controlplane.autoscaling.feeds import (
    feed_at,
    horizon_steps,
    peak_feed,
    tick_demand,
)
from controlplane.autoscaling.replicas import TICK_S, Controller, Run, simulate
from controlplane.autoscaling.series import Series
from fedplane.lab.benches.autoscalebounds import bounds
from controlplane.autoscaling.training import LATE_WEIGHT, VALIDATION_DAYS

STARTUPS = (60.0, 300.0)
POLICIES = ("hpa", "keda", "kpa", "static", "forecast_hpa", "learned")
VARIANTS = {"hpa_80": "comparison: the same HPA at an 80% utilization target (autoscaling/v1's default)",
            "floor_rule": "comparison: the learned residual's forecast-safe floor alone (action pinned at its ceiling)"}
EVAL_DAYS = 2.0          # simulated span: the first two days of each held-out part
MAE_HORIZON_S = 3600.0   # forecasters are compared one hour ahead, as in the literature cited in #25
CHOSEN = "mstl_ets"      # the model the forecast-fed controllers use (chosen by measured MAE, see forecast_mae)
FORECAST_TARGETS = (1.0, 0.9, 0.85, 0.8, 0.7)  # candidates for the forecast metric's per-pod target
COST_BUDGET = {60.0: 1.0, 300.0: 1.05}        # replica-seconds ÷ HPA's allowed when choosing it (the goals)
CEILINGS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75)   # candidates for the learned residual's floor utilization
ATTEMPTS = (LATE_WEIGHT, 5 * LATE_WEIGHT)      # PPO attempts, by the reward's price of late demand
SCHEDULE_CEILINGS = (1.0, 0.95, 0.9)           # the schedule attempt's candidates: the floor's utilization...
HOLDS_S = (0.0, 300.0, 600.0)                  # ...and how long it holds its highest answer before scaling down
SCHEDULE_BLOCKS = 2                            # two-day blocks of training days (before validation) that choose them


def controller(policy: str, s: Series, forecast_target: float, ceiling: float,
               make_learned: Callable[[], Controller] | None) -> Controller:
    if policy == "hpa":
        return ctl.Hpa()
    if policy == "hpa_80":
        return ctl.Hpa(target=0.8, name="hpa_80")
    if policy == "floor_rule":
        return learned.Residual(learned.floor_rule, forecast_target, ceiling, name="floor_rule")
    if policy == "keda":
        return ctl.Keda()
    if policy == "kpa":
        return ctl.Kpa()
    if policy == "static":
        return ctl.Static(math.ceil(float(s.train.max()) / ctl.TARGET))
    if policy == "forecast_hpa":
        return ctl.Hpa(forecast_metric=True, forecast_target=forecast_target, name="forecast_hpa")
    if policy == "learned" and make_learned is not None:
        return make_learned()
    raise ValueError(f"no controller {policy!r}")


def run_series(s: Series, startup_s: float, feed_values: np.ndarray, forecast_target: float,
               make_learned: Callable[[float], Controller] | None, start: int | None = None,
               policies: tuple[str, ...] = POLICIES, ceiling: float = learned.UTIL_HIGH) -> dict[str, Run]:
    """Every policy on two days of ``s`` from sample ``start`` (default: the held-out part's first)."""
    start = s.split if start is None else start
    demand = tick_demand(s, start, EVAL_DAYS)
    feed = feed_at(s, start, feed_values)
    initial = math.ceil(float(demand[0]) / ctl.TARGET)
    runs = {}
    for p in policies:
        if p == "learned" and make_learned is None:
            continue
        c = controller(p, s, forecast_target, ceiling, (lambda: make_learned(startup_s)) if make_learned else None)
        runs[p] = simulate(c, demand, startup_s, initial, feed)
    return runs


def choose_forecast_target(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], startup_s: float) -> float:
    """The forecast target with the lowest late share within the cost budget, on the last two days of
    every *training* part (ties: the cheapest). The held-out parts play no role."""
    starts = [s.split - 1 - int(EVAL_DAYS * s.season) for s in series]  # its last sample is the training part's last
    hpa = [run_series(s, startup_s, feeds[(s.name, startup_s)], 1.0, None, a, ("hpa",)) for s, a in zip(series, starts)]
    scored = []
    for target in FORECAST_TARGETS:
        per = [h | run_series(s, startup_s, feeds[(s.name, startup_s)], target, None, a, ("forecast_hpa",))
               for s, a, h in zip(series, starts, hpa)]
        f = summarize(per)["forecast_hpa"]
        if f.cost_rel_hpa <= COST_BUDGET[startup_s]:
            scored.append((round(f.late_pct, 6), f.cost_rel_hpa, target))
    return min(scored)[2] if scored else FORECAST_TARGETS[0]


def choose_ceiling(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], startup_s: float,
                   forecast_target: float) -> float:
    """The learned residual's forecast-safe floor: the highest utilization at which the tail peak alone was
    late no more than its base (the forecast-fed HPA) on the last two days of every *training* part, series
    by series (else HPA's own target, where the residual changes nothing)."""
    starts = [s.split - 1 - int(EVAL_DAYS * s.season) for s in series]
    base = [run_series(s, startup_s, feeds[(s.name, startup_s)], forecast_target, None, a, ("forecast_hpa",))["forecast_hpa"]
            for s, a in zip(series, starts)]
    for ceiling in CEILINGS:
        runs = [run_series(s, startup_s, feeds[(s.name, startup_s)], forecast_target, None, a, ("floor_rule",), ceiling)
                for s, a in zip(series, starts)]
        if all(r["floor_rule"].late.sum() <= b.late.sum() for r, b in zip(runs, base)):
            return ceiling
    return learned.UTIL_LOW


@dataclass(frozen=True, slots=True)
class Summary:
    late_pct: float
    cost_rel_hpa: float
    util_mean: float
    actions: float


def summarize(per_series: list[dict[str, Run]]) -> dict[str, Summary]:
    out = {}
    hpa_cost = sum(r["hpa"].cost for r in per_series)
    days = sum(len(r["hpa"].demand) * TICK_S / 86400 for r in per_series)
    for p in per_series[0]:
        runs = [r[p] for r in per_series]
        out[p] = Summary(
            late_pct=100 * sum(float(r.late.sum()) for r in runs) / sum(float(r.demand.sum()) for r in runs),
            cost_rel_hpa=sum(r.cost for r in runs) / hpa_cost,
            util_mean=float(np.mean([r.util_mean for r in runs])),
            actions=sum(r.actions for r in runs) / days,
        )
    return out


def available_models() -> tuple[str, ...]:
    """The models to score: the built-in ones, and Prophet when its extra is installed."""
    import importlib.util

    return fc.MODELS + tuple(m for m in fc.OPTIONAL if importlib.util.find_spec(m) is not None)


def forecast_mae(series: list[Series], models: tuple[str, ...] = fc.MODELS) -> dict[str, float]:
    """Each model's MAE one hour ahead on the held-out parts, summed over series, ÷ naive's."""
    total = dict.fromkeys(models, 0.0)
    for s in series:
        h = horizon_steps(s, MAE_HORIZON_S)
        for m in models:
            f = fc.forecasts(fc.make(m, s.train, s.season, s.stride_s, h), s.values, h)
            total[m] += fc.mae(f, s.values, h, s.split)
    return {m: total[m] / total["naive"] for m in models}


def plot(path: Path, s: Series, startup_s: float, runs: dict[str, Run]) -> Path:
    """Demand, ready replicas and late demand over time for every controller, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, height_ratios=(3, 1))
    hours = np.arange(len(runs["hpa"].demand)) * TICK_S / 3600
    top.plot(hours, runs["hpa"].demand, color="black", lw=1.2, label="demand (replica units)")
    for p, r in runs.items():
        top.plot(hours, r.ready, lw=0.8, label=f"{p} ready")
        bottom.plot(hours, r.late, lw=0.8, label=p)
    top.set_title(f"{s.name}: held-out part, start-up {startup_s:.0f} s")
    top.set_ylabel("replicas")
    bottom.set_ylabel("late demand")
    bottom.set_xlabel("hours into the held-out part")
    top.legend(ncol=4, fontsize=7, loc="upper left")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def validation_starts(series: list[Series]) -> list[int]:
    """Each series' first sample of its training part's last ``VALIDATION_DAYS`` (PPO never trains on them)."""
    return [s.split - 1 - int(VALIDATION_DAYS * s.season) for s in series]


def residual(policy: Callable[[np.ndarray], float], targets: dict[float, float],
             schedules: dict[float, tuple[float, float]]) -> Callable[[float], Controller]:
    """The learned controller per start-up: ``policy`` on the floor rule at that start-up's (ceiling, hold)."""
    return lambda startup: learned.Residual(policy, targets[startup], *schedules[startup])


def judge(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], targets: dict[float, float],
          ceilings: dict[float, float], make: Callable[[float], Controller],
          starts: list[int] | None = None) -> dict[str, dict[str, float]]:
    """The controller ``make`` builds against the floor rule alone, per start-up: late shares and cost ÷ the rule's and
    ÷ HPA's, on the validation days (``starts`` None) or from ``starts`` on."""
    out = {}
    for st in STARTUPS:
        per = [run_series(s, st, feeds[(s.name, st)], targets[st], make, a, ("hpa", "floor_rule", "learned"), ceilings[st])
               for s, a in zip(series, starts or validation_starts(series))]
        v = summarize(per)
        out[f"{st:.0f}"] = {"late_pct": round(v["learned"].late_pct, 5), "floor_late_pct": round(v["floor_rule"].late_pct, 5),
                            "cost_rel_floor": round(v["learned"].cost_rel_hpa / v["floor_rule"].cost_rel_hpa, 4),
                            "cost_rel_hpa": round(v["learned"].cost_rel_hpa, 4)}
    return out


def beats(f: dict[str, float]) -> bool:
    """Cheaper than the floor rule at no more late share (one start-up's figures from :func:`judge`)."""
    return f["cost_rel_floor"] < 1.0 and f["late_pct"] <= f["floor_late_pct"]


def beats_rule(figures: dict[str, dict[str, float]]) -> bool:
    """Cheaper than the floor rule at no more late share, at every start-up."""
    return all(beats(f) for f in figures.values())


def schedule_starts(s: Series) -> list[int]:
    """The two-day blocks of ``s``'s training part just before its validation days (its first, calibrating day left out)."""
    v = validation_starts([s])[0]
    return [a for a in (v - int(k * EVAL_DAYS * s.season) for k in range(1, SCHEDULE_BLOCKS + 1)) if a >= s.season]


def choose_schedule(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], startup_s: float,
                    forecast_target: float) -> tuple[float, float] | None:
    """The cheapest (ceiling, hold) at which the floor rule was late no more than the forecast-fed HPA, series by
    series, on the training days before the validation days (None: no candidate was)."""
    blocks = [schedule_starts(s) for s in series]

    def totals(policy: str, make: Callable[[float], Controller] | None) -> list[tuple[float, float]]:
        runs = [[run_series(s, startup_s, feeds[(s.name, startup_s)], forecast_target, make, a, (policy,))[policy] for a in b]
                for s, b in zip(series, blocks)]
        return [(sum(float(r.late.sum()) for r in rs), sum(r.cost for r in rs)) for rs in runs]

    base = totals("forecast_hpa", None)
    best: tuple[float, float, float] | None = None
    for ceiling in SCHEDULE_CEILINGS:
        for hold in HOLDS_S:
            got = totals("learned", residual(learned.floor_rule, {startup_s: forecast_target}, {startup_s: (ceiling, hold)}))
            cost = sum(c for _, c in got)
            if all(late <= b + 1e-9 for (late, _), (b, _) in zip(got, base)) and (best is None or cost < best[0]):
                best = (cost, ceiling, hold)
    return None if best is None else best[1:]


def schedule_attempt(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], targets: dict[float, float],
                     ceilings: dict[float, float], log: Callable[[str], None]) -> tuple[dict[float, tuple[float, float]], dict[str, object]]:
    """The floor rule with a ceiling and a scale-down hold chosen per start-up on the training days before validation,
    judged on the validation days against the rule: the (ceiling, hold) ``learned`` runs per start-up (the rule's own,
    no hold, where it did not beat the rule) and the report."""
    rule = {st: (ceilings[st], 0.0) for st in STARTUPS}
    chosen = {st: choose_schedule(series, feeds, st, targets[st]) or rule[st] for st in STARTUPS}
    make = residual(learned.floor_rule, targets, chosen)
    figures = judge(series, feeds, targets, ceilings, make)
    shipped = {st: beats(figures[f"{st:.0f}"]) for st in STARTUPS}
    log("scale-down schedule, chosen on training days: " + ", ".join(
        f"ceiling {c:.2f} hold {h:.0f} s at {st:.0f} s ({'beat' if shipped[st] else 'did not beat'} the rule on validation)"
        for st, (c, h) in chosen.items()))
    report = {"chosen_on_training": {f"{st:.0f}": {"ceiling": c, "hold_s": h} for st, (c, h) in chosen.items()},
              "validation": figures, "held_out": judge(series, feeds, targets, ceilings, make, [s.split for s in series]),
              "shipped": {f"{st:.0f}": shipped[st] for st in STARTUPS}}
    return {st: chosen[st] if shipped[st] else rule[st] for st in STARTUPS}, report


def ppo_attempts(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], targets: dict[float, float],
                 ceilings: dict[float, float], train_steps: int, seed: int,
                 log: Callable[[str], None]) -> tuple[Callable[[np.ndarray], float], list[dict[str, object]]]:
    """Every attempt trained and judged; the policy ``learned`` runs (the cheapest that beat the rule, else the rule)."""
    from controlplane.autoscaling import training

    chosen: tuple[float, int] = (math.inf, -1)   # the cheapest attempt that beat the rule: its cost and index
    policies: list[Callable[[np.ndarray], float]] = []
    report: list[dict[str, object]] = []
    held_out = [s.split for s in series]
    for k, weight in enumerate(ATTEMPTS):
        policies.append(training.train(series, STARTUPS, feeds, targets, ceilings, train_steps, seed + k, weight))
        make = residual(policies[k], targets, {st: (ceilings[st], 0.0) for st in STARTUPS})
        figures = judge(series, feeds, targets, ceilings, make)
        kept = beats_rule(figures)
        cost = sum(f["cost_rel_floor"] for f in figures.values())
        if kept and cost < chosen[0]:
            chosen = (cost, k)
        report.append({"late_weight": weight, "seed": seed + k, "steps": train_steps, "beat_rule_on_validation": kept,
                       "validation": figures, "held_out": judge(series, feeds, targets, ceilings, make, held_out)})
        log(f"PPO attempt {k + 1}/{len(ATTEMPTS)} (late weight {weight:g}): " + ("beat" if kept else "did not beat")
            + " the floor rule on the validation days")
    for k, r in enumerate(report):
        r["shipped"] = k == chosen[1]
    return (policies[chosen[1]] if chosen[1] >= 0 else learned.floor_rule), report


def pooled(series: list[Series], feeds: dict[tuple[str, float], np.ndarray], targets: dict[float, float],
           ceilings: dict[float, float], make_learned: Callable[[float], Controller] | None,
           plot_dir: Path | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Every policy and variant on the held-out parts of ``series``, pooled per start-up (PNGs into ``plot_dir``)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for st in STARTUPS:
        per = []
        for s in series:
            runs = run_series(s, st, feeds[(s.name, st)], targets[st], make_learned, policies=POLICIES + tuple(VARIANTS),
                              ceiling=ceilings[st])
            per.append(runs)
            if plot_dir is not None:
                plot(plot_dir / f"autoscale-{s.name}-{st:.0f}s.png", s, st, {p: r for p, r in runs.items() if p in POLICIES})
        out[f"{st:.0f}"] = {p: {"late_pct": round(v.late_pct, 5), "cost_rel_hpa": round(v.cost_rel_hpa, 4),
                                "util_mean": round(v.util_mean, 2), "actions": round(v.actions, 1)}
                            for p, v in summarize(per).items()}
    return out


def bench(series: list[Series], train_steps: int, seed: int, plot_dir: Path | None,
          log: Callable[[str], None] = lambda m: None, unseen: list[tuple[str, Series]] = ()) -> dict[str, object]:  # type: ignore[assignment]
    """The ``bench autoscale`` JSON; PNGs into ``plot_dir`` when given; ``unseen`` (kind, series) reported apart."""
    feeds = {(s.name, st): peak_feed(s, st, CHOSEN) for s in series for st in STARTUPS}
    log(f"forecasts ready for {len(series)} series")
    targets = {st: choose_forecast_target(series, feeds, st) for st in STARTUPS}
    log("forecast target per pod, chosen on the training parts: " + ", ".join(f"{t:.2f} at {st:.0f} s" for st, t in targets.items()))
    ceilings = {st: choose_ceiling(series, feeds, st, targets[st]) for st in STARTUPS}
    log("learned residual's floor utilization, chosen on the training parts: " + ", ".join(f"{c:.2f} at {st:.0f} s" for st, c in ceilings.items()))
    policy: Callable[[np.ndarray], float] = learned.floor_rule
    attempts: list[dict[str, object]] = []
    if train_steps > 0:
        policy, attempts = ppo_attempts(series, feeds, targets, ceilings, train_steps, seed, log)
        log("learned runs " + ("a PPO residual" if policy is not learned.floor_rule else "the floor rule: no PPO attempt beat it"))
    schedules, schedule = {st: (ceilings[st], 0.0) for st in STARTUPS}, {}
    if policy is learned.floor_rule:  # a shipped PPO policy runs on the floor it was trained on
        schedules, schedule = schedule_attempt(series, feeds, targets, ceilings, log)
    make_learned = residual(policy, targets, schedules)
    out = pooled(series, feeds, targets, ceilings, make_learned, plot_dir)
    log("held-out parts simulated")
    mae = forecast_mae(series, available_models())
    result: dict[str, object] = {
        "series": len(series), "startup_s": out, "forecast_mae_vs_naive": {m: round(r, 4) for m, r in mae.items()},
        "variants": VARIANTS, "bounds": bounds(series, STARTUPS, EVAL_DAYS),
        "chosen_on_training": {"forecast_target": {f"{st:.0f}": v for st, v in targets.items()},
                               "learned_ceiling": {f"{st:.0f}": v for st, v in ceilings.items()}}}
    result["learned_is"] = {f"{st:.0f}": "ppo" if policy is not learned.floor_rule else
                            "floor_rule+schedule" if schedules[st] != (ceilings[st], 0.0) else "floor_rule" for st in STARTUPS}
    if train_steps > 0:
        result["ppo_attempts"] = attempts
    if schedule:
        result["schedule_attempt"] = schedule
    if unseen:
        more = {(s.name, st): peak_feed(s, st, CHOSEN) for _, s in unseen for st in STARTUPS}
        result["unseen"] = {"series": {s.name: kind for kind, s in unseen},
                            "startup_s": pooled([s for _, s in unseen], more, targets, ceilings, make_learned)}
        log(f"{len(unseen)} unseen series simulated")
    return result
