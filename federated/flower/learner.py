"""What the learning loop learns from the agents' experience, and how a region trains locally: numpy only.

Reward: the fragmentation the placement caused on the node. Each experience row records the
node's expected GPU fragmentation (FGD's measure, milli-GPU) before and after the claim; the
target is ``100 * sigmoid((before - after) / 1000)``, so a placement that leaves the node less
fragmented scores above 50 and the target has the 0-100 scale every model version shares
(claims from agents on different versions stay comparable). On the twin an agent's node
changes only through its own claims, so what it measured is what its placement did.

Local training: one proximal least-squares step on the policy's linear (wide, bilinear in pod
and node features) part: ``min |X w - y|^2 + lam * n * |w - w_global|^2``, in closed form,
FedProx's anchor keeping a region from overwriting what only other regions' traffic shows (a
region that only ever sees GPU-sharing pods cannot tell what the weights of whole-GPU pods
should be). ``lam`` is small by default (1e-6): what a region's rows do identify is fitted
almost exactly, because the fleet metric is that sensitive — measured on pooled experience, a
fit with 0.02 score points RMS left 0.7 points of GPU allocation on the table, 0.0003 none.
Pooled aggregation: a region also sends its normal equations (``X^T X``, ``X^T y``); summed
over the regions they give exactly the fit on every region's rows pooled — central training
on the regions' data without the rows leaving them — where FedAvg of the regions' own fits
shrinks what only one region's traffic shows by that region's share (measured on a bench
run's experience, five windows: pooled 0.9238-0.9308 GPU allocation, FedAvg 0.9063-0.9231).
The MLP part is left as received (the cold start holds its head at zero: an MLP trained
from a few hundred rows only adds noise, and int8 rounding of noise flips integer score ties).
Pure numpy, so a ClientApp process needs neither torch nor a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from federated.rollouts import Decisions
from federated.runtime.experience import Row
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

WIDE = "wide"
HEAD = ("head.weight", "head.bias")
TRAINED = ("bound", "lost", "refused")
"""Outcomes whose fragmentation figures describe the claim itself (an eviction row repeats a bound one)."""
COLD_STARTS = ("random", "bestfit")


def targets(rows: Sequence[Row]) -> np.ndarray:
    """The reward of each row on the shared 0-100 score scale (float32)."""
    drop = np.array([r.frag_before - r.frag_after for r in rows], dtype=np.float64)
    return (100.0 / (1.0 + np.exp(-drop / 1000.0))).astype(np.float32)


def batch(rows: Sequence[Row]) -> Decisions:
    """The trainer's batch: one candidate per row (the agent's own node), its inputs exactly as scored."""
    kept = [r for r in rows if r.outcome in TRAINED]
    n = len(kept)
    pods = np.stack([r.pod_x for r in kept]) if n else np.zeros((0, len(POD_FEATURES)), np.float32)
    nodes = np.stack([r.node_x for r in kept])[:, None, :] if n else np.zeros((0, 1, len(NODE_FEATURES)), np.float32)
    ones = np.ones((n, 1), dtype=bool)
    return Decisions(pods, nodes, targets(kept)[:, None], ones, ones.copy())


def design(data: Decisions) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[1, pod] (x) node`` of the wide part's bilinear form for real candidates, and their targets."""
    pods = np.concatenate([np.ones((len(data), 1), dtype=np.float64), data.pods], axis=1)
    x = (pods[:, None, :, None] * data.nodes[:, :, None, :])[data.mask]
    return x.reshape(x.shape[0], -1), data.target[data.mask].astype(np.float64)


def normal_equations(data: Decisions) -> tuple[np.ndarray, np.ndarray]:
    """``(X^T X, X^T y)`` of ``data``'s design (float64): what a least-squares fit needs of the rows, and what
    sums across regions to the fit on their pooled rows."""
    x, y = design(data)
    return x.T @ x, x.T @ y


def solve(wide: np.ndarray, gram: np.ndarray, moment: np.ndarray, rows: int, prox: float) -> np.ndarray:
    """The wide weights minimising ``|X w - y|^2 + prox * rows * |w - wide|^2`` given the normal equations."""
    if rows == 0:
        return wide.astype(np.float32)
    lam = prox * rows
    anchor = wide.astype(np.float64).ravel()
    solved = np.linalg.solve(gram + lam * np.eye(gram.shape[0]), moment + lam * anchor)
    return solved.reshape(wide.shape).astype(np.float32)


def local_fit(wide: np.ndarray, data: Decisions, prox: float) -> np.ndarray:
    """The wide weights after one proximal least-squares step on ``data`` from ``wide`` (returned as float32)."""
    return solve(wide, *normal_equations(data), int(data.mask.sum()), prox)


def train(weights: Mapping[str, np.ndarray], data: Decisions, prox: float) -> dict[str, np.ndarray]:
    """``weights`` with the wide part fitted locally; every other array as received."""
    out = {k: np.asarray(v) for k, v in weights.items()}
    out[WIDE] = local_fit(out[WIDE], data, prox)
    return out


def cold_start(weights: Mapping[str, np.ndarray], kind: str, seed: int) -> dict[str, np.ndarray]:
    """A starting point that leaves room to learn: ``random`` (wide part N(0, 1)) or ``bestfit`` (the wide
    part scores the BestFit feature only, a weaker heuristic than FGD); the MLP head at zero either way."""
    if kind not in COLD_STARTS:
        raise ValueError(f"cold start must be one of {COLD_STARTS}, got {kind!r}")
    out = {k: np.array(v, copy=True) for k, v in weights.items()}
    for key in HEAD:
        out[key] = np.zeros_like(out[key])
    wide = np.zeros_like(out[WIDE])
    if kind == "random":
        wide = np.random.default_rng(seed).normal(0.0, 1.0, wide.shape).astype(wide.dtype)
    else:
        wide[0, NODE_FEATURES.index("bestfit")] = 100.0
    out[WIDE] = wide
    return out


def describe_cold_start(kind: str, seed: int) -> str:
    if kind == "random":
        return f"random: the linear part's weights drawn N(0, 1) (seed {seed}), MLP head zero; no heuristic copied"
    return "bestfit prior: the linear part scores BestFit's feature (a weaker heuristic than FGD), MLP head zero"
