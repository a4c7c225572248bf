"""Small statistics used by every report: percentiles and Jain's fairness index."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0-100), 0.0 for no values."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else 0.0


def jain(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one gets everything; 1.0 for no values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0 or not arr.any():
        return 1.0
    return float(arr.sum() ** 2 / (arr.size * (arr**2).sum()))
