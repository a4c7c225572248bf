"""The message contract between ServerApp and ClientApp, and numpy <-> Flower record conversion.

A train request carries the global weights under ``ARRAYS`` and the train config under
``CONFIG``; a reply carries the trained weights under ``ARRAYS`` and a MetricRecord under
``METRICS`` whose ``EXAMPLES`` entry is the weight FedAvg gives it. The learning loop's
regions also send their normal equations under ``STATS`` (``GRAM``, ``MOMENT``) for pooled
aggregation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
EXAMPLES = "num-examples"
STATS = "stats"
GRAM = "gram"
MOMENT = "moment"


def to_record(weights: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Named numpy arrays as an ArrayRecord (names kept, so it loads back as a torch state dict)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in weights.items()})


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}
