"""Small stand-in models for the policy tests (imports torch: import it after ``pytest.importorskip("torch")``)."""

from __future__ import annotations

import torch

from federated.model import PlacementScorer
from federated.runtime.features import NODE_FEATURES


def fgd_like_model(seed: int = 0) -> PlacementScorer:
    """FGD's score through the wide part plus a small random MLP correction (like a trained model)."""
    torch.manual_seed(seed)
    model = PlacementScorer()
    with torch.no_grad():
        model.wide.zero_()
        model.wide[0, NODE_FEATURES.index("fgd_score")] = 100.0
        model.head.weight.mul_(0.05)
    return model
