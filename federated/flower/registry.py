"""The model registry: one directory per global model version, each a verified policy artifact.

Every round of a federation publishes ``<root>/v<NNNNNN>/`` holding the fp32 weights
(``state.npz``), the fp32 and int8 ONNX models and the manifest written by the policy's own
exporter (:func:`federated.exporting.export`); the manifest's ``training`` section records the run,
the round, the strategy, the round's metrics and the sha256 of ``state.npz``. A version is built
in a hidden temporary directory and renamed into place, so readers never see half a model, and
version numbers only grow. :func:`verify` checks every hash before anything is loaded.

A rollout's verdicts are the registry's history (``history.jsonl``: version, round, status —
``canary``, ``promoted``, ``rolled_back`` — and the metric behind it); :func:`promoted` is the
version the fleet should run. Versions are never deleted: a rolled-back one stays for inspection.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.scheduling.fragmentation import PodTypes
from federated import exporting
from federated.model import PlacementScorer
from federated.runtime import artifacts

STATE = "state.npz"
HISTORY = "history.jsonl"
_VERSION = re.compile(r"^v(\d{6})$")


def versions(root: Path) -> list[Path]:
    """Published versions, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _VERSION.match(p.name) and p.is_dir())


def latest(root: Path) -> Path | None:
    found = versions(root)
    return found[-1] if found else None


def publish(root: Path, model: PlacementScorer, types: PodTypes, training: dict[str, Any]) -> Path:
    """Export ``model`` as the next version under ``root``; returns its directory."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        np.savez(tmp / STATE, **{k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})
        state = {"file": STATE, "sha256": artifacts.sha256(tmp / STATE), "bytes": (tmp / STATE).stat().st_size}
        exporting.export(model, tmp, types, {**training, "state": state})
        while True:
            last = latest(root)
            target = root / f"v{(int(last.name[1:]) + 1) if last else 1:06d}"
            try:
                os.rename(tmp, target)
                return target
            except OSError:
                if not target.exists():
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record(root: Path, version: str, status: str, **figures: Any) -> None:
    """Append a rollout verdict for ``version`` to the history (one JSON line, flushed)."""
    with (root / HISTORY).open("a") as out:
        out.write(json.dumps({"version": version, "status": status, **figures}) + "\n")


def history(root: Path) -> list[dict[str, Any]]:
    path = root / HISTORY
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def promoted(root: Path) -> str | None:
    """The last version promoted to the whole fleet (None before the first)."""
    done = [entry["version"] for entry in history(root) if entry["status"] == "promoted"]
    return done[-1] if done else None


def verify(path: Path) -> artifacts.Artifact:
    """The artifact at ``path`` with its ONNX files and fp32 state checked against the manifest."""
    artifact = artifacts.load(path)
    state = artifact.manifest.get("training", {}).get("state")
    if not isinstance(state, dict) or state.get("file") != STATE:
        raise artifacts.ArtifactError(f"{path}: manifest records no {STATE} (not a registry version)")
    if not (path / STATE).is_file():
        raise artifacts.ArtifactError(f"{path}: {STATE} is missing")
    actual = artifacts.sha256(path / STATE)
    if actual != state.get("sha256"):
        raise artifacts.ArtifactError(f"{path / STATE}: sha256 {actual[:12]}... does not match the manifest (corrupt or tampered)")
    return artifact


def load_model(path: Path) -> PlacementScorer:
    """The verified fp32 model of a registry version, for further training or evaluation."""
    verify(path)
    try:
        with np.load(path / STATE, allow_pickle=False) as data:
            state = {k: torch.from_numpy(data[k]) for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise artifacts.ArtifactError(f"{path / STATE}: unreadable ({exc})") from None
    model = PlacementScorer()
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise artifacts.ArtifactError(f"{path / STATE}: does not fit the current model ({exc})") from None
    return model
