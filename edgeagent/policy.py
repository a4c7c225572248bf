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
"""

from __future__ import annotations

import logging
import platform
import re
from pathlib import Path

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod

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

    def score(self, pod: Pod, table: NodeTable) -> float:
        return self.assess(pod, table).score

    def assess(self, pod: Pod, table: NodeTable) -> Assessment:
        """Score through the model, keeping the exact float32 inputs it read (the experience row's features)."""
        pod_x, node_x = self.runtime.inputs(pod, table, OWN_ROW)
        score = float(self.runtime.scorer(pod_x, node_x)[0])
        return Assessment(score, pod_x[0].copy(), np.array(node_x[0]), self.fragmentation(table))

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


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class ModelWatcher:
    """Finds the newest usable artifact; call :meth:`scan` periodically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.current: str | None = None
        self.failures = 0
        self._scorer: LearnedScorer | None = None
        self._failed: dict[str, float] = {}

    def scan(self) -> LearnedScorer | None:
        """The scorer after a newer verified version loaded, else None (nothing new, or it failed)."""
        try:
            versions = sorted((d for d in self.directory.iterdir() if d.is_dir()), key=lambda d: _natural(d.name))
        except OSError:
            return None
        for candidate in reversed(versions):
            if candidate.name == self.current:
                return None
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
            return self._scorer
        return None

    def _load(self, directory: Path) -> None:
        from federated.runtime.scorer import PolicyRuntime, onnxruntime_available

        if self._scorer is None and not onnxruntime_available():
            log.warning("onnxruntime is not available on this machine (%s): heuristic scoring (FGD, the model's "
                        "teacher, on the model's scale) with the features of model %s", platform.machine(), directory.name)
        if self._scorer is None:
            self._scorer = LearnedScorer(PolicyRuntime(directory))
        else:
            self._scorer.runtime.swap(directory)  # verifies and opens first: on error the current model stays


def _stamp(directory: Path) -> float:
    try:
        return (directory / "manifest.json").stat().st_mtime
    except OSError:
        return -1.0
