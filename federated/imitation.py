"""Cold start by imitation: fit the scorer to a heuristic teacher's scores and choices from recorded rollouts.

The loss pairs a regression on the teacher's (untruncated) score — so the framework's integer
truncation and fixed tie order behave as they do for the teacher — with a listwise
cross-entropy that makes the teacher's actual choice the top candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from federated.model import PlacementScorer
from federated.rollouts import Decisions


@dataclass(frozen=True, slots=True)
class ImitationConfig:
    epochs: int = 8
    batch: int = 256
    lr: float = 3e-3
    choice_weight: float = 0.1
    """Weight of the listwise cross-entropy on the teacher's choice beside the score regression."""
    seed: int = 0


def masked_loss(model: PlacementScorer, batch: tuple[torch.Tensor, ...], choice_weight: float) -> torch.Tensor:
    pods, nodes, target, mask = batch
    scores = model.batched(pods, nodes)
    mse = ((scores - target) ** 2 * mask).sum() / mask.sum()
    logits = scores.masked_fill(~mask, -1e9)
    choice = -torch.log_softmax(logits, dim=1)[:, 0].mean()
    return mse + choice_weight * choice


def agreement(model: PlacementScorer, data: Decisions) -> float:
    """Share of decisions where the model's top candidate has the teacher's top (truncated) score."""
    with torch.no_grad():
        scores = model.batched(torch.from_numpy(data.pods), torch.from_numpy(data.nodes)).numpy()
    scores = np.where(data.mask, scores, -np.inf)
    picked = scores.argmax(axis=1)
    best = np.floor(data.target[:, 0])
    return float((np.floor(data.target[np.arange(len(data)), picked]) == best).mean())


def train(
    data: Decisions,
    model: PlacementScorer | None = None,
    config: ImitationConfig = ImitationConfig(),
    on_epoch: Callable[[int, float], None] | None = None,
) -> PlacementScorer:
    """Fit ``model`` (a fresh seeded one by default) to the recorded teacher decisions."""
    torch.manual_seed(config.seed)
    model = model or PlacementScorer()
    tensors = [torch.from_numpy(a) for a in (data.pods, data.nodes, data.target, data.mask)]
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=config.epochs)
    generator = torch.Generator().manual_seed(config.seed)
    for epoch in range(config.epochs):
        order = torch.randperm(len(data), generator=generator)
        total = 0.0
        for start in range(0, len(data), config.batch):
            idx = order[start : start + config.batch]
            loss = masked_loss(model, tuple(t[idx] for t in tensors), config.choice_weight)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss) * idx.numel()
        schedule.step()
        if on_epoch is not None:
            on_epoch(epoch, total / len(data))
    return model
