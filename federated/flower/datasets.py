"""The federation's data for tests and benches: teacher rollouts on the openb trace, cut into regions.

Training decisions come from one episode of the openb protocol over the first 80% of the pod
list (seed ``splits.TRAIN_SEED_BASE``), scheduled by FGD, the best heuristic; they are split into
non-IID regions (:mod:`federated.flower.regions`) and written as experience logs, one per region.
The server's own twin rollouts (``pretrain.npz``: the same training pods, the next training
seed) give the starting global model its closed-form imitation warm start, as the design has it:
imitation on the twin first, then federated rounds on the regions' teacherdata. The held-out
twin scenario is an episode over the last 20% of the pods with benchmark seed 0: neither those
pods nor that permutation were ever trained on. Recording costs about a minute
per episode on the full fleet, so a prepared directory is reused when its spec matches.

Layout: ``spec.json``, ``region-<k>.npz`` (k = 0..clients-1), ``pretrain.npz``, ``holdout.npz``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedcore.scheduling.fragmentation import PodTypes
from fedcore.traces import locate, openb
from fedcore.twin import submission
from federated import rollouts, splits
from federated.flower import regions
from federated.flower import teacherdata
from federated.rollouts import Decisions
from federated.runtime import artifacts
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, SPEC_VERSION

SPEC = "spec.json"
HOLDOUT = "holdout.npz"
PRETRAIN = "pretrain.npz"
TEACHER = "fgd"
HOLDOUT_SEED = 0
LAYOUT = 2
"""Bumped whenever what ``prepare`` writes changes, so older prepared directories are rebuilt (as are
directories recorded under another feature spec)."""


@dataclass(frozen=True, slots=True)
class DataSpec:
    """What a prepared directory holds; two specs that compare equal produce the same files."""

    clients: int
    split: str = "app"
    fleet: int = 0
    """Use the first ``fleet`` GPU nodes of the trace (0 = the whole fleet); tests use a small fleet to record fast."""
    traces: str = ""


def region_file(root: Path, k: int) -> Path:
    return root / f"region-{k}.npz"


def prepare(root: Path, spec: DataSpec) -> Path:
    """Record, split and write the data described by ``spec`` into ``root`` unless it is already there."""
    if spec.split not in regions.SPLITS:
        raise ValueError(f"split must be one of {regions.SPLITS}, got {spec.split!r}")
    if spec.clients < 1:
        raise ValueError("need at least one client")
    traces = locate.traces_dir(spec.traces or None)
    wanted = {**asdict(spec), "traces": str(traces), "layout": LAYOUT, "feature_spec": SPEC_VERSION,
              "features": [*POD_FEATURES, *NODE_FEATURES]}
    if (root / SPEC).is_file() and json.loads((root / SPEC).read_text()).get("data") == wanted:
        return root
    nodes = openb.load_nodes(traces / locate.OPENB_NODES)
    nodes = submission.gpu_nodes(nodes)[: spec.fleet] if spec.fleet else nodes
    pods = openb.load_pods(traces / locate.OPENB_PODS)
    train_pods = splits.openb_train_pods(pods)
    region_seed, server_seed = splits.train_seeds(2)
    train = rollouts.openb_episode(nodes, train_pods, region_seed, TEACHER)
    pretrain = rollouts.openb_episode(nodes, train_pods, server_seed, TEACHER)
    holdout = rollouts.openb_episode(nodes, pods[len(train_pods):], HOLDOUT_SEED, TEACHER)
    root.mkdir(parents=True, exist_ok=True)
    for k, part in enumerate(regions.split(train, spec.split, spec.clients)):
        teacherdata.save(region_file(root, k), part)
    teacherdata.save(root / HOLDOUT, holdout)
    teacherdata.save(root / PRETRAIN, pretrain)
    meta = {"data": wanted, "pod_types": artifacts.types_to_json(PodTypes.from_pods(train_pods)),
            "held_out": f"openb pods after the first {splits.TRAIN_FRACTION:.0%} (file order), seed {HOLDOUT_SEED}, teacher {TEACHER}"}
    (root / SPEC).write_text(json.dumps(meta, indent=2) + "\n")
    return root


def read_spec(root: Path) -> dict[str, Any]:
    try:
        spec: dict[str, Any] = json.loads((root / SPEC).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise teacherdata.ExperienceError(f"{root}: not a prepared federation data directory ({exc})") from None
    return spec


def prepared(root: Path, clients: int) -> Path:
    """``root`` if it holds data prepared for ``clients`` regions, else a clear error."""
    have = int(read_spec(root)["data"]["clients"])
    if have != clients:
        raise teacherdata.ExperienceError(f"{root}: prepared for {have} regions, not {clients}")
    return root


def pod_types(root: Path) -> PodTypes:
    return artifacts.types_from_json(read_spec(root)["pod_types"])


def union(root: Path) -> Decisions:
    """Every region's decisions together: what central training sees."""
    clients = int(read_spec(root)["data"]["clients"])
    return Decisions.concat([teacherdata.load(region_file(root, k)) for k in range(clients)])


def node_configs(root: Path, faults: Mapping[int, str] | None = None) -> list[dict[str, str | int | float]]:
    """One SuperNode's node config per region: its partition id, its experience log and its fault, if any."""
    clients = int(read_spec(root)["data"]["clients"])
    faults = faults or {}
    return [
        {"partition-id": k, "data-path": str(region_file(root, k)), **({"fault": faults[k]} if k in faults else {})}
        for k in range(clients)
    ]
