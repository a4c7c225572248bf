"""The learned queue order: weights of :mod:`fedcore.scheduling.queues`' features, chosen on DLRM training windows.

On a saturated DLRM window most lost arrivals are lost to *which* waiting pod a freed node serves,
not to where a pod goes: every placement score tried lands within 2% of the best heuristic
(docs/policy-experiments.md), while the queue order moves never-placed arrivals by a third. The
learned profile therefore also carries a queue order (Kubernetes' QueueSort extension point; an
edge agent uses it to choose which pending pod to claim next): a linear score of each waiting pod
against the node that freed room.

Its weights are chosen by episode-level coordinate search on the same five training windows as the
service terms (:func:`federated.services.training_windows`; never the held-out window), judged by
the goal's own form: the larger of never-placed arrivals and mean wait (summed / averaged over the
windows) as a ratio to the best oldest-first heuristic's on the same windows. The artifact records
the weights in ``training.queue_search.kept``; the learned profile, the bench and agents read them
from there.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedcore.nodes import Node
from fedcore.scheduling import queues
from fedcore.scheduling.queues import QUEUE_FEATURES, LinearQueue
from federated import evaluating, services
from federated.runtime import artifacts

Weights = tuple[float, ...]
START: Weights = (-1.0, -1.0, -0.5, 0.0, 0.0, 0.0, 1.0)
"""Smallest-first, a mild youngest-first and a point for a pod that uses the freed room whole: the best hand-set point
of the first exploration (docs/policy-experiments.md)."""
STEPS = (0.5, -0.5, 1.0, -1.0)
HEURISTICS = evaluating.HEURISTICS
BASELINE_RUNS = len(HEURISTICS) * len(queues.NAMED)
"""Heuristic x non-learned queue order pairs :func:`best_heuristic` replays (each on every window)."""
Windows = Sequence[tuple[Sequence[Node], evaluating.Window]]


def judge(results: Sequence[evaluating.WindowResult]) -> tuple[int, float]:
    """Never-placed arrivals over the windows and the mean of their mean waits."""
    return services.judge(results)


def best_heuristic(windows: Windows, on_run: Callable[[], None] | None = None) -> tuple[str, tuple[int, float]]:
    """The heuristic with the fewest never-placed arrivals on ``windows`` in any non-learned queue order (``NAME`` oldest
    first, as Kubernetes runs it, or ``NAME+ORDER``: queue order is part of a policy, #42), and its figures."""
    figures = {}
    for name in HEURISTICS:
        for order in queues.NAMED:
            label = name if order == "oldest-first" else f"{name}+{order}"
            figures[label] = judge([evaluating.dlrm_holdout(fleet, (), name, held=w, queue=queues.named(order)) for fleet, w in windows])
            if on_run is not None:
                on_run()
    best = min(figures, key=lambda n: figures[n])
    return best, figures[best]


def objective(figures: tuple[int, float], baseline: tuple[int, float]) -> float:
    """The goal's form: the worse of the two ratios to the baseline (lower is better)."""
    return max(figures[0] / max(1, baseline[0]), figures[1] / max(1e-9, baseline[1]))


def replay_order(model_dir: Path, windows: Windows) -> Callable[[Weights], tuple[int, float]]:
    """Judge a weight vector: the learned profile (int8, the artifact's scores) with that queue order on every window."""

    def replay(weights: Weights) -> tuple[int, float]:
        order = LinearQueue.learned(weights)
        with evaluating.model_override(model_dir, "int8"):
            return judge([evaluating.dlrm_holdout(fleet, (), "learned", held=w, queue=order) for fleet, w in windows])

    return replay


def search(
    replay: Callable[[Weights], tuple[int, float]], baseline: tuple[int, float], start: Weights = START, budget: int = 40,
    on_point: Callable[[], None] | None = None,
) -> tuple[Weights, dict[Weights, tuple[int, float]]]:
    """Coordinate search from ``start``: each weight moved by each step, a move kept when it lowers (worse ratio, sum of
    ratios), steps halved when none helps.

    Stops after ``budget`` judged points; returns the best point and every judged point.
    """
    seen: dict[Weights, tuple[int, float]] = {}

    def judged(point: Weights) -> tuple[float, float]:
        """The worse ratio, then the sum of both (a move that helps the other figure is kept, not lost on a plateau)."""
        point = tuple(round(x, 4) for x in point)
        if point not in seen:
            seen[point] = replay(point)
            if on_point is not None:
                on_point()
        figures = seen[point]
        return objective(figures, baseline), figures[0] / max(1, baseline[0]) + figures[1] / max(1e-9, baseline[1])

    best = tuple(round(x, 4) for x in start)
    score = judged(best)
    steps = STEPS
    while len(seen) < budget:
        moved = False
        for k in range(len(best)):
            for step in steps:
                if len(seen) >= budget:
                    break
                point = tuple(w + step if i == k else w for i, w in enumerate(best))
                if judged(point) < score:
                    best, score, moved = tuple(round(x, 4) for x in point), judged(point), True
        if not moved:
            steps = tuple(s / 2 for s in steps)
    return best, seen


def record(best: Weights, seen: dict[Weights, tuple[int, float]], baseline_name: str, baseline: tuple[int, float]) -> dict[str, Any]:
    """The manifest's ``training.queue_search``: what was judged, against what, and the kept weights."""
    return {
        "windows": f"the DLRM service-search training windows ({len(services.WINDOW_STARTS)}; never the held-out window)",
        "objective": "max(never placed / the best heuristic's, mean wait / its), the best heuristic by never placed in any non-learned queue order",
        "features": list(QUEUE_FEATURES),
        "baseline": {"profile": baseline_name, "never_placed": baseline[0], "wait_s_mean": baseline[1]},
        "dlrm_training_windows": [{"weights": list(w), "never_placed": n, "wait_s_mean": m} for w, (n, m) in seen.items()],
        "kept": dict(zip(QUEUE_FEATURES, best, strict=True)),
    }


def with_queue(model_dir: Path, out: Path, queue_record: dict[str, Any]) -> dict[str, Any]:
    """Copy the artifact at ``model_dir`` to ``out`` with ``training.queue_search`` set; the model files are unchanged."""
    artifact = artifacts.load(model_dir)
    LinearQueue.learned(queue_record["kept"])  # refuse a bad record before writing anything
    out.mkdir(parents=True, exist_ok=True)
    if model_dir.resolve() != out.resolve():
        for extra in model_dir.iterdir():
            if extra.is_file() and extra.name != artifacts.MANIFEST:
                shutil.copy2(extra, out / extra.name)
    training = dict(artifact.manifest.get("training", {}))
    training["queue_search"] = queue_record
    return artifacts.write_manifest(out, artifact.types, training)
