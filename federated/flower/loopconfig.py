"""The learning loop's run configuration: the loop app's config table and its validated, typed view.

The fleet (which agents exist, their region, models directory, metrics port and experience
directory) is a JSON file written by whoever started the agents (:func:`write_fleet`); the
ServerApp reads it to roll models out and to check what every agent says it runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from federated.flower.learner import COLD_STARTS
from federated.flower.runconfig import ConfigError, as_float, as_int
from federated.flower.strategies import StrategyConfig

DEFAULTS: dict[str, str | int | float] = {
    "run-tag": "loop",
    "num-rounds": 8,
    "round-deadline-s": 20.0,
    "seed": 0,
    "cold-start": "random",
    "prox": 0.000001,
    "window": 200,
    "warmup-s": 12.0,
    "strategy": "pooled",
    "clip-median-factor": 0.0,
    "trim-beta": 0.34,
    "krum-malicious": 1,
    "min-clients": 3,
    "canary": 1,
    "canary-weight": 0.2,
    "tolerance": 0.0,
    "canary-tolerance": 0.005,
    "drill-round": 0,
    "baselines": 0,
    "eval-nodes": 128,
    "eval-seeds": 4,
    "swap-timeout-s": 15.0,
    "traces": "",
    "fleet-file": "",
    "registry-dir": "",
    "report-file": "",
    "shelf-dir": "",
    "resume": 0,
}


@dataclass(frozen=True, slots=True)
class Agent:
    """One agent as the loop sees it."""

    name: str
    region: str
    models: str
    """Its models directory (the loop installs and removes versions there)."""
    data: str
    """Its data directory (its experience log)."""
    http: int
    """Its /metrics port."""
    host: str = "127.0.0.1"
    """The address its /metrics answers on, from where the rounds run (loopback: every agent on this machine)."""


def write_fleet(path: Path, agents: Sequence[Agent]) -> Path:
    path.write_text(json.dumps([asdict(a) for a in agents], indent=1) + "\n")
    return path


def read_fleet(path: Path) -> list[Agent]:
    try:
        return [Agent(**entry) for entry in json.loads(path.read_text())]
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise ConfigError(f"{path}: not a fleet file ({exc})") from None


POOLED = "pooled"
"""The loop's own aggregation rule: sum the regions' normal equations (:mod:`federated.flower.learner`)."""


def _rule(strategy: str) -> str:
    return "fedavg" if strategy == POOLED else strategy


@dataclass(frozen=True, slots=True)
class LoopConfig:
    tag: str
    rounds: int
    deadline_s: float
    seed: int
    cold_start: str
    prox: float
    """FedProx anchor of the local least-squares step (x rows)."""
    window: int
    """Newest experience rows per agent a round trains on."""
    warmup_s: float
    """Seconds the cold-start fleet places pods before round 1 (its first experience)."""
    strategy: StrategyConfig
    """Flower's rule for weights (messages go out through it; ``pooled`` aggregates under FedAvg's messaging)."""
    pooled: bool
    """Aggregate the regions' normal equations (exactly the fit on their pooled rows) instead of their weights."""
    canary: int
    """Agents that get a candidate first."""
    canary_weight: float
    """Share of the canary agents' decisions the candidate makes (by pod uid), the rest stay on the current model."""
    tolerance: float
    """Relative drop of the fleet metric a candidate may cause once everywhere and still be promoted."""
    canary_tolerance: float
    """Relative drop of the fleet metric allowed while the canary share runs the candidate: a few nodes on another
    model move the mixed fleet's metric by a few tenths of a percent either way (measured); a bad model, by percents."""
    drill_round: int
    """In this round the candidate is a deliberately bad model (the rollback drill); 0 = none."""
    baselines: bool
    """Also measure the heuristics and central training (the bench)."""
    eval_nodes: int
    eval_seeds: int
    swap_timeout_s: float
    traces: str
    fleet: list[Agent]
    registry_dir: Path
    report_file: Path
    shelf_dir: Path | None = None
    """The plane's models directory: models reach agents signed, over their link (None: copied into their directories)."""
    resume: bool = False
    """Start from the registry's last promoted version when it has one (a service's runs), not from the cold start."""

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> LoopConfig:
        values = {**DEFAULTS, **raw}
        unknown = set(raw) - set(DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown run-config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        for key in ("fleet-file", "registry-dir", "report-file"):
            if not str(values[key]):
                raise ConfigError(f"run-config {key!r} must be set")
        if str(values["cold-start"]) not in COLD_STARTS:
            raise ConfigError(f"run-config 'cold-start' must be one of {COLD_STARTS}, got {values['cold-start']!r}")
        try:
            config = cls(
                tag=str(values["run-tag"]), rounds=as_int(values, "num-rounds"), deadline_s=as_float(values, "round-deadline-s"),
                seed=as_int(values, "seed"), cold_start=str(values["cold-start"]), prox=as_float(values, "prox"),
                window=as_int(values, "window"), warmup_s=as_float(values, "warmup-s"),
                strategy=StrategyConfig(rule=_rule(str(values["strategy"])), clip_median_factor=as_float(values, "clip-median-factor"),
                                        trim_beta=as_float(values, "trim-beta"), krum_malicious=as_int(values, "krum-malicious"),
                                        min_clients=as_int(values, "min-clients")),
                pooled=str(values["strategy"]) == POOLED,
                canary=as_int(values, "canary"), canary_weight=as_float(values, "canary-weight"), tolerance=as_float(values, "tolerance"),
                canary_tolerance=as_float(values, "canary-tolerance"), drill_round=as_int(values, "drill-round"),
                baselines=bool(as_int(values, "baselines")), eval_nodes=as_int(values, "eval-nodes"),
                eval_seeds=as_int(values, "eval-seeds"), swap_timeout_s=as_float(values, "swap-timeout-s"),
                traces=str(values["traces"]), fleet=read_fleet(Path(str(values["fleet-file"]))),
                registry_dir=Path(str(values["registry-dir"])), report_file=Path(str(values["report-file"])),
                shelf_dir=Path(str(values["shelf-dir"])) if str(values["shelf-dir"]) else None,
                resume=bool(as_int(values, "resume")),
            )
        except ValueError as exc:
            raise ConfigError(f"bad run config: {exc}") from None
        if config.rounds < 1 or config.deadline_s <= 0 or config.prox <= 0 or config.eval_seeds < 1:
            raise ConfigError("num-rounds and eval-seeds must be at least 1; round-deadline-s and prox positive")
        if not 0 < config.canary_weight <= 1:
            raise ConfigError(f"canary-weight must be in (0, 1], got {config.canary_weight}")
        if not 1 <= config.canary < len(config.fleet):
            raise ConfigError(f"canary must name 1..{len(config.fleet) - 1} agents of the {len(config.fleet)} in the fleet")
        return config

    def regions(self) -> dict[str, list[Agent]]:
        out: dict[str, list[Agent]] = {}
        for agent in self.fleet:
            out.setdefault(agent.region, []).append(agent)
        return out
