"""``fedplane bench federated``: central vs federated vs poisoned federations on the real Deployment Engine.

Four trainings of the same model from the same initial weights with the same total epochs
(rounds x local epochs), all judged on the held-out twin scenario (imitation agreement with
FGD on held-out openb pods, :mod:`federated.flower.datasets`):

* central: one process trains on the union of every region's data;
* clean FedAvg: one SuperLink and ``clients`` SuperNodes, each on its own region;
* poisoned FedAvg and poisoned robust: the same, with one SuperNode sending poisoned weights
  (``faults``), aggregated by plain FedAvg and by the robust rule behind a median norm bound.

``quality_gap`` = (central - federated) / central; ``robust_gap`` = (federated -
poisoned robust) / federated, i.e. how far one poisoned client moves the federated policy.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.traces import locate, openb
from fedcore.twin import submission
from federated import evaluating, imitation, splits
from federated.flower import datasets, engine, registry
from federated.flower import teacherdata
from federated.flower.serverapp import (
    QUALITY_METRIC,
    initial_model,
    quality,
    score_rmse,
)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """The bench's knobs; the poisoned client is the last region (the smallest under the ``app`` split)."""

    clients: int = 3
    rounds: int = 3
    local_epochs: int = 2
    robust: str = "median"
    poison: str = "scale:-10"
    clip_median_factor: float = 1.0
    deadline_s: float = 60.0
    seed: int = 0


def central(data_dir: Path, registry_dir: Path, config: BenchConfig) -> dict[str, float]:
    """Held-out quality (and score RMSE) of the starting model and of the model trained on the union of
    the regions' data, a random pick's quality (chance) and the training time; the central model is
    published to ``registry_dir`` like a federated one."""
    holdout = teacherdata.load(data_dir / datasets.HOLDOUT)
    model = initial_model(data_dir, config.seed)
    initial, initial_rmse = quality(model, holdout), score_rmse(model, holdout)
    started = time.monotonic()
    imitation.train(datasets.union(data_dir), model, imitation.ImitationConfig(epochs=config.rounds * config.local_epochs, seed=config.seed))
    train_s = time.monotonic() - started
    central_quality = quality(model, holdout)
    registry.publish(registry_dir, model, datasets.pod_types(data_dir), {"run": "central", "quality": central_quality})
    return {
        "central": central_quality, "central_rmse": score_rmse(model, holdout), "initial": initial, "initial_rmse": initial_rmse,
        "chance": float(np.mean(holdout.top.sum(axis=1) / holdout.mask.sum(axis=1))), "train_s": train_s,
    }


def twin_alloc(data_dir: Path, models: dict[str, Path]) -> dict[str, float]:
    """GPU allocation ratio at 100% arrived load on the held-out openb scenario (held-out pods, seed 0)
    for each int8 model and for FGD itself, through the ``learned`` scheduler profile the agents use."""
    spec = datasets.read_spec(data_dir)["data"]
    traces = Path(spec["traces"])
    nodes = openb.load_nodes(traces / locate.OPENB_NODES)
    nodes = submission.gpu_nodes(nodes)[: spec["fleet"]] if spec["fleet"] else nodes
    pods = openb.load_pods(traces / locate.OPENB_PODS)
    held_out = pods[len(splits.openb_train_pods(pods)) :]
    alloc = {"fgd": evaluating.openb_alloc(nodes, held_out, datasets.TEACHER, [datasets.HOLDOUT_SEED])[0]}
    for tag, model_dir in models.items():
        with evaluating.model_override(model_dir, "int8"):
            alloc[tag] = evaluating.openb_alloc(nodes, held_out, "learned", [datasets.HOLDOUT_SEED])[0]
    return alloc


def federate(
    workdir: Path, registries: Path, data_dir: Path, config: BenchConfig, faults: dict[int, str], runs: dict[str, dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """Start an engine whose SuperNodes carry ``faults``, do each of ``runs`` (tag -> run config) on it,
    publishing to ``registries/<tag>``, and stop it."""
    reports: dict[str, list[dict[str, Any]]] = {}
    with engine.start(workdir, datasets.node_configs(data_dir, faults)) as eng:
        for tag, overrides in runs.items():
            report = workdir / f"{tag}.jsonl"
            eng.run(
                {"run-tag": tag, "num-rounds": config.rounds, "local-epochs": config.local_epochs, "seed": config.seed,
                 "min-clients": config.clients, "round-deadline-s": config.deadline_s, "data-dir": str(data_dir),
                 "registry-dir": str(registries / tag), "report-file": str(report), **overrides},
                timeout_s=config.rounds * (config.deadline_s + 60) + 120, tag=tag,
            )
            reports[tag] = [json.loads(line) for line in report.read_text().splitlines()]
    return reports


def run(workdir: Path, data_dir: Path, config: BenchConfig) -> dict[str, Any]:
    """The whole bench on prepared data; returns the JSON figures."""
    torch.set_num_threads(1)
    shutil.rmtree(workdir, ignore_errors=True)
    registries = workdir / "registry"
    baseline = central(data_dir, registries / "central", config)
    central_quality = baseline["central"]
    fedavg = {"strategy": "fedavg"}
    robust = {"strategy": config.robust, "clip-median-factor": config.clip_median_factor}
    reports = federate(workdir / "clean", registries, data_dir, config, {}, {"clean-fedavg": fedavg})
    reports |= federate(workdir / "poisoned", registries, data_dir, config, {config.clients - 1: config.poison},
                        {"poisoned-fedavg": fedavg, "poisoned-robust": robust})
    final = {tag: lines[-1]["quality"] for tag, lines in reports.items()}
    clean = reports["clean-fedavg"]
    federated_quality = final["clean-fedavg"]
    return {
        "engine": "deployment",
        "clients": config.clients,
        "rounds": config.rounds,
        "round_wall_s_mean": float(np.mean([line["wall_s"] for line in clean])),
        "bytes_per_client_round": float(np.mean([line["bytes_per_client"] for line in clean])),
        "central_quality": central_quality,
        "federated_quality": federated_quality,
        "quality_gap": (central_quality - federated_quality) / central_quality,
        "poisoned_fedavg_quality": final["poisoned-fedavg"],
        "poisoned_robust_quality": final["poisoned-robust"],
        "robust_gap": (federated_quality - final["poisoned-robust"]) / federated_quality,
        "fedavg_exact": all(line.get("fedavg_exact") is True for tag in ("clean-fedavg", "poisoned-fedavg") for line in reports[tag]),
        "quality_metric": QUALITY_METRIC,
        "detail": {
            "data": datasets.read_spec(data_dir)["data"], "local_epochs": config.local_epochs, "poison": config.poison,
            "robust": f"{config.robust} + update norm <= {config.clip_median_factor} x median", "central_train_s": baseline["train_s"],
            "initial_quality": baseline["initial"], "chance_quality": baseline["chance"],
            "score_rmse": {"initial": baseline["initial_rmse"], "central": baseline["central_rmse"],
                           **{tag: lines[-1]["score_rmse"] for tag, lines in reports.items()}},
            "gpu_alloc_int8_twin": twin_alloc(data_dir, {tag: path for tag in ("central", *reports) if (path := registry.latest(registries / tag))}),
            "examples_per_region": [len(teacherdata.load(datasets.region_file(data_dir, k))) for k in range(config.clients)],
            "fedavg_max_rel_error": max(line.get("fedavg_rel_error", 0.0) for tag in ("clean-fedavg", "poisoned-fedavg") for line in reports[tag]),
            "runs": {tag: {"quality_per_round": [line["quality"] for line in lines],
                           "round_wall_s": [round(line["wall_s"], 2) for line in lines],
                           "answered": [line["answered"] for line in lines]} for tag, lines in reports.items()},
        },
    }
