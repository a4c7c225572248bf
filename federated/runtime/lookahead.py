"""Workload-level lookahead: replay the run's own pod list on its own fleet in the twin, then keep the best profile.

Before a run the scheduler knows its pod list and its fleet. :func:`choose` replays that list on
that fleet under each candidate profile with the openb protocol (``fedcore.twin.submission``:
pods sampled from the list up to 100% arrived GPU) on ``k`` selection seeds
(:data:`SELECTION_SEED` onward, never the bench seeds 0-9 nor the validation seeds 4000-4003),
and keeps ``learned`` unless a heuristic's selection mean beats learned's by more than
``margin``. It is a guard that falls back to a heuristic where one wins on this workload
(measured in ``docs/policy-experiments.md``), not a better learned policy. Candidates leave
kube-default out: with it, cpu300 on the as-is fleet gave up learned's lead for a tie and nothing else moved.

The learned rollouts build the profile with lookahead off, so selection never recurses.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.scheduling import profiles
from fedcore.twin import submission
from federated.runtime.scorer import configured_model_dir

CANDIDATES: tuple[str, ...] = ("learned", "fgd", "bestfit")
"""Profile names as the twin knows them; learned is the default kept."""

SELECTION_SEED = 5000
"""First selection seed: clear of the bench seeds (0-9) and the validation seeds (4000-4003)."""

LEARNED = "learned"


@dataclass(frozen=True, slots=True)
class Choice:
    """The kept profile and what it was chosen on."""

    profile: str
    means: dict[str, float]
    """Selection-mean GPU allocation (100% arrived) per candidate."""
    seeds: tuple[int, ...]
    wall_s: float
    """Twin time the selection took (all candidates, all seeds)."""


def keep(means: Mapping[str, float], margin: float = 0.0) -> str:
    """``learned`` unless another candidate's mean beats it by more than ``margin``; then the best of those.

    Ties among the others go to the first in ``means``' order; without learned among them, the best candidate.
    """
    if not means:
        raise ValueError("no candidates to keep from")
    best = max(means, key=means.__getitem__)  # max keeps the first of equal means
    if LEARNED not in means or best == LEARNED:
        return best
    return best if means[best] > means[LEARNED] + margin else LEARNED


def choose(
    workload: Sequence[Pod],
    fleet: Sequence[Node],
    k: int = 4,
    margin: float = 0.0,
    candidates: Sequence[str] = CANDIDATES,
    model: Path | None = None,
    *,
    precision: str | None = None,
) -> Choice:
    """Replay ``workload`` on ``fleet`` under every candidate on ``k`` selection seeds and keep one (see :func:`keep`).

    ``model`` is the learned artifact directory (default: ``$FEDPLANE_MODEL``, else the shipped one); learned
    runs at ``precision`` (default ``$FEDPLANE_MODEL_PRECISION``, else int8). Deterministic for given inputs; a repeat call with equal
    inputs returns the earlier choice (a bench runs one workload on several seeds).
    """
    check(workload, fleet, k, margin, candidates)
    model_dir = Path(model) if model is not None else configured_model_dir()
    precision = precision or os.environ.get("FEDPLANE_MODEL_PRECISION", "int8")
    key = (fingerprint(workload, fleet), k, float(margin), tuple(candidates), model_dir, precision)
    if key not in _chosen:
        if len(_chosen) >= REMEMBERED:
            del _chosen[next(iter(_chosen))]
        _chosen[key] = select(workload, fleet, k, margin, tuple(candidates), model_dir, precision)
    return _chosen[key]


REMEMBERED = 4
"""Choices kept for repeat calls (a bench runs each workload on several seeds; the artifact is keyed by its path)."""
_chosen: dict[Hashable, Choice] = {}


def fingerprint(workload: Sequence[Pod], fleet: Sequence[Node]) -> Hashable:
    """Equal for equal inputs, node selectors and labels included (pod and node equality leaves them out)."""
    return (
        tuple((p, tuple(sorted(p.node_selector.items()))) for p in workload),
        tuple((n, tuple(sorted(n.labels.items()))) for n in fleet),
    )


def check(workload: Sequence[Pod], fleet: Sequence[Node], k: int, margin: float, candidates: Sequence[str]) -> None:
    """ValueError naming the bad input (before any rollout)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"lookahead needs k >= 1 selection seeds, got {k!r}")
    if not math.isfinite(margin) or margin < 0:
        raise ValueError(f"lookahead margin must be a finite number >= 0, got {margin!r}")
    if not workload:
        raise ValueError("lookahead needs the run's workload: the pod list is empty")
    if not any(p.gpu.total_milli for p in workload):
        raise ValueError("lookahead replays the openb protocol (pods drawn until the fleet's GPU is requested): no pod of the workload requests a GPU")
    if not submission.gpu_nodes(fleet):
        raise ValueError("lookahead needs the run's fleet: it has no node with a GPU" if fleet else "lookahead needs the run's fleet: the node list is empty")
    if not candidates or len(set(candidates)) != len(candidates):
        raise ValueError(f"lookahead needs distinct candidate profiles, got {list(candidates)}")
    unknown = [name for name in candidates if name != LEARNED and name not in profiles.available()]
    if unknown:
        raise ValueError(f"unknown lookahead candidate(s) {unknown}; choose from: {', '.join(profiles.available())}")


def select(
    workload: Sequence[Pod], fleet: Sequence[Node], k: int, margin: float, candidates: Sequence[str], model: Path | None, precision: str,
) -> Choice:
    """The rollouts behind :func:`choose` (unchecked, not remembered)."""
    from federated.runtime import plugin  # the learned profile itself calls choose(): imported here, not at load

    def learned(ctx: profiles.ProfileContext) -> profiles.Profile:
        return plugin.make_profile(ctx, model=model, precision=precision, lookahead=0)

    seeds = tuple(range(SELECTION_SEED, SELECTION_SEED + k))
    start = time.perf_counter()
    means = {
        name: sum(submission.run(fleet, workload, learned if name == LEARNED else name, seed).gpu_alloc_ratio for seed in seeds) / k
        for name in candidates
    }
    return Choice(keep(means, margin), means, seeds, time.perf_counter() - start)
