"""Cold start by imitation: fit the scorer to a heuristic teacher's scores and choices from recorded rollouts.

Pretrain, then distill: the wide (linear) part is first solved in closed form by least squares
on the teacher's scores — exact when the teacher is linear in the features, as FGD's score is —
then the whole network is trained with a regression on the teacher's untruncated score (so the
framework's integer truncation and fixed tie order behave as for the teacher) plus a listwise
cross-entropy that puts the teacher's best integer bin on top. The MLP's head starts at zero,
so it only grows where the linear part falls short — and when the linear part already
reproduces the teacher (FGD and kube-default are both linear in the features) the MLP is not
trained at all: it could only learn noise, and int8 quantization of that noise flips which
nodes tie at the framework's integer scores (measured: 12% of decisions differed int8 vs fp32).
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
    exact_rms: float = 0.01
    """Score points: a linear fit this close to the teacher leaves nothing for the MLP to learn."""
    seed: int = 0


def masked_loss(model: PlacementScorer, batch: tuple[torch.Tensor, ...], choice_weight: float) -> torch.Tensor:
    pods, nodes, target, mask, top = batch
    scores = model.batched(pods, nodes)
    mse = ((scores - target) ** 2 * mask).sum() / mask.sum()
    everything = torch.logsumexp(scores.masked_fill(~mask, -1e9), dim=1)
    best = torch.logsumexp(scores.masked_fill(~top, -1e9), dim=1)
    return mse + choice_weight * (everything - best).mean()


def solve_wide(model: PlacementScorer, data: Decisions, chunk: int = 2048) -> float:
    """Least-squares fit of the bilinear wide part to the teacher's scores (normal equations, chunked); returns the RMS residual."""
    size = model.wide.numel()
    gram = np.zeros((size, size))
    moment = np.zeros(size)
    sq, n = 0.0, 0
    for start in range(0, len(data), chunk):
        design, target = _wide_design(data, slice(start, start + chunk))
        gram += design.T @ design
        moment += design.T @ target
        sq += float(target @ target)
        n += target.size
    weights = np.linalg.solve(gram + 1e-6 * np.eye(size), moment)
    with torch.no_grad():
        model.wide.copy_(torch.from_numpy(weights.reshape(model.wide.shape)).float())
    residual = float(sq - 2 * weights @ moment + weights @ gram @ weights)
    return float(np.sqrt(max(residual, 0.0) / n))


def _wide_design(data: Decisions, part: slice) -> tuple[np.ndarray, np.ndarray]:
    """Rows [1, pod] (x) node features for the real candidates of ``part``, and their targets."""
    pods = data.pods[part]
    pods = np.concatenate([np.ones((pods.shape[0], 1), dtype=np.float32), pods], axis=1)
    mask = data.mask[part]
    design = (pods[:, None, :, None] * data.nodes[part][:, :, None, :])[mask]
    return design.reshape(design.shape[0], -1).astype(np.float64), data.target[part][mask].astype(np.float64)


def agreement(model: PlacementScorer, data: Decisions, seed: int = 0) -> float:
    """Share of decisions where the model's top candidate is in the teacher's best integer-score bin.

    Ties in the model's top bin go to a random candidate, as the scheduler's node order is unrelated
    to the recording's, which lists the teacher's best first (a constant scorer would otherwise agree).
    """
    with torch.no_grad():
        scores = model.batched(torch.from_numpy(data.pods), torch.from_numpy(data.nodes)).numpy()
    ints = np.where(data.mask, np.floor(scores), -np.inf)
    tie_break = np.random.default_rng(seed).random(ints.shape)
    picked = np.where(ints == ints.max(axis=1, keepdims=True), tie_break, -1.0).argmax(axis=1)
    return float(data.top[np.arange(len(data)), picked].mean())


def train(
    data: Decisions,
    model: PlacementScorer | None = None,
    config: ImitationConfig = ImitationConfig(),
    on_epoch: Callable[[int, float], None] | None = None,
    info: dict[str, float] | None = None,
) -> PlacementScorer:
    """Fit ``model`` (a fresh seeded one by default) to the recorded teacher decisions.

    ``info``, when given, receives the fit figures (the linear part's RMS, MLP epochs run).
    """
    torch.manual_seed(config.seed)
    info = {} if info is None else info
    if model is None:
        model = PlacementScorer()
        with torch.no_grad():
            model.head.weight.zero_()
            model.head.bias.zero_()
        info["wide_rms"] = solve_wide(model, data)
        if info["wide_rms"] <= config.exact_rms:
            info["mlp_epochs"] = 0
            return model
    tensors = [torch.from_numpy(a) for a in (data.pods, data.nodes, data.target, data.mask, data.top)]
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
            total += float(loss.detach()) * idx.numel()
        schedule.step()
        if on_epoch is not None:
            on_epoch(epoch, total / len(data))
    info["mlp_epochs"] = config.epochs
    return model
