"""The learned policy on the agent: federated's runtime scorer, hot-swapped from a models directory.

``federated.runtime`` owns the model format (a verified artifact directory: fp32 and int8
ONNX files plus a manifest with the feature spec and checksums) and the onnxruntime
session; this module only decides *when* to swap. The directory holds one artifact per
version, names sorting by version (``v0007/``). The newest one that verifies and loads
wins; one that fails is remembered (by name and manifest time) and the previous model —
or the heuristic — stays. onnxruntime is imported only when a model is present, so a
board without models runs the best-fit heuristic; a board without onnxruntime (armv7, no
wheel) takes the model's features and scores them with the FGD heuristic the model imitates,
so its claims are on the same scale as its ONNX peers' (scorer version ``heuristic-fgd``).

A ``canary`` subdirectory (:mod:`federated.runtime.canary`: one artifact and a ``weight``) puts
a candidate model on trial: it scores that share of the decisions (by pod uid, the rule the
loop's fleet metric replays) and the current model the rest; removing the directory ends it.
"""

from __future__ import annotations

import logging
import platform
import re
from pathlib import Path

import numpy as np

from fedapi.workloadcontext import WorkloadContext
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.framework import QueueSortPlugin
from federated.runtime.canary import DIRECTORY as CANARY_DIR
from federated.runtime.canary import WEIGHT as CANARY_WEIGHT
from federated.runtime.canary import takes_canary

from edgeagent.scoring import Assessment

log = logging.getLogger("edgeagent.policy")

OWN_ROW = np.array([0])
"""An agent's node table holds one row: its own node."""
NOTHING = Pod("", 0, 0)
"""A pod that takes nothing: FGD's expected fragmentation 'after' placing it is the node's as it stands."""


class LearnedScorer:
    """The int8 ONNX policy for our own node, through ``federated.runtime.scorer.PolicyRuntime``."""

    def __init__(self, runtime: object) -> None:
        from federated.runtime import experience  # noqa: F401  # its rows follow the model: loaded now, so --check compiles it
        from federated.runtime.scorer import PolicyRuntime

        assert isinstance(runtime, PolicyRuntime)
        self.runtime = runtime

    @property
    def version(self) -> str:
        return str(self.runtime.version)

    @property
    def artifact(self) -> str:
        """The artifact's directory name (the registry version, e.g. ``v000003``)."""
        return self.runtime.artifact.path.name if self.runtime.artifact is not None else ""

    canary = ""

    @property
    def queue(self) -> QueueSortPlugin:
        """The artifact's pending-queue order (the learned profile's on the twin), followed across model swaps."""
        return self.runtime.queue

    def score(self, pod: Pod, table: NodeTable) -> float:
        return self.assess(pod, table).score

    def assess(self, pod: Pod, table: NodeTable) -> Assessment:
        """Score through the model, keeping the exact float32 inputs it read (the experience row's features).

        Kept per pod shape while the node is unchanged: an agent scores every pod the fleet places
        and wins few, so most of its decisions repeat a shape on an unchanged node."""
        scores, pod_x, node_x = self.runtime.assess(pod, table, OWN_ROW)
        return Assessment(float(scores[0]), pod_x[0].copy(), np.array(node_x[0]), self.fragmentation(table))

    def devices(self, pod: Pod, table: NodeTable) -> tuple[int, ...] | None:
        """A GPU-sharing pod takes the device that keeps expected fragmentation lowest, as the learned profile
        picks on the twin (so what the agent measures after a claim is what the model's features assumed)."""
        if not pod.gpu.is_sharing:
            return None
        return (self.runtime.features.drops.best_device(pod, table, 0),)

    def fragmentation(self, table: NodeTable) -> float:
        """From the feature builder's own fragment cache (fedcore's ``Fragmentation`` would load numpy.ma: +9 MiB
        of RSS, compiled under -OO, in every agent)."""
        _, now = self.runtime.features.drops.drop(NOTHING, table, OWN_ROW)
        return float(now[0])

    def set_context(self, context: WorkloadContext) -> None:
        """The context's profile (else the artifact's shapes) with its CPU pressure: as the twin's learned profile
        for that workload scores (``PolicyRuntime(model, types=...)``)."""
        assert self.runtime.artifact is not None  # a learned scorer is built from one
        self.runtime.set_types(context.types(self.runtime.artifact.types))


class CanaryScorer:
    """The current model with a candidate on trial for the ``weight`` share of decisions (by pod uid).

    ``version`` names the model that made the last assessment, so a claim is attributed to the
    model that scored it; the device pick and fragmentation that follow come from the same model.
    """

    def __init__(self, current: LearnedScorer, candidate: LearnedScorer, weight: float) -> None:
        self.current = current
        self.candidate = candidate
        self.weight = weight
        self._last = current

    @property
    def version(self) -> str:
        return self._last.version

    @property
    def artifact(self) -> str:
        return self.current.artifact

    @property
    def canary(self) -> str:
        return self.candidate.artifact

    def _pick(self, pod: Pod) -> LearnedScorer:
        self._last = self.candidate if takes_canary(pod.uid, self.weight) else self.current
        return self._last

    def score(self, pod: Pod, table: NodeTable) -> float:
        return self._pick(pod).score(pod, table)

    def assess(self, pod: Pod, table: NodeTable) -> Assessment:
        return self._pick(pod).assess(pod, table)

    def devices(self, pod: Pod, table: NodeTable) -> tuple[int, ...] | None:
        return self._pick(pod).devices(pod, table)

    @property
    def queue(self) -> QueueSortPlugin:
        """The current model's order: the canary is on trial for scores, not for which pod is claimed first."""
        return self.current.queue

    def fragmentation(self, table: NodeTable) -> float:
        return self._last.fragmentation(table)

    def set_context(self, context: WorkloadContext) -> None:
        """Both models score for the same workload: the trial compares models, not contexts."""
        self.current.set_context(context)
        self.candidate.set_context(context)


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


SHIPPED = "shipped"
"""The name :class:`ModelWatcher` gives the package's own model (never a version directory's name: those sort first)."""


class ModelWatcher:
    """Finds the newest usable artifact; call :meth:`scan` periodically."""

    def __init__(self, directory: Path, shipped: Path | None = None) -> None:
        self.directory = directory
        self.shipped = shipped
        """The package's own artifact, loaded while ``directory`` holds no usable one (None: the heuristic then)."""
        self.current: str | None = None
        self.failures = 0
        self._scorer: LearnedScorer | None = None
        self._failed: dict[str, float] = {}
        self._trial: tuple[LearnedScorer, float] | None = None
        self._trial_state: tuple[str, float, float] | None = None

    def scan(self) -> LearnedScorer | CanaryScorer | None:
        """The scorer after a newer verified version or a canary change loaded, else None (nothing new, or it failed)."""
        changed = self._scan_versions()
        changed = self._scan_canary() or changed
        if not changed or self._scorer is None:
            return None
        return CanaryScorer(self._scorer, self._trial[0], self._trial[1]) if self._trial else self._scorer

    def _scan_canary(self) -> bool:
        """Load, replace or drop the canary; True when the scorer to use changed."""
        state = _canary_state(self.directory / CANARY_DIR)
        if state == self._trial_state:
            return False
        self._trial_state, had = state, self._trial is not None
        self._trial = None
        if state is None or self._scorer is None:
            return had
        name, weight, _ = state
        from federated.runtime.scorer import PolicyRuntime

        try:
            self._trial = (LearnedScorer(PolicyRuntime(self.directory / CANARY_DIR / name)), weight)
        except (ValueError, OSError, ImportError) as exc:
            self.failures += 1
            log.warning("canary model %s refused, keeping %s for every decision: %s", name, self.current, exc)
            return had
        log.info("canary model %s on %.0f%% of decisions", name, 100 * weight)
        return True

    def _scan_versions(self) -> bool:
        try:
            versions = sorted((d for d in self.directory.iterdir() if d.is_dir() and d.name != CANARY_DIR),
                              key=lambda d: _natural(d.name))
        except OSError:
            return False
        for candidate in reversed(versions):
            if candidate.name == self.current:
                return False
            stamp = _stamp(candidate)
            if self._failed.get(candidate.name) == stamp:
                continue
            try:
                self._load(candidate)
            except (ValueError, OSError, ImportError) as exc:  # ArtifactError is a ValueError
                self.failures += 1
                self._failed[candidate.name] = stamp
                log.warning("model %s refused, keeping %s: %s", candidate.name, self.current or "the heuristic", exc)
                continue
            self.current = candidate.name
            log.info("policy model %s loaded", self._scorer.version if self._scorer else "?")
            return True
        return self._scan_shipped()

    def _scan_shipped(self) -> bool:
        """Load the shipped model once, while nothing from ``directory`` is loaded: a board scores with the policy
        from its first decision, with no file copied onto it (a newer version in ``directory`` replaces it)."""
        if self._scorer is not None or self.shipped is None or self._failed.get(SHIPPED) == _stamp(self.shipped):
            return False
        try:
            self._load(self.shipped)
        except (ValueError, OSError, ImportError) as exc:
            self.failures += 1
            self._failed[SHIPPED] = _stamp(self.shipped)
            log.warning("the shipped model refused, scoring with the heuristic: %s", exc)
            return False
        self.current = SHIPPED
        log.info("policy model %s loaded (shipped with the package; %s holds none)", self._scorer.version if self._scorer else "?",
                 self.directory)
        return True

    def _load(self, directory: Path) -> None:
        from federated.runtime.scorer import PolicyRuntime, onnxruntime_available

        if self._scorer is None and not onnxruntime_available():
            log.warning("onnxruntime is not available on this machine (%s): heuristic scoring (FGD, the model's "
                        "teacher, on the model's scale) with the features of model %s", platform.machine(), directory.name)
        if self._scorer is None:
            self._scorer = LearnedScorer(PolicyRuntime(directory))
        else:
            self._scorer.runtime.swap(directory)  # verifies and opens first: on error the current model stays


def _canary_state(directory: Path) -> tuple[str, float, float] | None:
    """(artifact name, weight, manifest time) of a complete canary directory, else None."""
    try:
        names = [d.name for d in directory.iterdir() if d.is_dir()]
        weight = float((directory / CANARY_WEIGHT).read_text())
    except (OSError, ValueError):
        return None
    if len(names) != 1 or not 0 < weight <= 1:
        return None
    return names[0], weight, _stamp(directory / names[0])


def _stamp(directory: Path) -> float:
    try:
        return (directory / "manifest.json").stat().st_mtime
    except OSError:
        return -1.0
