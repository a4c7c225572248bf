"""Aggregation maths on plain numpy weights: the reference mean, update norms and the norm bound.

Pure functions, no Flower and no torch, so the aggregation contract can be checked by hand:
the strategies module applies :func:`clip_update` to each client's reply before Flower's own
aggregation runs, and :func:`weighted_mean` is the independent reference that FedAvg's result
is compared with (``fedavg_exact``) on every round of a real federation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Weights = Mapping[str, np.ndarray]

EXACT_RTOL = 1e-6
"""FedAvg accumulates in float32; relative to the largest weight this is a few ulps."""


def weighted_mean(models: Sequence[Weights], examples: Sequence[float]) -> dict[str, np.ndarray]:
    """The example-weighted mean of ``models`` computed in float64 (FedAvg's definition)."""
    if not models or len(models) != len(examples):
        raise ValueError("need one example count per model, and at least one model")
    total = float(sum(examples))
    if total <= 0:
        raise ValueError("example counts must sum to a positive number")
    mean: dict[str, np.ndarray] = {}
    for key in models[0]:
        acc = np.zeros(np.shape(models[0][key]), dtype=np.float64)
        for model, n in zip(models, examples, strict=True):
            acc += np.asarray(model[key], dtype=np.float64) * (n / total)
        mean[key] = acc
    return mean


def update_norm(local: Weights, reference: Weights) -> float:
    """L2 norm of ``local - reference`` over all arrays (the size of a client's update)."""
    return float(np.sqrt(sum(float(np.sum((np.asarray(local[k], np.float64) - reference[k]) ** 2)) for k in reference)))


def clip_update(local: Weights, reference: Weights, bound: float) -> dict[str, np.ndarray]:
    """``local`` with its update from ``reference`` scaled down to L2 norm ``bound`` (unchanged when within it)."""
    norm = update_norm(local, reference)
    scale = 1.0 if norm <= bound or norm == 0.0 else bound / norm
    return {k: (reference[k] + (np.asarray(local[k]) - reference[k]) * scale).astype(np.asarray(local[k]).dtype) for k in reference}


def median_bound(norms: Sequence[float], factor: float) -> float:
    """A norm bound that one outlier among three or more cannot move: ``factor`` x the median update norm."""
    if not norms:
        raise ValueError("no update norms")
    return factor * float(np.median(norms))


def max_relative_error(actual: Weights, expected: Weights) -> float:
    """Largest |actual - expected| over all arrays, relative to the largest |expected| (0 for identical)."""
    scale = max(float(np.max(np.abs(expected[k]))) for k in expected) or 1.0
    return max(float(np.max(np.abs(np.asarray(actual[k], np.float64) - expected[k]))) for k in expected) / scale


def is_exact(actual: Weights, expected: Weights) -> bool:
    """True when ``actual`` equals ``expected`` up to float32 accumulation error."""
    return actual.keys() == expected.keys() and max_relative_error(actual, expected) <= EXACT_RTOL
