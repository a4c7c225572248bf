"""The runtime scorer used by edge agents and the control plane: onnxruntime + numpy, never torch.

One batched onnxruntime call scores every candidate node of a pod (candidates are the batch
dimension), on one intra-op thread. When no model is configured, or onnxruntime cannot be
imported (armv7 has no wheel), the heuristic fallback scores with FGD's fragmentation drop,
computed from the very same features and on the model's scale (FGD is the model's teacher), so
placement keeps working and scores from either stay comparable.

Hot swap: :meth:`PolicyRuntime.swap` verifies and opens the new artifact completely before
replacing the current model, so a corrupt or mismatched file leaves the caller's model in place.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import OldestFirst, QueueSortPlugin
from federated.runtime import artifacts
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, FeatureBuilder
from federated.runtime.shapescores import ShapeScores

HEURISTIC = "heuristic-fgd"
FGD_SCORE = NODE_FEATURES.index("fgd_score")
GPU_DEVICES = NODE_FEATURES.index("gpu_devices")
GPU_UTIL = NODE_FEATURES.index("gpu_util")
WHOLE_AFTER = NODE_FEATURES.index("whole_gpus_after")
SHARING = POD_FEATURES.index("gpu_sharing")
PINNED = POD_FEATURES.index("workload_pinned")
CPU_BOUND = POD_FEATURES.index("workload_cpu_bound")
CPU_FREE_AFTER = NODE_FEATURES.index("cpu_free_after")


class Scorer(Protocol):
    """Scores candidate feature rows; ``version`` names the model (or the heuristic) for logs and gossip."""

    version: str

    def __call__(self, pod_x: np.ndarray, node_x: np.ndarray) -> np.ndarray: ...


class HeuristicScorer:
    """FGD's score from the feature rows: the fallback when there is no model or no onnxruntime.

    On a model's scale when given its artifact: training ends by dividing the imitated scores by a
    temperature (GPU-sharing pods' by their own) and adding small-node, idle-node and whole-GPU
    preferences, the first two withdrawn by ``pinned_release`` in a workload that pins GPU models,
    and ``cpu_pack`` points for packing CPU in a CPU-bound workload (``reshape_search`` in the manifest),
    and the fallback applies the same numbers, so its claims compare with its ONNX peers'.
    """

    version = HEURISTIC

    def __init__(
        self, temperature: float = 1.0, small_first: float = 0.0, idle_first: float = 0.0,
        sharing_temperature: float | None = None, whole_first: float = 0.0, pinned_release: float = 0.0, cpu_pack: float = 0.0,
    ) -> None:
        self.temperature = temperature
        self.small_first = small_first
        self.idle_first = idle_first
        self.sharing_temperature = temperature if sharing_temperature is None else sharing_temperature
        self.whole_first = whole_first
        self.pinned_release = pinned_release
        self.cpu_pack = cpu_pack

    @classmethod
    def on_scale_of(cls, artifact: artifacts.Artifact) -> HeuristicScorer:
        kept = artifact.manifest.get("training", {}).get("reshape_search", {}).get("kept", {})
        temperature = float(kept.get("temperature", 1.0))
        return cls(
            temperature, float(kept.get("small_first", 0.0)), float(kept.get("idle_first", 0.0)),
            float(kept.get("sharing_temperature", temperature)), float(kept.get("whole_first", 0.0)),
            float(kept.get("pinned_release", 0.0)), float(kept.get("cpu_pack", 0.0)),
        )

    def __call__(self, pod_x: np.ndarray, node_x: np.ndarray) -> np.ndarray:
        temperature = self.sharing_temperature if pod_x[0, SHARING] else self.temperature
        steer = 1.0 - self.pinned_release * float(pod_x[0, PINNED])  # how much of the node-kind preferences a pinned workload keeps
        fgd = 100.0 * node_x[:, FGD_SCORE].astype(np.float64) / temperature
        fgd += self.small_first * (1.0 - steer * node_x[:, GPU_DEVICES].astype(np.float64))
        fgd += self.whole_first * node_x[:, WHOLE_AFTER].astype(np.float64)
        pack = self.cpu_pack * float(pod_x[0, CPU_BOUND])
        if pack:
            fgd -= pack * node_x[:, CPU_FREE_AFTER].astype(np.float64)
        return fgd + self.idle_first * (1.0 - steer * node_x[:, GPU_UTIL].astype(np.float64))


def onnxruntime_available() -> bool:
    """False on armv7 (no wheel) or wherever onnxruntime does not import."""
    if platform.machine().lower().startswith("armv7"):
        return False
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxScorer:
    """One onnxruntime session over an artifact's model file, single-threaded."""

    def __init__(self, model: Path, version: str) -> None:
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # The int8 file stores weights only (DequantizeLinear on initializers): fold them to fp32 once at
        # load instead of dequantizing on every call (measured 58 -> 53 us on 1,523 candidates).
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        try:
            self.session: Any = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors for unreadable models
            raise artifacts.ArtifactError(f"{model}: onnxruntime cannot load it ({exc})") from exc
        self.version = version
        self._outputs = [output.name for output in self.session.get_outputs()]  # named once, not looked up per run

    def __call__(self, pod_x: np.ndarray, node_x: np.ndarray) -> np.ndarray:
        # The model reads features feature-major: the builder's rows are a transposed view of exactly that buffer.
        (scores,) = self.session.run(self._outputs, {"pod": pod_x, "nodes": np.ascontiguousarray(node_x.T)})
        return np.asarray(scores, dtype=np.float64)


def default_model_dir() -> Path:
    """The artifact shipped with the package (``federated/models/default``)."""
    return Path(__file__).resolve().parents[1] / "models" / "default"


def configured_model_dir() -> Path | None:
    """``$FEDPLANE_MODEL`` if set ("none" disables the model), else the shipped default when present."""
    env = os.environ.get("FEDPLANE_MODEL")
    if env is not None:
        return None if env.strip().lower() in ("", "none") else Path(env)
    default = default_model_dir()
    return default if (default / artifacts.MANIFEST).is_file() else None


class PolicyRuntime:
    """What a scheduler holds: the feature builder and the current scorer (ONNX model or heuristic).

    ``types`` (the workload's typical pod shapes) define the fragmentation feature; when None they
    come from the artifact's manifest (an edge agent does not see the whole workload).
    """

    def __init__(self, model_dir: Path | None = None, precision: str = "int8", types: PodTypes | None = None) -> None:
        self.precision = precision
        self.artifact: artifacts.Artifact | None = None
        self.scorer: Scorer = HeuristicScorer()
        self._queue: QueueSortPlugin = OldestFirst()
        self._types = types
        self._kept = ShapeScores()
        self._assessed = ShapeScores(len(NODE_FEATURES))
        if model_dir is not None:
            self.swap(model_dir)
        if types is None and self.artifact is None:
            raise ValueError("without a model artifact the runtime needs the workload's pod types")
        self.features = FeatureBuilder(types if types is not None else self.artifact.types)

    @property
    def version(self) -> str:
        return self.scorer.version

    @property
    def queue(self) -> QueueSortPlugin:
        """The pending-queue order of the loaded artifact (oldest first without an artifact or without a recorded order)."""
        return self._queue

    def swap(self, model_dir: str | Path) -> str:
        """Verify and load a new artifact, then switch to it; on any error the current model stays. Returns the new version.

        Without onnxruntime (armv7) the artifact still defines the features (its pod types) and the
        heuristic scores them: the model imitates that heuristic (FGD, its teacher), so both score on
        one scale and a mixed fleet's claims stay comparable (the heuristic takes the artifact's temperature and
        small-node preference; on openb-like pods the int8 model's scores match it within 0.01)."""
        artifact = artifacts.load(model_dir)
        if not onnxruntime_available():
            self.artifact, self.scorer, self._queue = artifact, HeuristicScorer.on_scale_of(artifact), artifact.queue
            self._kept.clear()
            self._assessed.clear()
            return self.scorer.version
        scorer = OnnxScorer(artifact.model_file(self.precision), f"{artifact.version}-{self.precision}")
        self.artifact, self.scorer, self._queue = artifact, scorer, artifact.queue
        self._kept.clear()
        self._assessed.clear()
        return scorer.version

    def set_types(self, types: PodTypes) -> None:
        """Score for another workload profile from now on (``PodTypes``: typical shapes, slots, pinned share, CPU
        pressure; an edge agent learns its cluster's from the control plane, the artifact's manifest knowing only its
        training pods). Cheap: the model stays; the feature caches follow the new shapes (a one-row agent table
        rebuilds in microseconds) and the scores kept per pod shape go, as they read the old profile."""
        self.features.set_types(types)
        self._kept.clear()
        self._assessed.clear()

    def prepare(self, table: NodeTable, pods: Sequence[Pod]) -> None:
        """Warm the per-fleet caches for the workload's GPU request shapes, so first decisions are not slow."""
        self.features.drops.prepare(table, pods)

    def inputs(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's two inputs for ``pod`` over ``rows`` (advances the load-trend state: once per decision)."""
        return self.features.pod(pod), self.features(pod, table, rows)

    def scores(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Scores for ``pod`` on each of ``rows``.

        On the teacher's scale (0-100 per plugin it summed: up to 200 for kube-default), not
        clipped to one plugin's 0-100, so scores stay comparable across agents at the top. Kept
        per pod shape (:mod:`federated.runtime.shapescores`): only rows changed since the shape was
        last scored go through features and model, with bit-identical results.
        """
        epoch = self.features.follow(table)  # once per decision, as inputs() would: the load trend sees every step
        return self._kept.scores(pod, table, rows, self._score, epoch, epoch)[0]

    def assess(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scores for ``pod`` on ``rows`` with the model's inputs that gave them: ``(scores, pod_x, node_x)``.

        An edge agent's call (its one row): kept per pod shape like :meth:`scores`, inputs included,
        so a pod shape its node has not changed since costs a lookup, not features and inference.
        """
        epoch = self.features.follow(table)
        scores, pod_x, node_x = self._assessed.scores(pod, table, rows, self._score, epoch)
        assert pod_x is not None and node_x is not None  # kept: this cache keeps inputs
        return scores, pod_x, node_x

    def _score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pod_x, node_x = self.inputs(pod, table, rows)
        return pod_x, node_x, self.scorer(pod_x, node_x)
