"""Why the policy chose a node: per-feature attribution by occlusion on the runtime model (no torch needed).

For the chosen node, each feature in turn is replaced by its mean over all candidates and the
node is re-scored; the score lost is that feature's contribution to the node standing out from
the field. All replacements go through onnxruntime in one batched call, like a decision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from federated.runtime.features import NODE_FEATURES
from federated.runtime.scorer import Scorer


@dataclass(frozen=True, slots=True)
class Attribution:
    feature: str
    value: float
    field_mean: float
    score_change: float
    """Score of the chosen node minus its score with this feature set to the field mean."""


def explain(scorer: Scorer, pod_x: np.ndarray, node_x: np.ndarray, chosen: int, top: int = 8) -> list[Attribution]:
    """The ``top`` features that moved the chosen candidate's score most, largest first."""
    mean = node_x.mean(axis=0)
    probes = np.repeat(node_x[chosen : chosen + 1], len(NODE_FEATURES) + 1, axis=0)
    idx = np.arange(len(NODE_FEATURES))
    probes[idx + 1, idx] = mean
    scores = scorer(pod_x, probes.astype(np.float32))
    change = scores[0] - scores[1:]
    order = np.argsort(-np.abs(change), kind="stable")[:top]
    return [Attribution(NODE_FEATURES[i], float(node_x[chosen, i]), float(mean[i]), float(change[i])) for i in order]
