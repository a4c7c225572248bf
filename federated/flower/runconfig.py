"""The federation's run configuration: defaults shipped in the app's pyproject, overrides per ``flwr run``.

``DEFAULTS`` is the ``[tool.flwr.app.config]`` table (Flower only accepts overrides of keys it
declares); :class:`RunConfig` is the validated, typed view the ServerApp works with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from federated.flower.strategies import StrategyConfig

DEFAULTS: dict[str, str | int | float] = {
    "run-tag": "federation",
    "num-rounds": 3,
    "target-quality": 0.0,
    "round-deadline-s": 60.0,
    "local-epochs": 2,
    "seed": 0,
    "strategy": "fedavg",
    "clip-norm": 0.0,
    "clip-median-factor": 0.0,
    "trim-beta": 0.34,
    "krum-malicious": 1,
    "min-clients": 2,
    "data-dir": "",
    "registry-dir": "",
    "report-file": "",
}


class ConfigError(ValueError):
    """The run configuration is unusable: fix the named key."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    tag: str
    rounds: int
    target: float
    """Stop early once the held-out quality reaches this (0 = run all rounds)."""
    deadline_s: float
    """A round aggregates whatever replies arrived by then (partial participation)."""
    local_epochs: int
    seed: int
    strategy: StrategyConfig
    data_dir: Path
    """Holds the held-out scenario and the pod types (``datasets`` layout)."""
    registry_dir: Path
    report_file: Path

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> RunConfig:
        values = {**DEFAULTS, **raw}
        unknown = set(raw) - set(DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown run-config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        for key in ("data-dir", "registry-dir", "report-file"):
            if not str(values[key]):
                raise ConfigError(f"run-config {key!r} must be set")
        try:
            config = cls(
                tag=str(values["run-tag"]),
                rounds=as_int(values, "num-rounds"),
                target=as_float(values, "target-quality"),
                deadline_s=as_float(values, "round-deadline-s"),
                local_epochs=as_int(values, "local-epochs"),
                seed=as_int(values, "seed"),
                strategy=StrategyConfig(
                    rule=str(values["strategy"]),
                    clip_norm=as_float(values, "clip-norm"),
                    clip_median_factor=as_float(values, "clip-median-factor"),
                    trim_beta=as_float(values, "trim-beta"),
                    krum_malicious=as_int(values, "krum-malicious"),
                    min_clients=as_int(values, "min-clients"),
                ),
                data_dir=Path(str(values["data-dir"])),
                registry_dir=Path(str(values["registry-dir"])),
                report_file=Path(str(values["report-file"])),
            )
        except ValueError as exc:
            raise ConfigError(f"bad run config: {exc}") from None
        if config.rounds < 1 or config.local_epochs < 1 or config.deadline_s <= 0:
            raise ConfigError("num-rounds and local-epochs must be at least 1 and round-deadline-s positive")
        return config


def as_float(values: Mapping[str, object], key: str) -> float:
    """``values[key]`` as a number, or a :class:`ConfigError` naming the key."""
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"run-config {key!r} must be a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"run-config {key!r} must be a number, got {value!r}") from None


def as_int(values: Mapping[str, object], key: str) -> int:
    """``values[key]`` as a whole number, or a :class:`ConfigError` naming the key."""
    number = as_float(values, key)
    if number != int(number):
        raise ConfigError(f"run-config {key!r} must be a whole number, got {values[key]!r}")
    return int(number)
