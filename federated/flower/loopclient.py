"""The loop's ClientApp: a region's trainer fits the global policy to its own agents' experience.

One SuperNode per region (the regional trainer). Node config: ``agents`` (the region's agent
data directories, ``os.pathsep``-separated: the experience logs the agents write, read without
touching them) or, for a trainer on a host of its own, ``feed`` (the plane's experience feed, ``http://host:port``),
``region`` (its cluster), ``token-file`` (its credential) and for HTTPS ``ca-file`` (:mod:`federated.flower.feed`);
``partition-id`` and optionally ``fault`` (:mod:`federated.flower.faults`).
Besides the locally fitted weights a region sends its normal equations (``STATS``) when the
server aggregates them (train config ``stats``; :func:`federated.flower.learner.normal_equations`).
Train config from the server: ``prox``, ``window``, ``seed``, ``server-round`` and ``not-before`` (a UNIX
time: the first round is sent while the fleet is still gathering its first experience, and
reads it once that is over). Only weights, normal equations and a few figures leave the
region, never a row. numpy only: no torch in this process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from federated.flower import feed, learner
from federated.flower.faults import Fault
from federated.flower.records import (
    ARRAYS,
    CONFIG,
    EXAMPLES,
    GRAM,
    METRICS,
    MOMENT,
    STATS,
    from_record,
    to_record,
)
from federated.runtime import experience

app = ClientApp()


class NoExperience(ValueError):
    """The region's agents have recorded nothing trainable yet (or the node config names no agents)."""


@app.train()
def train(msg: Message, context: Context) -> Message:
    fault = Fault.parse(str(context.node_config.get("fault", "")))
    config = msg.content.config_records[CONFIG]
    time.sleep(max(0.0, float(config.get("not-before", 0.0)) - time.time()))  # type: ignore[arg-type]
    started = time.monotonic()
    rows, where = region_rows(context.node_config, int(config["window"]))  # type: ignore[arg-type]
    data = learner.batch(rows)
    if len(data) == 0:
        raise NoExperience(f"no trainable experience yet in {where}")
    fault.interrupt()
    weights = learner.train(from_record(msg.content.array_records[ARRAYS]), data, float(config["prox"]))  # type: ignore[arg-type]
    seed = int(config["seed"]) * 1000 + int(context.node_config.get("partition-id", 0)) * 100 + int(config["server-round"])  # type: ignore[arg-type]
    reply = RecordDict({ARRAYS: to_record(fault.tamper(weights, seed))})
    if config.get("stats"):
        gram, moment = learner.normal_equations(data)
        reply[STATS] = to_record(fault.tamper({GRAM: gram, MOMENT: moment}, seed + 1))
    metrics = MetricRecord({
        EXAMPLES: len(data), "train-s": time.monotonic() - started, "reward-mean": float(np.mean(data.target)),
        "models-seen": len({r.model for r in rows}),
    })
    reply[METRICS] = metrics
    return Message(reply, reply_to=msg)


def region_rows(node_config: Mapping[str, object], window: int) -> tuple[list[experience.Row], str]:
    """The newest ``window`` rows of each of the region's agents, and where they came from: pulled from the plane's
    feed (``feed``) or read from the agents' directories (``agents``)."""
    url = str(node_config.get("feed", ""))
    if url:
        region = str(node_config.get("region", ""))
        if not region:
            raise NoExperience("this SuperNode has a 'feed' but no 'region' in its node config")
        token = feed.read_token(Path(str(node_config.get("token-file", ""))))
        return feed.pull(url, region, token, window, ca_file=str(node_config.get("ca-file", ""))), f"{region} at {url}"
    agents = [Path(p) for p in str(node_config.get("agents", "")).split(os.pathsep) if p]
    if not agents:
        raise NoExperience("this SuperNode has neither 'feed' nor 'agents' in its node config: start it with "
                           "agents=<dir>[:<dir>...] or feed=<url> region=<cluster> token-file=<path>")
    return experience.newest(agents, window), ", ".join(map(str, agents))
