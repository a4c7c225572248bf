"""``fedplane bench generalize``: the learned policy on openb pod lists and fleets it was never trained or chosen on.

Each case is one pod list on one fleet, run with the published openb protocol (100% arrived GPU,
seeds 0..N-1) for ``learned`` and every heuristic in the same process, with the
configuration-LP bound beside them. The goal (#20 item 3) is that learned never reads below the
best heuristic of the case; per-seed figures say how often it does on single seeds.

Fleets: ``as-is`` is the node list read; ``one-and-eight`` re-cuts it into a fleet of one- and
eight-GPU nodes (:func:`one_and_eight`), a shape training never sees.

With a lookahead K, ``learned+lookahead`` reads beside them: the learned profile with its lookahead
option (``make_profile(ctx, lookahead=K)``, the path a run takes), which first replays the case's list on
its fleet on selection seeds 5000.. (never the bench seeds) and runs whichever candidate it keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.twin import bounds, submission
from federated import evaluating
from federated.runtime import lookahead, plugin
from fedplane.lab.benches import policybench

LOOKAHEAD = "learned+lookahead"
"""The label of the learned profile with its lookahead option on (a comparison column, not a profile name)."""



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


def judge(model_dir: Path, case: Case, seeds: list[int], tick: Callable[[str], None], k: int = 0) -> dict[str, Any]:
    """Learned and every heuristic on ``case`` (per seed and mean), the best heuristic by mean, and the LP bound;
    with ``k`` > 0 also learned with a K-seed lookahead (:func:`lookahead_figures`)."""
    per_seed = policybench.openb_figures(model_dir, case.nodes, case.pods, policybench.HEURISTICS, seeds, tick)
    means = {name: evaluating.mean(values) for name, values in per_seed.items()}
    best = max(policybench.HEURISTICS, key=lambda n: means[n])
    seed_best = [max(per_seed[n][i] for n in policybench.HEURISTICS) for i in range(len(seeds))]
    try:
        bound: float | None = evaluating.mean([submission.upper_bound(case.pods, seed, case.nodes) for seed in seeds])
    except bounds.BoundUnavailable:
        bound = None
    tick("bound")
    out = {
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
    if k:
        out[LOOKAHEAD] = lookahead_figures(model_dir, case, seeds, k, means[best], seed_best, tick)
    return out


def lookahead_figures(
    model_dir: Path, case: Case, seeds: list[int], k: int, best: float, seed_best: list[float], tick: Callable[[str], None],
) -> dict[str, Any]:
    """The learned profile with ``lookahead=k`` on the bench seeds, and the choice it made (one selection per case:
    :func:`lookahead.choose` remembers it across the seeds, as every seed replays the same list on the same fleet)."""
    with evaluating.model_override(model_dir, "int8"):
        choice = lookahead.choose(case.pods, submission.gpu_nodes(case.nodes), k, model=model_dir)
        tick("selection")
        per_seed = []
        for seed in seeds:
            per_seed.append(submission.run(case.nodes, case.pods, lambda ctx: plugin.make_profile(ctx, lookahead=k), seed).gpu_alloc_ratio)
            tick("openb")
    mean = evaluating.mean(per_seed)
    return {
        "selection_seeds": list(choice.seeds),
        "chosen": choice.profile,
        "selection_means": choice.means,
        "selection_wall_s": choice.wall_s,
        "gpu_alloc_ratio": mean,
        "minus_best": mean - best,
        "per_seed": per_seed,
        "seeds_at_least_best": sum(a >= b for a, b in zip(per_seed, seed_best)),
    }


def below_best(judged: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Per column (learned, learned+lookahead when run, every heuristic): the cases whose mean is below the case's best heuristic."""
    counts = {name: sum(c["per_profile"][name] < c["best_heuristic_gpu_alloc_ratio"] for c in judged) for name in ("learned", *policybench.HEURISTICS)}
    if judged and LOOKAHEAD in judged[0]:
        counts[LOOKAHEAD] = sum(c[LOOKAHEAD]["minus_best"] < 0 for c in judged)
    return counts


def run(model_dir: Path, cases: Sequence[Case], seeds: int, tick: Callable[[str], None], k: int = 0) -> dict[str, Any]:
    """Every case's figures; ``worst`` is the case where learned falls furthest under (or least over) its best heuristic
    (``worst_with_lookahead`` the same for learned+lookahead when ``k`` > 0)."""
    bench_seeds = list(range(seeds))
    judged = [judge(model_dir, case, bench_seeds, tick, k) for case in cases]
    worst = min(judged, key=lambda c: c["learned_minus_best"]) if judged else None
    out = {
        "model": str(model_dir),
        "protocol": "openb submission order, 100% arrived GPU, seeds 0..N-1 (never trained or validated on)",
        "cases": judged,
        "worst": {key: worst[key] for key in ("pod_list", "fleet", "learned_minus_best", "best_heuristic")} if worst else None,
        "never_below_best": all(c["learned_minus_best"] >= 0 for c in judged),
        "cases_below_best_heuristic": below_best(judged),
    }
    if k:
        low = min(judged, key=lambda c: c[LOOKAHEAD]["minus_best"]) if judged else None
        out["lookahead"] = {
            "label": f"{LOOKAHEAD}: learned with lookahead K={k}, margin 0, candidates {', '.join(lookahead.CANDIDATES)}, selection seeds {lookahead.SELECTION_SEED}..{lookahead.SELECTION_SEED + k - 1}",
            "k": k,
            "margin": 0.0,
            "candidates": list(lookahead.CANDIDATES),
            "selection_seed": lookahead.SELECTION_SEED,
            "never_below_best": all(c[LOOKAHEAD]["minus_best"] >= 0 for c in judged),
            "worst": {"pod_list": low["pod_list"], "fleet": low["fleet"], "minus_best": low[LOOKAHEAD]["minus_best"], "chosen": low[LOOKAHEAD]["chosen"]} if low else None,
            "selection_wall_s_total": sum(c[LOOKAHEAD]["selection_wall_s"] for c in judged),
        }
    return out
