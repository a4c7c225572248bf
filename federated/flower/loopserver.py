"""The loop's ServerApp: rounds of regional training on agents' experience, export, canary, promote or roll back.

Per round: the global weights go to every region's trainer, the replies that arrive by the
deadline are aggregated (``pooled``, the default: the regions' normal equations summed, exactly
the fit on their pooled rows, :mod:`learner`; or FedAvg or a robust rule behind a norm bound on
their weights, :mod:`strategies`), the
candidate is exported to int8 ONNX and registered with its manifest (:mod:`registry`), installed
on the canary agents and judged on the held-out twin scenario (:mod:`fleetmetric`) twice: the fleet
as it runs during the canary (the canary share of nodes on the candidate, the rest on the current
model) and the fleet as it would run after promotion (every node on the candidate). It is promoted
to every agent when neither regresses from the current fleet metric (the canary within
``canary-tolerance``, the candidate everywhere within ``tolerance``), else
rolled back: the canaries drop it and return to the previous model, and the next round starts
from the previous global weights (so the deployed fleet never moves to a worse measured model). Each round's verdict is in the
registry's history and, with its figures, one JSON line of the report file. The agents' own
``/metrics`` confirm what each runs (``agents_on_version``).

Rounds overlap: round r+1's training messages go out (with the global model as it stands) as
soon as round r's replies are in, so the regions train while round r's candidate is exported,
canaried and judged; with a near-exact local fit (tiny ``prox``) the anchor hardly matters, and
a round costs max(training, judging) instead of their sum. Round 1 is dispatched when the
warmup begins and trains when it ends (``not-before``). ``round_wall_s`` is the time between
consecutive verdicts (round 1: from the end of the warmup), so the rounds' walls add up to the
loop's wall clock after the warmup.

The canary is weighted: the canary agents score the ``canary-weight`` share of their decisions
(:func:`federated.runtime.canary.takes_canary`, by pod uid) with the candidate, the rest with
the current model, and the mixed fleet is judged with the same routing.

Judging and reporting use disjoint seeds of the same held-out scenario (:mod:`fleetmetric`):
every verdict above is taken on the judging seeds (``judge_metric``, ``canary_metric``,
``candidate_metric``), and after the last round each round's fleet model, the drill's canary
fleet, the heuristics and central training are measured on the report seeds (the ``measured``
line): the figures a user reads are not the ones the promotions selected on. That measurement
runs after the last verdict, so it never lengthens a round's wall.

Before round 1 the cold start (never a copy of the heuristic it is compared with) is published,
installed everywhere and left to place pods for ``warmup-s``: the first experience. With
``baselines`` set the run also measures the heuristics and central training (the same learner on
every region's pooled experience, as many steps from the same cold start) on the same scenario.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp

from fedcore.scheduling.fragmentation import PodTypes
from federated.flower import fleetmetric, learner, registry, rollout, strategies
from federated.flower.loopconfig import Agent, LoopConfig
from federated.flower.records import (
    EXAMPLES,
    GRAM,
    METRICS,
    MOMENT,
    STATS,
    from_record,
    to_record,
)
from federated.flower.serverapp import collect
from federated.model import PlacementScorer
from federated.runtime import experience
from federated.runtime.features import NODE_FEATURES

log = logging.getLogger("flwr")
POLL_S = 0.2
"""How often the ServerApp pulls the regions' replies (a reply waits at most this long)."""
HEURISTICS = ("fgd", "bestfit", "kube-default", "random")
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.set_num_threads(1)
    run(grid, LoopConfig.parse(dict(context.run_config)))


def to_model(weights: dict[str, np.ndarray]) -> PlacementScorer:
    model = PlacementScorer()
    model.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in weights.items()})
    return model


def bad_model(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rollback drill's candidate: the policy inverted on the same 0-100 scale (score 100 - s), so canary
    nodes bid as high as good ones for the placements that fragment them most."""
    out = {k: np.array(v, copy=True) for k, v in weights.items()}
    out[learner.WIDE] = -out[learner.WIDE]
    out[learner.WIDE][0, NODE_FEATURES.index("arch_match")] += 100.0  # 1 for every pod that names no architecture
    return out


def canaries(config: LoopConfig) -> list[Agent]:
    """``canary`` agents, one region after another (the first agent of each, then the second...)."""
    regions = list(config.regions().values())
    order = [group[i] for i in range(max(map(len, regions))) for group in regions if i < len(group)]
    return order[: config.canary]


@dataclass(frozen=True, slots=True)
class Sent:
    """A round's training messages in flight."""

    round: int
    bytes: int
    """Size of the global weights sent to each region."""
    asked: int
    ids: set[str]
    end: float
    """Monotonic deadline for replies."""
    weights: dict[str, np.ndarray]
    """The global weights sent (the anchor of the round's fit)."""


class Phases:
    """Seconds spent in each phase of a round (where the round's wall time goes)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._last = time.monotonic()

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.spent[name] = round(now - self._last, 2)
        self._last = now


class Report:
    """The report file: one JSON line per event, flushed as written (the bench and the CLI follow it)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def write(self, line: dict[str, Any]) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(line) + "\n")
        log.info("%s", line)


def run(grid: Grid, config: LoopConfig) -> None:
    report = Report(config.report_file)
    shown = fleetmetric.HeldOut.load(config.traces, config.eval_nodes, config.eval_seeds)
    held = shown.judging()
    types = held.types
    torch.manual_seed(config.seed)
    template = {k: v.detach().numpy().copy() for k, v in PlacementScorer().state_dict().items()}
    root = config.registry_dir
    resumed = registry.promoted(root) if config.resume else None
    if resumed is not None:  # a service's next run goes on from the model the fleet runs
        current = root / resumed
        weights = {k: v.detach().numpy().copy() for k, v in registry.load_model(current).state_dict().items()}
        current_metric = held.model(current)
    else:
        weights = learner.cold_start(template, config.cold_start, config.seed)
        current = registry.publish(root, to_model(weights), types, {"run": config.tag, "round": 0, "cold_start": config.cold_start})
        current_metric = held.model(current)
        registry.record(root, current.name, "promoted", round=0, metric=current_metric, run=config.tag)
    fleet_by_round: dict[int, Path] = {0: current}
    drills: dict[int, tuple[Path, Path]] = {}
    deliver = rollout.make(config.shelf_dir)
    deliver.start(config.fleet, current)
    seen = rollout.wait_for({a.name: current.name for a in config.fleet}, config.fleet, config.swap_timeout_s)
    report.write({"event": "start", "cold_start": f"resumed from {resumed}" if resumed else learner.describe_cold_start(config.cold_start, config.seed),
                  "metric": fleetmetric.NAME, "higher_is_better": fleetmetric.HIGHER_IS_BETTER, "metric_detail": shown.describe(),
                  "judge_seeds": list(held.seeds), "report_seeds": list(shown.seeds),
                  "model_version": current.name, "judge_metric": current_metric,
                  "agents_on_version": sum(v == current.name for v in seen.values()), "agents": len(config.fleet)})
    strategy = strategies.make(config.strategy)
    canary = canaries(config)
    sent = push_round(grid, strategy, config, 1, weights, config.warmup_s)  # dispatched now, trains after the warmup
    time.sleep(config.warmup_s)
    mark = time.monotonic()
    for rnd in range(1, config.rounds + 1):
        phases = Phases()
        line = collect_round(grid, strategy, config, rnd, sent)
        phases.mark("train")
        if rnd < config.rounds:  # the regions train the next round on the current global model while this one is judged
            sent = push_round(grid, strategy, config, rnd + 1, weights)
        candidate = line.pop("weights")
        if rnd == config.drill_round:
            candidate, line["drill"] = bad_model(candidate if candidate is not None else weights), True
        if candidate is None:
            line.update(canary="skipped", judge_metric=current_metric, model_version=current.name)
        else:
            version = registry.publish(root, to_model(candidate), types, {
                "run": config.tag, "round": rnd, "strategy": "pooled" if config.pooled else config.strategy.rule, "clients": line["answered"],
                "examples": line["examples"], "drill": rnd == config.drill_round})
            registry.record(root, version.name, "canary", round=rnd, run=config.tag, weight=config.canary_weight)
            phases.mark("publish")
            deliver.canary(canary, version, config.canary_weight)
            if rnd == config.drill_round:
                drills[rnd] = (current, version)
            mixed = held.mixed(current, version, len(canary) / len(config.fleet), config.canary_weight)
            everywhere = held.model(version)
            phases.mark("canary_eval")
            both = rollout.with_canary(current.name, version.name)
            on_canary = rollout.wait_for({a.name: both for a in canary}, config.fleet, config.swap_timeout_s)
            phases.mark("canary_confirm")
            line.update(candidate=version.name, canary_metric=mixed, candidate_metric=everywhere,
                        canary_agents_on_candidate=sum(v == both for v in on_canary.values()))
            if mixed >= current_metric * (1.0 - config.canary_tolerance) and everywhere >= current_metric * (1.0 - config.tolerance):
                deliver.promote(config.fleet, canary, version)
                current, current_metric, weights = version, everywhere, candidate
                registry.record(root, version.name, "promoted", round=rnd, metric=current_metric, canary_metric=mixed, run=config.tag)
                line["canary"] = "promoted"
            else:
                deliver.roll_back(canary)
                registry.record(root, version.name, "rolled_back", round=rnd, canary_metric=mixed, candidate_metric=everywhere,
                                baseline=current_metric, run=config.tag)
                line["canary"] = "rolled_back"
            line.update(judge_metric=current_metric, model_version=current.name)
            phases.mark("verdict")
        seen = rollout.wait_for({a.name: current.name for a in config.fleet}, config.fleet, config.swap_timeout_s)
        phases.mark("fleet_confirm")
        line["agents_on_version"] = sum(v == current.name for v in seen.values())
        fleet_by_round[rnd] = current
        now = time.monotonic()
        line["round_wall_s"], line["phases_s"], mark = now - mark, phases.spent, now
        report.write(line)
    measured = measure(shown, fleet_by_round, drills, config)
    report.write(measured)
    if config.baselines:  # after the rounds, so they neither delay round 1 nor lengthen the first experience
        report.write({"event": "heuristics", **{name: shown.heuristic(name) for name in HEURISTICS}})
        report.write({"event": "central", **central(config, types, shown, root)})
    report.write({"event": "end", "first_metric": measured["metrics"][0], "final_metric": measured["metrics"][-1],
                  "judge_final_metric": current_metric, "model_version": current.name, "cold_start_version": fleet_by_round[0].name})


def measure(shown: fleetmetric.HeldOut, fleet_by_round: dict[int, Path], drills: dict[int, tuple[Path, Path]],
            config: LoopConfig) -> dict[str, Any]:
    """The ``measured`` line: on the report seeds, the fleet model after each round (index 0: the cold start; each
    version measured once) and each drill round's canary fleet (the previous model with the bad candidate on the
    canary share)."""
    started = time.monotonic()
    by_version: dict[str, float] = {}
    for version in fleet_by_round.values():
        if version.name not in by_version:
            by_version[version.name] = shown.model(version)
    share = config.canary / len(config.fleet)
    drill = {str(rnd): shown.mixed(before, bad, share, config.canary_weight) for rnd, (before, bad) in drills.items()}
    return {"event": "measured", "seeds": list(shown.seeds), "metrics": [by_version[fleet_by_round[r].name] for r in sorted(fleet_by_round)],
            "by_version": by_version, "drill_canary_metric": drill, "measure_s": round(time.monotonic() - started, 1)}


def push_round(grid: Grid, strategy: Any, config: LoopConfig, rnd: int, weights: dict[str, np.ndarray], delay_s: float = 0.0) -> Sent:
    """Send the round's training messages to every region, to train ``delay_s`` from now; returns what
    :func:`collect_round` waits for."""
    record = to_record(weights)
    train_config = ConfigRecord({"prox": config.prox, "window": config.window, "seed": config.seed, "stats": int(config.pooled),
                                 "not-before": time.time() + delay_s})
    messages = list(strategy.configure_train(rnd, record, train_config, grid))
    end = time.monotonic() + delay_s + config.deadline_s
    return Sent(rnd, record.count_bytes(), len(messages), set(grid.push_messages(messages)), end, weights)


def collect_round(grid: Grid, strategy: Any, config: LoopConfig, rnd: int, sent: Sent) -> dict[str, Any]:
    """Wait up to the deadline, aggregate: the round's figures and the aggregated ``weights`` (None if nobody answered)."""
    replies = collect(grid, sent.ids, sent.end, POLL_S)
    ok = [m for m in replies if not m.has_error()]
    up = sum(r.count_bytes() for m in ok for r in m.content.array_records.values())  # before clipping rewrites them
    if ok and config.pooled:
        record, metrics = to_record(pooled(sent.weights, ok, config.prox)), mean_metrics(ok)
    else:
        record, metrics = strategy.aggregate_train(rnd, replies) if ok else (None, None)
    return {
        "round": rnd, "asked": sent.asked, "answered": len(ok), "failed": len(replies) - len(ok),
        "missing": sent.asked - len(replies),
        "examples": [int(m.content.metric_records[METRICS][EXAMPLES]) for m in ok],  # type: ignore[call-overload]
        "bytes_down": sent.bytes * sent.asked,
        "bytes_up": up,
        "train_metrics": dict(metrics) if metrics is not None else {},
        "weights": from_record(record) if record is not None else None,
    }


def pooled(weights: dict[str, np.ndarray], replies: list[Message], prox: float) -> dict[str, np.ndarray]:
    """``weights`` with the wide part fitted to every answering region's rows pooled: the sum of their normal
    equations, anchored (FedProx) at the weights the round sent."""
    stats = [from_record(m.content.array_records[STATS]) for m in replies]
    rows = sum(int(m.content.metric_records[METRICS][EXAMPLES]) for m in replies)  # type: ignore[call-overload]
    gram = np.sum([s[GRAM] for s in stats], axis=0)
    moment = np.sum([s[MOMENT] for s in stats], axis=0)
    return {**weights, learner.WIDE: learner.solve(weights[learner.WIDE], gram, moment, rows, prox)}


def mean_metrics(replies: list[Message]) -> dict[str, float]:
    """The replies' training figures, weighted by their examples (what FedAvg reports for its round)."""
    records = [m.content.metric_records[METRICS] for m in replies]
    weights = np.array([float(r[EXAMPLES]) for r in records])  # type: ignore[arg-type]
    return {k: float(np.average([float(r[k]) for r in records], weights=weights))  # type: ignore[arg-type]
            for k in records[0] if k != EXAMPLES}


def central(config: LoopConfig, types: PodTypes, held: fleetmetric.HeldOut, root: Path) -> dict[str, Any]:
    """One model trained by the same learner on every region's pooled experience (the newest ``window`` rows of
    each agent, as the regions' last round saw), ``rounds`` steps from the same cold start."""
    started = time.monotonic()
    data = learner.batch(experience.newest([Path(a.data) for a in config.fleet], config.window))
    torch.manual_seed(config.seed)
    template = {k: v.detach().numpy().copy() for k, v in PlacementScorer().state_dict().items()}
    weights = learner.cold_start(template, config.cold_start, config.seed)
    for _ in range(config.rounds):
        weights = learner.train(weights, data, config.prox)
    version = registry.publish(root / "central", to_model(weights), types, {"run": f"{config.tag}-central", "examples": len(data)})
    return {"central_metric": held.model(version), "examples": len(data), "train_s": time.monotonic() - started}
