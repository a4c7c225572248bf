"""The ClientApp: one region trains the global policy on its own experience and sends back weights only.

Node config (set on the SuperNode): ``data-path`` (an experience log, file or directory),
``partition-id`` (seeds the client's shuffling) and optionally ``fault`` (see
:mod:`federated.flower.faults`). Train config (sent by the server each round): ``local-epochs``,
``seed``, ``server-round``. The reply carries the trained weights and ``num-examples``, the
training loss and time; the experience itself never leaves the node.
"""

from __future__ import annotations

import time

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from federated import imitation
from federated.flower import teacherdata
from federated.flower.faults import Fault
from federated.flower.records import ARRAYS, CONFIG, EXAMPLES, METRICS, to_record
from federated.model import PlacementScorer

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local imitation epochs from the received global weights."""
    torch.set_num_threads(1)
    fault = Fault.parse(str(context.node_config.get("fault", "")))
    if "data-path" not in context.node_config:
        raise teacherdata.ExperienceError("this SuperNode has no data-path in its node config: start it with data-path=<experience log>")
    data = teacherdata.load(str(context.node_config["data-path"]))
    config = msg.content.config_records[CONFIG]
    partition = int(context.node_config.get("partition-id", 0))
    seed = int(config["seed"]) * 1000 + partition * 100 + int(config["server-round"])  # type: ignore[arg-type]
    model = PlacementScorer()
    model.load_state_dict(msg.content.array_records[ARRAYS].to_torch_state_dict())
    fault.interrupt()
    losses: list[float] = []
    started = time.monotonic()
    imitation.train(
        data, model, imitation.ImitationConfig(epochs=int(config["local-epochs"]), seed=seed),  # type: ignore[arg-type]
        on_epoch=lambda _, loss: losses.append(loss),
    )
    weights = fault.tamper({k: v.detach().numpy() for k, v in model.state_dict().items()}, seed)
    metrics = MetricRecord({EXAMPLES: len(data), "train-loss": losses[-1], "train-s": time.monotonic() - started})
    reply = RecordDict({ARRAYS: to_record(weights), METRICS: metrics})
    return Message(reply, reply_to=msg)
