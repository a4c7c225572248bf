"""Aggregation on hand-made weights: FedAvg is the example-weighted mean; norm bounds and robust rules hold."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.message.message import make_message

from federated.flower import aggregation, strategies
from federated.flower.records import ARRAYS, EXAMPLES, METRICS, from_record, to_record

GLOBAL = {"w": np.zeros((2, 2), np.float32), "b": np.zeros(3, np.float32)}
CLIENTS = [
    ({"w": np.array([[1, 2], [3, 4]], np.float32), "b": np.array([1, 0, -1], np.float32)}, 10),
    ({"w": np.array([[2, 2], [2, 2]], np.float32), "b": np.array([0, 3, 0], np.float32)}, 30),
    ({"w": np.array([[0, -1], [5, 1]], np.float32), "b": np.array([2, 2, 2], np.float32)}, 60),
]


def reply(weights: dict[str, np.ndarray], examples: int) -> Message:
    content = RecordDict({ARRAYS: to_record(weights), METRICS: MetricRecord({EXAMPLES: examples})})
    metadata = Metadata(run_id=1, message_id="", src_node_id=examples, dst_node_id=0, reply_to_message_id="m",
                        group_id="", created_at=0.0, ttl=60.0, message_type=MessageType.TRAIN)
    return make_message(metadata=metadata, content=content)


def aggregate(config: strategies.StrategyConfig, clients: list[tuple[dict[str, np.ndarray], int]]) -> dict[str, np.ndarray]:
    strategy = strategies.make(config)
    strategy.reference = dict(GLOBAL)  # type: ignore[attr-defined]  # what configure_train would have recorded
    arrays, _ = strategy.aggregate_train(1, [reply(w, n) for w, n in clients])
    assert isinstance(arrays, ArrayRecord)
    return from_record(arrays)


def test_weighted_mean_by_hand() -> None:
    mean = aggregation.weighted_mean([{"a": np.array([1.0, 2.0])}, {"a": np.array([3.0, 4.0])}], [1, 3])
    assert mean["a"].tolist() == [2.5, 3.5]


def test_flower_fedavg_equals_the_example_weighted_mean() -> None:
    got = aggregate(strategies.StrategyConfig("fedavg"), CLIENTS)
    expected = {
        "w": (10 * CLIENTS[0][0]["w"] + 30 * CLIENTS[1][0]["w"] + 60 * CLIENTS[2][0]["w"]) / 100.0,
        "b": (10 * CLIENTS[0][0]["b"] + 30 * CLIENTS[1][0]["b"] + 60 * CLIENTS[2][0]["b"]) / 100.0,
    }
    assert aggregation.is_exact(got, expected)
    np.testing.assert_allclose(got["w"], [[0.7, 0.2], [3.9, 1.6]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rule", ["median", "trimmed", "krum"])
def test_robust_rules_ignore_one_scaled_client(rule: str) -> None:
    honest = [({k: v + 0.01 * i for k, v in CLIENTS[1][0].items()}, 30) for i in range(3)]
    poisoned = ({k: v * -100.0 for k, v in CLIENTS[1][0].items()}, 30)
    got = aggregate(strategies.StrategyConfig(rule, trim_beta=0.25, krum_malicious=1), [*honest, poisoned])
    for key, value in CLIENTS[1][0].items():
        np.testing.assert_allclose(got[key], value, atol=0.05)


def test_median_norm_bound_caps_the_outlier_and_keeps_the_rest() -> None:
    config = strategies.StrategyConfig("fedavg", clip_median_factor=1.0)
    big = ({k: v * 1000.0 for k, v in CLIENTS[0][0].items()}, 10)
    strategy = strategies.make(config)
    strategy.reference = dict(GLOBAL)  # type: ignore[attr-defined]
    strategy.aggregate_train(1, [reply(w, n) for w, n in [big, *CLIENTS[1:]]])
    models, counts = strategy.aggregated_inputs  # type: ignore[attr-defined]
    norms = [aggregation.update_norm(m, GLOBAL) for m in models]
    honest = sorted(aggregation.update_norm(w, GLOBAL) for w, _ in CLIENTS[1:])
    assert norms[0] == pytest.approx(float(np.median([aggregation.update_norm(big[0], GLOBAL), *honest])), rel=1e-5)
    assert norms[1:] == pytest.approx([aggregation.update_norm(w, GLOBAL) for w, _ in CLIENTS[1:]], rel=1e-6)
    assert counts == [10, 30, 60]


@pytest.mark.parametrize(("scale", "bound"), [(1.0, 100.0), (10.0, 2.0), (0.0, 1.0)])
def test_clip_update_bounds_the_norm(scale: float, bound: float) -> None:
    local = {k: v * scale for k, v in CLIENTS[0][0].items()}
    clipped = aggregation.clip_update(local, GLOBAL, bound)
    norm = aggregation.update_norm(local, GLOBAL)
    assert aggregation.update_norm(clipped, GLOBAL) == pytest.approx(min(norm, bound), rel=1e-6)


def test_median_bound_ignores_one_outlier() -> None:
    assert aggregation.median_bound([1.0, 2.0, 1e9], 1.5) == 3.0
    with pytest.raises(ValueError):
        aggregation.median_bound([], 1.0)


@pytest.mark.parametrize("bad", [{"rule": "fedprox"}, {"clip_norm": -1.0}, {"min_clients": 0}])
def test_bad_strategy_config_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        strategies.StrategyConfig(**bad)  # type: ignore[arg-type]


def test_weighted_mean_refuses_bad_counts() -> None:
    with pytest.raises(ValueError):
        aggregation.weighted_mean([GLOBAL], [0])
    with pytest.raises(ValueError):
        aggregation.weighted_mean([GLOBAL, GLOBAL], [1])
