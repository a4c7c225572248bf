"""Policy artifacts on disk: a directory with the fp32 and int8 ONNX files and a manifest that vouches for them.

``manifest.json`` records the feature-spec version the model was trained on, the sha256 and
size of each file, the typical pod types its fragmentation feature assumes, and how it was
trained (data, held-out parts, metrics, wall time). :func:`load` verifies all of it before
anything is handed to onnxruntime, so a truncated download or a model trained on another
feature spec is refused with a clear error instead of scoring nonsense.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import OldestFirst, QueueSortPlugin
from fedcore.scheduling.queues import LinearQueue
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, SPEC_VERSION

FORMAT = "fedplane-policy/2"
"""2: the model reads ``nodes`` feature-major (F, N)."""
MANIFEST = "manifest.json"
FP32 = "model.fp32.onnx"
INT8 = "model.int8.onnx"
PRECISIONS = {"fp32": FP32, "int8": INT8}


class ArtifactError(ValueError):
    """The artifact cannot be used as it is (corrupt, incomplete, or for another feature spec): replace it."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """A verified artifact: where it is, its manifest, and the pod types its features assume."""

    path: Path
    manifest: dict[str, Any]
    types: PodTypes

    @property
    def version(self) -> str:
        """Short identity of the model: the first 12 hex digits of the int8 file's sha256."""
        return str(self.manifest["files"][INT8]["sha256"][:12])

    @property
    def queue(self) -> QueueSortPlugin:
        """The pending-queue order the artifact was chosen with (``training.queue_search.kept``); oldest first without one."""
        return queue_order(self.manifest)

    def model_file(self, precision: str) -> Path:
        if precision not in PRECISIONS:
            raise ArtifactError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        return self.path / PRECISIONS[precision]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def types_to_json(types: PodTypes) -> dict[str, Any]:
    return {
        "cpu": types.cpu.tolist(), "milli": types.milli.tolist(), "count": types.count.tolist(), "weight": types.weight.tolist(),
        "slots": types.slots.tolist(), "pinned": types.pinned, "cpu_pressure": types.cpu_pressure,
    }


def types_from_json(data: dict[str, Any]) -> PodTypes:
    ints = {k: np.asarray(data[k], dtype=np.int64) for k in ("cpu", "milli", "count")}
    slots = np.asarray(data["slots"], dtype=np.int64).reshape(-1, 2)
    pinned = float(data.get("pinned", 0.0))
    if not 0.0 <= pinned <= 1.0:
        raise ValueError(f"pinned must be a share in [0, 1], got {pinned!r}")
    pressure = float(data.get("cpu_pressure", 0.0))
    if not 0.0 <= pressure < math.inf:
        raise ValueError(f"cpu_pressure must be a finite ratio >= 0, got {pressure!r}")
    return PodTypes(ints["cpu"], ints["milli"], ints["count"], np.asarray(data["weight"], dtype=np.float64), slots, pinned, pressure)


def queue_order(manifest: dict[str, Any]) -> QueueSortPlugin:
    """The queue order a manifest records: ``training.queue_search.kept`` ({feature: weight}), else oldest first."""
    kept = manifest.get("training", {}).get("queue_search", {}).get("kept")
    if kept is None:
        return OldestFirst()
    if not isinstance(kept, dict) or not all(isinstance(v, (int, float)) for v in kept.values()):
        raise ArtifactError(f"manifest training.queue_search.kept must map queue features to numbers, got {kept!r}")
    try:
        return LinearQueue.learned(kept)
    except ValueError as exc:
        raise ArtifactError(f"manifest training.queue_search.kept: {exc}") from None


def write_manifest(path: Path, types: PodTypes, training: dict[str, Any]) -> dict[str, Any]:
    """Hash the model files in ``path`` and write the manifest beside them."""
    files = {name: {"sha256": sha256(path / name), "bytes": (path / name).stat().st_size} for name in (FP32, INT8)}
    manifest = {
        "format": FORMAT,
        "feature_spec": SPEC_VERSION,
        "pod_features": list(POD_FEATURES),
        "node_features": list(NODE_FEATURES),
        "files": files,
        "pod_types": types_to_json(types),
        "training": training,
    }
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def load(path: str | Path) -> Artifact:
    """Read and verify an artifact directory; raises :class:`ArtifactError` saying what is wrong."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no {MANIFEST} (not a policy artifact directory)") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path / MANIFEST}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path / MANIFEST}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: artifact format {manifest.get('format')!r}, this runtime reads {FORMAT!r}")
    spec = manifest.get("feature_spec")
    if spec != SPEC_VERSION or manifest.get("node_features") != list(NODE_FEATURES) or manifest.get("pod_features") != list(POD_FEATURES):
        raise ArtifactError(f"{path}: model was trained on feature spec {spec!r}, this runtime computes {SPEC_VERSION!r}; retrain or upgrade")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ArtifactError(f"{path / MANIFEST}: 'files' must map file names to their sha256")
    for name in (FP32, INT8):
        entry = files.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not (path / name).is_file():
            raise ArtifactError(f"{path}: {name} is missing (or has no sha256 in the manifest)")
        actual = sha256(path / name)
        if actual != entry["sha256"]:
            raise ArtifactError(f"{path / name}: sha256 {actual[:12]}... does not match the manifest's {entry['sha256'][:12]}... (corrupt or tampered)")
    try:
        types = types_from_json(manifest["pod_types"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: manifest pod_types unreadable ({exc})") from None
    if not isinstance(manifest.get("training", {}), dict) or not isinstance(manifest.get("training", {}).get("queue_search", {}), dict):
        raise ArtifactError(f"{path / MANIFEST}: 'training' and its 'queue_search' must be JSON objects")
    queue_order(manifest)  # refuse an unreadable queue order now, not at the first departure
    return Artifact(path, manifest, types)
