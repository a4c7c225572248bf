"""``fedplane bench policy``: the learned policy beside the heuristics, all figures from one run.

* openb: every built-in heuristic and ``learned`` on the same bench seeds (0..N-1, never trained
  on), the published protocol at 100% arrived GPU; the best heuristic is picked in this run, and
  the configuration-LP bound on what any policy could reach reads beside them. ``openb_cpu050``:
  learned against FGD on the CPU-heavy list (a workload mix training never saw).
* dlrm_holdout: ``learned``, ``kube-default`` and every heuristic replaying the held-out DLRM
  window from one start (the running pods placed first-fit decreasing for every profile; the ones
  that placement leaves out wait from 0), judged on never-placed feasible arrivals and the mean wait of all feasible arrivals
  (never-placed ones wait until they leave or the window ends), statically infeasible arrivals
  apart, and the pooled-fleet (fluid) replay beside them (``fluid_bound_*`` keys: the section's
  objects are the profiles alone). Queue order is part of a policy (#42): each heuristic runs in
  Kubernetes' order (oldest first, under its own name) and in every other non-learned order
  (``NAME+ORDER``), and ``best_heuristic`` is the best of all of them; learned runs its artifact's
  order. ``dlrm_holdout_queue_variants`` holds what is not a heuristic: the best heuristic's scores
  with the learned order, and the learned scores with each non-learned order (what the learned
  order and the learned scores each add). Never-placed arrivals per large shape
  (``never_placed_by_shape``) show whether an order starves big pods.
* size and fidelity: file sizes from the artifact; int8-vs-fp32 agreement = share of decisions,
  along an fp32-driven openb episode, where both precisions choose the same node after the
  framework's integer truncation and tie order.
* decision time: features + inference over all 1,523 openb nodes (CPU-only nodes included),
  single-threaded, against BestFit's score over the same rows on the same states, interleaved
  pod by pod so machine load hits both alike; ``*_cpu_us_*`` keys give the same calls' thread CPU
  time (preemptions excluded) beside the wall-clock goals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import queues
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Scheduler
from fedcore.scheduling.scores import BestFit
from fedcore.stats import percentile
from fedcore.twin import bounds, submission
from federated import evaluating
from federated.evaluating import Traces
from federated.runtime import artifacts, plugin
from federated.runtime.scorer import PolicyRuntime

HEURISTICS = evaluating.HEURISTICS


def agreement(model_dir: Path, traces: Traces, seed: int, pods: int) -> tuple[float, int]:
    """Share of ``pods`` decisions (fp32 policy driving the openb protocol) where int8 picks the same node."""
    types = PodTypes.from_pods(traces.pods)
    fp32 = PolicyRuntime(model_dir, "fp32", types)
    int8 = PolicyRuntime(model_dir, "int8", types)
    table = NodeTable(submission.gpu_nodes(traces.nodes))
    scheduler = Scheduler(plugin.profile_for(fp32, traces.pods), table, seed)
    same = total = 0
    for pod in submission.workload(traces.pods, seed, int(table.gpu_count.sum()) * 1000)[:pods]:
        rows = np.flatnonzero(scheduler.feasible(pod))
        if rows.size == 0:
            continue
        pod_x, node_x = fp32.inputs(pod, table, rows)
        a = plugin.framework_choice(fp32.scorer(pod_x, node_x), rows, scheduler.tie_rank)
        b = plugin.framework_choice(int8.scorer(pod_x, node_x), rows, scheduler.tie_rank)
        same += a == b
        total += 1
        table.allocate(pod, a, scheduler.profile.devices.pick(pod, table, a))
    return same / max(total, 1), total


def decision_times(model_dir: Path, traces: Traces, seed: int, pods: int) -> dict[str, float]:
    """Per-decision microseconds over all nodes of the openb list: learned (features + inference) vs BestFit.

    The int8 runtime (what agents ship) makes the placements; fp32 and BestFit are timed on the
    same states, all three interleaved pod by pod. Wall clock (the goals), and thread CPU time beside it.
    """
    types = PodTypes.from_pods(traces.pods)
    runtimes = {"int8": PolicyRuntime(model_dir, "int8", types), "fp32": PolicyRuntime(model_dir, "fp32", types)}
    table = NodeTable(traces.nodes)
    rows = np.arange(len(table))
    for runtime in runtimes.values():
        runtime.prepare(table, traces.pods)  # what the learned profile does on first sight of a fleet
    scheduler = Scheduler(plugin.profile_for(runtimes["int8"]), table, seed)
    bestfit = BestFit()
    micros: dict[str, list[float]] = {"int8": [], "fp32": [], "bestfit": []}
    cpu: dict[str, list[float]] = {"int8": [], "fp32": [], "bestfit": []}
    scored: dict[str, np.ndarray] = {}
    for pod in submission.workload(traces.pods, seed, int(table.gpu_count.sum()) * 1000)[:pods]:
        for name, runtime in runtimes.items():
            c0 = time.thread_time_ns()
            t0 = time.perf_counter()
            scored[name] = runtime.scores(pod, table, rows)
            int(np.argmax(scored[name]))
            micros[name].append((time.perf_counter() - t0) * 1e6)
            cpu[name].append((time.thread_time_ns() - c0) / 1e3)
        c0 = time.thread_time_ns()
        t0 = time.perf_counter()
        int(np.argmax(bestfit.score(pod, table, rows)))
        micros["bestfit"].append((time.perf_counter() - t0) * 1e6)
        cpu["bestfit"].append((time.thread_time_ns() - c0) / 1e3)
        feasible = np.flatnonzero(scheduler.feasible(pod))
        if feasible.size:
            node = plugin.framework_choice(scored["int8"][feasible], feasible, scheduler.tie_rank)
            table.allocate(pod, node, scheduler.profile.devices.pick(pod, table, node))
    return {
        "decision_us_p50": percentile(micros["int8"], 50),
        "decision_us_p99": percentile(micros["int8"], 99),
        "fp32_decision_us_p50": percentile(micros["fp32"], 50),
        "fp32_decision_us_p99": percentile(micros["fp32"], 99),
        "bestfit_decision_us_p50": percentile(micros["bestfit"], 50),
        "bestfit_decision_us_p99": percentile(micros["bestfit"], 99),
        # Beside the wall-clock figures (the goals): this thread's CPU time over the same calls, which a
        # preemption on a shared machine does not inflate (timed around the wall clock's reads, not inside).
        "decision_cpu_us_p50": percentile(cpu["int8"], 50),
        "decision_cpu_us_p99": percentile(cpu["int8"], 99),
        "fp32_decision_cpu_us_p50": percentile(cpu["fp32"], 50),
        "fp32_decision_cpu_us_p99": percentile(cpu["fp32"], 99),
        "bestfit_decision_cpu_us_p50": percentile(cpu["bestfit"], 50),
        "bestfit_decision_cpu_us_p99": percentile(cpu["bestfit"], 99),
        "decision_nodes": len(table),
        "decision_pods": len(micros["int8"]),
    }


def window_figures(result: evaluating.WindowResult) -> dict[str, Any]:
    return {
        "never_placed": result.never_placed, "preplaced_never_placed": result.preplaced_never_placed, "wait_s_mean": result.wait_s_mean, "wait_s_p50": result.wait_s_p50,
        "wait_s_p90": result.wait_s_p90, "wait_s_p99": result.wait_s_p99, "gpu_alloc_ratio_mean": result.gpu_alloc_ratio_mean,
        "queue": result.queue, "never_placed_by_shape": result.never_placed_by_shape,
    }


VARIANT_QUEUES = ("smallest-first", "youngest-first")
"""Non-learned queue orders every heuristic also runs with on the DLRM window, beside Kubernetes' oldest first."""


def queue_variants(model_dir: Path, traces: Traces, held: evaluating.Window, best: str, tick: Callable[[str], None]) -> dict[str, Any]:
    """The best heuristic's scores with the learned order (``NAME+learned-queue``), and the learned scores with each
    non-learned order (``learned+ORDER``): what the learned order and the learned scores each add.

    ``best`` may name a heuristic in another order (``fgd+youngest-first``): its scores are the heuristic's.
    """
    base = best.split("+", 1)[0]
    out = {f"{base}+learned-queue": window_figures(evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, base, held=held, queue=artifacts.load(model_dir).queue))}
    tick("dlrm")
    with evaluating.model_override(model_dir, "int8"):
        for order in ("oldest-first", *VARIANT_QUEUES):
            out[f"learned+{order}"] = window_figures(evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, "learned", held=held, queue=queues.named(order)))
            tick("dlrm")
    return {**out, "best": min(out, key=lambda n: (out[n]["never_placed"], out[n]["wait_s_mean"]))}


def dlrm_window(model_dir: Path, traces: Traces, tick: Callable[[str], None], held: evaluating.Window | None = None) -> dict[str, Any]:
    """The held-out DLRM window for learned and every heuristic in every non-learned queue order; the best heuristic is
    the one placing the most (queue order included: it is part of the policy)."""
    held = held or evaluating.Window.of(traces.dlrm_nodes, traces.dlrm)
    out: dict[str, Any] = {}
    for name in HEURISTICS:
        out[name] = window_figures(evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, name, held=held))
        tick("dlrm")
        for order in VARIANT_QUEUES:
            out[f"{name}+{order}"] = window_figures(evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, name, held=held, queue=queues.named(order)))
            tick("dlrm")
    best = min(out, key=lambda n: (out[n]["never_placed"], out[n]["wait_s_mean"]))
    with evaluating.model_override(model_dir, "int8"):
        out["learned"] = window_figures(evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, "learned", held=held))
    tick("dlrm")
    fluid = held.fluid(traces.dlrm_nodes)
    return {
        **out,
        "best_heuristic": best,
        "best_heuristic_oldest_first": min(HEURISTICS, key=lambda n: (out[n]["never_placed"], out[n]["wait_s_mean"])),
        "queue_note": "each profile retries waiting pods in its own queue order (`queue`): a heuristic under its own name oldest first (Kubernetes' PrioritySort), as NAME+ORDER in each other non-learned order; best_heuristic is the best of all of them; learned runs its artifact's order",
        "infeasible": int(held.infeasible[held.preplaced :].sum()),
        "window_arrivals": len(held.instances) - held.preplaced,
        "preplaced": held.preplaced,
        "preplaced_left_out_at_start": held.preplaced - len(evaluating.place_running(NodeTable(traces.dlrm_nodes), [i.pod for i in held.instances[: held.preplaced]])),
        "start": "the running pods placed first-fit decreasing (CPU, memory, GPU), the same for every profile; profiles learn shapes from them only",
        "window_s": held.end,
        "fleet": f"openb nodes x{evaluating.DLRM_FLEET_SCALE}",
        # Flat keys, not an object: every object in this section is a profile's figures (readers pick the best among them).
        **{f"fluid_bound_{k}": getattr(fluid, k) for k in fluid.__dataclass_fields__},
    }


def openb_figures(model_dir: Path, nodes: list[Node], pods: list[Pod], names: Sequence[str], seeds: list[int], tick: Callable[[str], None]) -> dict[str, list[float]]:
    """Per-seed GPU allocation of each named heuristic and of ``learned`` (int8) on one pod list."""
    out = {name: evaluating.openb_alloc(nodes, pods, name, seeds, on_run=lambda: tick("openb")) for name in names}
    with evaluating.model_override(model_dir, "int8"):
        out["learned"] = evaluating.openb_alloc(nodes, pods, "learned", seeds, on_run=lambda: tick("openb"))
    return out


def run(model_dir: Path, traces: Traces, seeds: int, timing_pods: int, agreement_pods: int, tick: Callable[[str], None]) -> dict[str, Any]:
    """All figures of ``fedplane bench policy``; ``tick(label)`` is called after each unit of work."""
    artifact = artifacts.load(model_dir)
    bench_seeds = list(range(seeds))
    openb = openb_figures(model_dir, traces.nodes, traces.pods, HEURISTICS, bench_seeds, tick)
    means = {name: evaluating.mean(values) for name, values in openb.items()}
    best = max(HEURISTICS, key=lambda n: means[n])
    try:
        bound: float | None = evaluating.mean([submission.upper_bound(traces.pods, seed, traces.nodes) for seed in bench_seeds])
    except bounds.BoundUnavailable:
        bound = None
    tick("bound")
    cpu050 = openb_figures(model_dir, traces.nodes, traces.cpu050, ("fgd",), bench_seeds, tick) if traces.cpu050 else {}
    held = evaluating.Window.of(traces.dlrm_nodes, traces.dlrm)
    dlrm = dlrm_window(model_dir, traces, tick, held)
    variants = queue_variants(model_dir, traces, held, dlrm["best_heuristic"], tick)
    agree, agree_n = agreement(model_dir, traces, seed=0, pods=agreement_pods)
    tick("agreement")
    timing = decision_times(model_dir, traces, seed=0, pods=timing_pods)
    tick("timing")
    files = artifact.manifest["files"]
    fp32_bytes, int8_bytes = files[artifacts.FP32]["bytes"], files[artifacts.INT8]["bytes"]
    return {
        "openb": {
            "learned_gpu_alloc_ratio": means["learned"],
            "fgd_gpu_alloc_ratio": means["fgd"],
            "best_heuristic": best,
            "best_heuristic_gpu_alloc_ratio": means[best],
            "upper_bound_gpu_alloc_ratio": bound,
            "upper_bound": "configuration LP over the arrived pods' GPU shares, CPU and memory (node grouping relaxed)",
            "seeds": bench_seeds,
            "learned_per_seed": openb["learned"],
            "fgd_per_seed": openb["fgd"],
            "per_profile": means,
            "per_seed": openb,
        },
        "openb_cpu050": {
            "learned_gpu_alloc_ratio": evaluating.mean(cpu050.get("learned", [])),
            "fgd_gpu_alloc_ratio": evaluating.mean(cpu050.get("fgd", [])),
            "learned_per_seed": cpu050.get("learned", []),
            "fgd_per_seed": cpu050.get("fgd", []),
        },
        "dlrm_holdout": dlrm,
        "dlrm_holdout_queue_variants": variants,
        "fp32_bytes": fp32_bytes,
        "int8_bytes": int8_bytes,
        "size_ratio": int8_bytes / fp32_bytes,
        "int8_fp32_agreement": agree,
        "agreement_decisions": agree_n,
        **timing,
        "train_wall_s": artifact.manifest["training"].get("train_wall_s"),
        "model": str(model_dir),
        "model_version": artifact.version,
    }
