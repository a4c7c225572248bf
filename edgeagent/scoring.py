"""How an agent scores its own node for a pod: the feature vector, the scorer seam and the heuristic.

Every scorer reads the same features (:data:`FEATURE_SPEC`), so a learned ONNX policy
and the heuristic fallback are interchangeable behind :class:`Scorer`. The heuristic is
best fit (fuller after placement is better, busy nodes a little worse); the same
function, vectorised, lets an agent estimate its peers' scores from their gossiped
node states and hold back when it is clearly not among the best candidates.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedcore.resources import Resources

FEATURE_SPEC = "edge-v1"
"""Name of the feature layout below; a model's manifest must name it or the model is refused."""
FEATURES = ("cpu_req", "mem_req", "gpu_req", "cpu_free", "mem_free", "gpu_free", "load", "wants_gpu")
LOAD_PENALTY = 10.0


class Scorer(Protocol):
    """Scores one node for one pod from its features; higher is better, finite."""

    version: str

    def score(self, features: np.ndarray) -> float: ...


def features(request: Resources, free: Resources, capacity: Resources, load: float) -> np.ndarray:
    """The :data:`FEATURE_SPEC` vector: request and free share of capacity per dimension, load, GPU need."""
    req = np.array([request.cpu_milli, request.memory_mib, request.gpu_milli], dtype=np.float32)
    fre = np.array([free.cpu_milli, free.memory_mib, free.gpu_milli], dtype=np.float32)
    cap = np.maximum(np.array([capacity.cpu_milli, capacity.memory_mib, capacity.gpu_milli], dtype=np.float32), 1.0)
    wants = 1.0 if request.gpu_milli else 0.0
    return np.concatenate([req / cap, fre / cap, np.array([load, wants], dtype=np.float32)]).astype(np.float32)


def estimate(request: Resources, free: np.ndarray, capacity: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Heuristic scores of many nodes at once (rows of free/capacity as (cpu, mem, disk, gpu)); -inf where it does not fit."""
    req = np.array(request.as_tuple(), dtype=np.float64)
    after = free - req
    fits = (after >= 0).all(axis=1)
    dims = [0, 1, 3] if request.gpu_milli else [0, 1]
    cap = np.maximum(capacity[:, dims], 1.0)
    fullness = 1.0 - (after[:, dims] / cap).mean(axis=1)
    scores = 100.0 * fullness - LOAD_PENALTY * load
    if not request.gpu_milli:  # keep GPU nodes for GPU pods
        scores -= 20.0 * (capacity[:, 3] > 0)
    return np.where(fits, scores, -np.inf)


class HeuristicScorer:
    """Best fit on the features: the fallback when no policy model loads (and on armv7, always)."""

    version = "heuristic"

    def score(self, features: np.ndarray) -> float:
        f = features.astype(np.float64)
        gpu = f[7] > 0
        used = [1.0 - (f[3] - f[0]), 1.0 - (f[4] - f[1])]
        if gpu:
            used.append(1.0 - (f[5] - f[2]))
        value = 100.0 * float(np.mean(used)) - LOAD_PENALTY * float(f[6])
        if not gpu and f[5] > 0:
            value -= 20.0
        return value
