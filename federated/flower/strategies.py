"""Flower strategies for the placement policy: FedAvg or a robust rule, behind a norm bound on client updates.

The aggregation rules are Flower's own (FedAvg, FedTrimmedAvg, FedMedian, Krum); this module only
adds :class:`Guarded`, a mixin that runs before them: it remembers the global weights it sent,
scales each client's update down to a norm bound (absolute, or a multiple of the round's median
update norm, which one outlier among three cannot move), and keeps the weights and example
counts that were actually aggregated so the round loop can check FedAvg against the reference
mean of :mod:`federated.flower.aggregation`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, FedMedian, FedTrimmedAvg, Krum, Strategy

from federated.flower import aggregation
from federated.flower.records import ARRAYS, EXAMPLES, METRICS, from_record, to_record

RULES: dict[str, type[FedAvg]] = {"fedavg": FedAvg, "trimmed": FedTrimmedAvg, "median": FedMedian, "krum": Krum}


@dataclass(frozen=True, slots=True)
class StrategyConfig:
    """How the server aggregates: the rule, its parameters, the norm bound and who must take part."""

    rule: str = "fedavg"
    clip_norm: float = 0.0
    """Absolute L2 bound on each client's update (0 = none)."""
    clip_median_factor: float = 0.0
    """Bound each update to this multiple of the round's median update norm (0 = none)."""
    trim_beta: float = 0.34
    """Fraction cut at each end by ``trimmed``; it must be at least 1/clients to cut anything."""
    krum_malicious: int = 1
    min_clients: int = 2
    """Clients that must be connected before a round starts, and the fewest a round samples."""

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"strategy must be one of {sorted(RULES)}, got {self.rule!r}")
        if self.clip_norm < 0 or self.clip_median_factor < 0:
            raise ValueError("clip bounds must be non-negative (0 disables them)")
        if self.min_clients < 1:
            raise ValueError("min_clients must be at least 1")


class Guarded:
    """Mixin placed before a Flower strategy class: norm-bounds client updates and records the inputs."""

    guard: StrategyConfig
    reference: dict[str, np.ndarray]
    aggregated_inputs: tuple[list[dict[str, np.ndarray]], list[float]]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self.reference = from_record(arrays)
        return super().configure_train(server_round, arrays, config, grid)  # type: ignore[misc,no-any-return]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        valid = [m for m in replies if not m.has_error() and ARRAYS in m.content.array_records]
        models = [from_record(m.content.array_records[ARRAYS]) for m in valid]
        examples = [float(m.content.metric_records[METRICS][EXAMPLES]) for m in valid]  # type: ignore[arg-type]
        bounds = self._bounds(models)
        if bounds:
            bound = min(bounds)
            models = [aggregation.clip_update(w, self.reference, bound) for w in models]
            for message, weights in zip(valid, models, strict=True):
                message.content[ARRAYS] = to_record(weights)
        self.aggregated_inputs = (models, examples)
        return super().aggregate_train(server_round, replies)  # type: ignore[misc,no-any-return]

    def _bounds(self, models: list[dict[str, np.ndarray]]) -> list[float]:
        bounds = [self.guard.clip_norm] if self.guard.clip_norm > 0 else []
        if self.guard.clip_median_factor > 0 and models:
            norms = [aggregation.update_norm(w, self.reference) for w in models]
            bounds.append(aggregation.median_bound(norms, self.guard.clip_median_factor))
        return bounds


def make(config: StrategyConfig) -> Strategy:
    """A guarded Flower strategy for ``config``; every connected client is asked each round."""
    base = RULES[config.rule]
    kwargs: dict[str, Any] = {
        "fraction_train": 1.0,
        "fraction_evaluate": 0.0,
        "min_train_nodes": config.min_clients,
        "min_available_nodes": config.min_clients,
    }
    if config.rule == "trimmed":
        kwargs["beta"] = config.trim_beta
    if config.rule == "krum":
        kwargs["num_malicious_nodes"] = config.krum_malicious
    cls = type(f"Guarded{base.__name__}", (Guarded, base), {})
    strategy = cls(**kwargs)
    strategy.guard = config
    return strategy  # type: ignore[no-any-return]
