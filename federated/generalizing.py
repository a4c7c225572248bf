"""``fedplane bench generalize``: the learned policy on openb pod lists and fleets it was never trained or chosen on.

Each case is one pod list on one fleet, run with the published openb protocol (100% arrived GPU,
seeds 0..N-1) for ``learned`` and every heuristic in the same process, with the
configuration-LP bound beside them. The goal (#20 item 3) is that learned never reads below the
best heuristic of the case; per-seed figures say how often it does on single seeds.

Fleets: ``as-is`` is the node list read; ``one-and-eight`` re-cuts it into a fleet of one- and
eight-GPU nodes (:func:`one_and_eight`), a shape training never sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.twin import bounds, submission
from federated import benching, evaluating

POD_LIST_PREFIX = "openb_pod_list_"


def one_and_eight(nodes: Sequence[Node]) -> list[Node]:
    """The fleet re-cut into one- and eight-GPU nodes, same GPUs, GPU models and CPU and memory per GPU.

    Every node with one to seven GPUs becomes that many one-GPU nodes (``NAME-g0``, ``NAME-g1``, ...),
    each with the node's GPU model and an equal share of its CPU and memory (rounded down); nodes with
    eight or more GPUs and CPU-only nodes stay as they are. On the openb list: 1,213 GPU nodes (24 one-GPU, 518 two-GPU,
    54 four-GPU, 617 eight-GPU) become 1,893 (1,276 one-GPU, 617 eight-GPU), still 6,212 GPUs; 2- and
    4-GPU pods then fit only the eight-GPU nodes.
    """
    out: list[Node] = []
    for node in nodes:
        if node.gpus == 0 or node.gpus >= 8:
            out.append(node)
            continue
        out.extend(
            replace(node, name=f"{node.name}-g{k}", cpu_milli=node.cpu_milli // node.gpus, memory_mib=node.memory_mib // node.gpus, gpus=1)
            for k in range(node.gpus)
        )
    return out


FLEETS: dict[str, Callable[[Sequence[Node]], list[Node]]] = {"as-is": list, "one-and-eight": one_and_eight}


@dataclass(frozen=True, slots=True)
class Case:
    """One pod list on one fleet."""

    pod_list: str
    fleet: str
    nodes: list[Node]
    pods: list[Pod]


def list_name(path: Path) -> str:
    """``openb_pod_list_gpushare40.csv`` -> ``gpushare40`` (other files: their stem)."""
    stem = path.stem
    return stem[len(POD_LIST_PREFIX):] if stem.startswith(POD_LIST_PREFIX) and len(stem) > len(POD_LIST_PREFIX) else stem


def judge(model_dir: Path, case: Case, seeds: list[int], tick: Callable[[str], None]) -> dict[str, Any]:
    """Learned and every heuristic on ``case`` (per seed and mean), the best heuristic by mean, and the LP bound."""
    per_seed = benching.openb_figures(model_dir, case.nodes, case.pods, benching.HEURISTICS, seeds, tick)
    means = {name: evaluating.mean(values) for name, values in per_seed.items()}
    best = max(benching.HEURISTICS, key=lambda n: means[n])
    seed_best = [max(per_seed[n][k] for n in benching.HEURISTICS) for k in range(len(seeds))]
    try:
        bound: float | None = evaluating.mean([submission.upper_bound(case.pods, seed, case.nodes) for seed in seeds])
    except bounds.BoundUnavailable:
        bound = None
    tick("bound")
    return {
        "pod_list": case.pod_list,
        "fleet": case.fleet,
        "gpu_nodes": len(submission.gpu_nodes(case.nodes)),
        "gpus": sum(n.gpus for n in case.nodes),
        "learned_gpu_alloc_ratio": means["learned"],
        "best_heuristic": best,
        "best_heuristic_gpu_alloc_ratio": means[best],
        "learned_minus_best": means["learned"] - means[best],
        "seeds_learned_at_least_best": sum(a >= b for a, b in zip(per_seed["learned"], seed_best)),
        "upper_bound_gpu_alloc_ratio": bound,
        "seeds": seeds,
        "per_profile": means,
        "per_seed": per_seed,
    }


def run(model_dir: Path, cases: Sequence[Case], seeds: int, tick: Callable[[str], None]) -> dict[str, Any]:
    """Every case's figures; ``worst`` is the case where learned falls furthest under (or least over) its best heuristic."""
    bench_seeds = list(range(seeds))
    judged = [judge(model_dir, case, bench_seeds, tick) for case in cases]
    worst = min(judged, key=lambda c: c["learned_minus_best"]) if judged else None
    return {
        "model": str(model_dir),
        "protocol": "openb submission order, 100% arrived GPU, seeds 0..N-1 (never trained or validated on)",
        "cases": judged,
        "worst": {k: worst[k] for k in ("pod_list", "fleet", "learned_minus_best", "best_heuristic")} if worst else None,
        "never_below_best": all(c["learned_minus_best"] >= 0 for c in judged),
    }
