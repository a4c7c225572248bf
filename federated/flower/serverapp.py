"""The ServerApp: rounds of train-aggregate-evaluate-publish over whichever regions answer in time.

Each round sends the global weights to every connected client, waits at most the round
deadline (a client that crashed or hangs is simply missing from the round), aggregates with the
configured strategy behind its norm bound, scores the new global model on the held-out twin
scenario (imitation agreement with FGD on held-out openb pods, see
:mod:`federated.flower.datasets`), publishes it to the model registry, and appends the round's
figures to the report file (JSON lines). It stops after ``num-rounds`` or once the quality
reaches ``target-quality``. The round loop is written out rather than using
``Strategy.start`` because that loop can neither stop on a target nor publish per round.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from federated import imitation
from federated.flower import aggregation, datasets, registry, strategies
from federated.flower import teacherdata
from federated.flower.records import ARRAYS, EXAMPLES, METRICS, from_record, to_record
from federated.flower.runconfig import RunConfig
from federated.model import PlacementScorer
from federated.rollouts import Decisions

log = logging.getLogger("flwr")
POLL_S = 0.5
QUALITY_METRIC = (
    "imitation agreement with FGD: share of held-out decisions (openb pods after the first 80%, seed 0) whose "
    "top-scored candidate is in FGD's best integer-score bin, candidates shuffled so ties cannot favour FGD's choice"
)
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.set_num_threads(1)
    run(grid, RunConfig.parse(dict(context.run_config)))


def initial_model(data_dir: Path, seed: int) -> PlacementScorer:
    """The starting global model, shared by federated and central training: the imitation warm start
    (closed-form linear part, MLP head at zero) fitted to the server's own twin rollouts."""
    pretrain = teacherdata.load(data_dir / datasets.PRETRAIN)
    return imitation.train(pretrain, None, imitation.ImitationConfig(epochs=0, seed=seed))


def quality(model: PlacementScorer, holdout: Decisions, seed: int = 0) -> float:
    """The policy's score on the held-out scenario: imitation agreement with the teacher's best bin.

    Candidates are shuffled first: recorded decisions list the teacher's best candidates first,
    and the model's tied top scores resolve to the first candidate, so without shuffling a
    model that scores every node alike would agree perfectly.
    """
    return imitation.agreement(model, shuffled(holdout, seed))


def score_rmse(model: PlacementScorer, holdout: Decisions) -> float:
    """Root-mean-square error against the teacher's untruncated scores over held-out candidates: a
    finer second measure, since agreement saturates once the model ranks like the teacher."""
    with torch.no_grad():
        scores = model.batched(torch.from_numpy(holdout.pods), torch.from_numpy(holdout.nodes)).numpy()
    return float(np.sqrt(np.mean((scores - holdout.target)[holdout.mask] ** 2)))


def shuffled(data: Decisions, seed: int) -> Decisions:
    """``data`` with each decision's candidates in a random (seeded) order."""
    order = np.random.default_rng(seed).random(data.mask.shape).argsort(axis=1)
    rows = np.arange(len(data))[:, None]
    fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(Decisions)}
    return Decisions(**{k: v if k == "pods" else v[rows, order] for k, v in fields.items()})


def run(grid: Grid, config: RunConfig) -> list[dict[str, Any]]:
    """Run the federation described by ``config``; returns the per-round report lines."""
    strategy = strategies.make(config.strategy)
    holdout = teacherdata.load(config.data_dir / datasets.HOLDOUT)
    types = datasets.pod_types(config.data_dir)
    model = initial_model(config.data_dir, config.seed)
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    train_config = ConfigRecord({"local-epochs": config.local_epochs, "seed": config.seed})
    config.report_file.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for rnd in range(1, config.rounds + 1):
        started = time.monotonic()
        aggregated, line = one_round(grid, strategy, config, rnd, weights, train_config)
        if aggregated is not None:
            weights = aggregated
            model.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in weights.items()})
        line["quality"] = quality(model, holdout)
        line["score_rmse"] = score_rmse(model, holdout)
        if aggregated is not None:
            training = {"run": config.tag, "round": rnd, "strategy": config.strategy.rule, "quality": line["quality"],
                        "quality_metric": QUALITY_METRIC, "clients": line["answered"], "examples": sum(line["examples"])}
            line["version"] = registry.publish(config.registry_dir, model, types, training).name
        line["wall_s"] = time.monotonic() - started
        lines.append(line)
        with config.report_file.open("a") as out:
            out.write(json.dumps(line) + "\n")
        log.info("round %d: %s", rnd, line)
        if config.target and line["quality"] >= config.target:
            break
    return lines


def send_and_collect(grid: Grid, messages: list[Message], deadline_s: float, poll_s: float = POLL_S) -> list[Message]:
    """Push ``messages`` and pull replies until all arrived or ``deadline_s`` passed (what arrived is returned).

    Grid.send_and_receive does the same but polls every 3 s, which adds up to 3 s to every round.
    """
    end = time.monotonic() + deadline_s
    return collect(grid, set(grid.push_messages(messages)), end, poll_s)


def collect(grid: Grid, pending: set[str], end: float, poll_s: float = POLL_S) -> list[Message]:
    """Pull replies to the pushed message ids ``pending`` until all arrived or the monotonic time ``end``."""
    replies: list[Message] = []
    while pending:
        got = list(grid.pull_messages(pending))
        replies.extend(got)
        pending -= {m.metadata.reply_to_message_id for m in got}
        if not pending or time.monotonic() >= end:
            break
        time.sleep(poll_s)
    return replies


def one_round(
    grid: Grid, strategy: Strategy, config: RunConfig, rnd: int, weights: dict[str, np.ndarray], train_config: ConfigRecord
) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """Send, wait up to the deadline, aggregate: the new global weights (None when nobody answered)
    and the report line saying who answered and what it cost."""
    started = time.monotonic()
    sent = to_record(weights)
    messages = list(strategy.configure_train(rnd, sent, train_config, grid))
    replies = send_and_collect(grid, messages, config.deadline_s)
    ok = [m for m in replies if not m.has_error()]
    up = [m.content.array_records[ARRAYS].count_bytes() for m in ok if ARRAYS in m.content.array_records]
    line: dict[str, Any] = {
        "round": rnd, "asked": len(messages), "answered": len(ok), "failed": len(replies) - len(ok),
        "missing": len(messages) - len(replies),
        "examples": [float(m.content.metric_records[METRICS][EXAMPLES]) for m in ok],  # type: ignore[arg-type]
        "bytes_per_client": sent.count_bytes() + (float(np.mean(up)) if up else 0.0),
    }
    record, metrics = strategy.aggregate_train(rnd, replies)
    line["train_metrics"] = dict(metrics) if metrics is not None else {}
    line["round_s"] = time.monotonic() - started
    if record is None:
        return None, line
    aggregated = from_record(record)
    if config.strategy.rule == "fedavg":
        models, counts = strategy.aggregated_inputs  # type: ignore[attr-defined]
        reference = aggregation.weighted_mean(models, counts)
        line["fedavg_rel_error"] = aggregation.max_relative_error(aggregated, reference)
        line["fedavg_exact"] = aggregation.is_exact(aggregated, reference)
    return aggregated, line
