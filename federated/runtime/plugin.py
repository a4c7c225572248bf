"""The learned policy as a scheduler score plugin and the ``learned`` profile (entry point ``fedplane.profiles``).

Hard filters still decide feasibility (``default_filters``); the model only ranks the nodes that
pass them, so it can never place a pod where the rules forbid it. Sharing pods take the device
that keeps expected fragmentation lowest, from the same cache the features use. Waiting pods are
retried in the order the artifact carries (``training.queue_search``: a score of each waiting pod
against the node that freed room), the profile's QueueSort plugin.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import profiles
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Profile, Waiting
from fedcore.scheduling.profiles import ProfileContext
from federated.runtime.lookahead import LEARNED, choose
from federated.runtime.scorer import PolicyRuntime, configured_model_dir

LOOKAHEAD_ENV = "FEDPLANE_LOOKAHEAD"

SNAP = 1e-4
"""Score points: a model output this close below an integer counts as that integer (float error of a fit)."""


def normalize(scores: np.ndarray) -> np.ndarray:
    """Kubernetes' NormalizeScore step: shift by a whole number so the best candidate scores 100.

    The framework truncates a plugin's score to an integer 0-100. A whole-number shift keeps the
    model's own integer bins (and so its ties) while bringing its top 100 points into that range:
    a model imitating kube-default's two summed plugins (0-200) keeps their resolution. Outputs are
    snapped up by :data:`SNAP` first: a teacher's score sitting exactly on an integer (FGD's 50 for
    a drop of 0 is common) comes out of a float32 model a few millionths below it, one bin lower.
    """
    if scores.size == 0:
        return scores
    snapped = scores + SNAP
    return snapped - (np.floor(snapped.max()) - 100.0)


class LearnedScore:
    """Score plugin backed by a :class:`PolicyRuntime`; also its device picker."""

    name = "Learned"

    def __init__(self, runtime: PolicyRuntime, workload: Sequence[Pod] = ()) -> None:
        self.runtime = runtime
        self.workload = workload
        self._prepared: NodeTable | None = None

    def score(self, pod: Pod, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if self._prepared is not table:  # first sight of this fleet: warm its caches for the workload's shapes
            self.runtime.prepare(table, self.workload)
            self._prepared = table
        return normalize(self.runtime.scores(pod, table, rows))

    def pick(self, pod: Pod, table: NodeTable, node: int) -> tuple[int, ...]:
        if not pod.gpu.is_sharing:
            return table.pick_gpus(pod, node)
        return (self.runtime.features.drops.best_device(pod, table, node),)


class LearnedQueue:
    """The pending-queue order the runtime's artifact carries (it follows model swaps); oldest first without one."""

    def __init__(self, runtime: PolicyRuntime) -> None:
        self.runtime = runtime

    @property
    def name(self) -> str:
        """``learned`` when the artifact carries an order, else ``oldest-first``."""
        return self.runtime.queue.name

    def priority(self, waiting: Waiting, table: NodeTable, node: int) -> np.ndarray:
        return self.runtime.queue.priority(waiting, table, node)


def make_profile(
    ctx: ProfileContext, model: str | Path | None = None, precision: str | None = None, lookahead: int | None = None,
) -> Profile:
    """The learned profile with an explicit model directory, precision and lookahead (the profile's options).

    ``model`` defaults to ``$FEDPLANE_MODEL``, else the shipped artifact; ``precision`` to
    ``$FEDPLANE_MODEL_PRECISION``, else int8. Typical pod types come from the run's workload when given (its CPU pressure from the run's fleet).
    ``lookahead`` (K, default ``$FEDPLANE_LOOKAHEAD``, else 0 = off): when the run's workload and fleet are known,
    replay them on K selection seeds and return the profile :func:`federated.runtime.lookahead.choose` keeps (learned or a heuristic).
    """
    model_dir = Path(model) if model is not None else configured_model_dir()
    precision = precision or os.environ.get("FEDPLANE_MODEL_PRECISION", "int8")
    k = lookahead_seeds() if lookahead is None else lookahead
    if k and ctx.workload and ctx.fleet:
        kept = choose(ctx.workload, ctx.fleet, k, model=model_dir, precision=precision).profile
        if kept != LEARNED:
            return profiles.make(kept, ctx)
    types = PodTypes.from_pods(ctx.workload, fleet=ctx.fleet) if ctx.workload else None
    return profile_for(PolicyRuntime(model_dir, precision, types), ctx.workload)


def lookahead_seeds() -> int:
    """``$FEDPLANE_LOOKAHEAD``: the learned profile's selection seeds K (unset or 0: no lookahead)."""
    raw = os.environ.get(LOOKAHEAD_ENV, "").strip() or "0"
    try:
        k = int(raw)
    except ValueError:
        k = -1
    if k < 0:
        raise ValueError(f"${LOOKAHEAD_ENV} must be a whole number of selection seeds >= 0 (0: off), got {raw!r}")
    return k


def profile_for(runtime: PolicyRuntime, workload: Sequence[Pod] = ()) -> Profile:
    """The learned profile around an already-built runtime: default filters, the learned score, its device pick."""
    plugin = LearnedScore(runtime, workload)
    return Profile("learned", default_filters(), [(plugin, 1.0)], devices=plugin, queue=LearnedQueue(runtime))


def learned_profile(ctx: ProfileContext) -> Profile:
    """Entry point for ``fedplane sim --profile learned`` and ``fedplane bench schedule --profiles ...,learned``."""
    return make_profile(ctx)


def framework_choice(scores: np.ndarray, rows: np.ndarray, tie_rank: np.ndarray) -> int:
    """The framework's choice for the learned plugin: highest truncated normalized score, ties to the run's fixed node order."""
    ints = np.floor(np.clip(normalize(scores), 0.0, 100.0))
    best = np.flatnonzero(ints == ints.max())
    return int(rows[best[np.argmin(tie_rank[rows[best]])]])
