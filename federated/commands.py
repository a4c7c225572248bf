"""``fedplane policy train|export|eval|explain`` and ``fedplane bench policy``.

The default artifact shipped in ``federated/models/default`` is reproduced by::

    fedplane policy train --out build/policy && fedplane policy export build/policy --out federated/models/default
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fedcore import reporting
from fedcore.commands import fail, traces_option
from fedcore.traces import TraceError

CHECKPOINT = "checkpoint.pt"


def _torch() -> Any:
    """torch, single-threaded (training is seeded and the machine is shared)."""
    try:
        import torch
    except ImportError:
        fail("training needs torch: pip install 'fedplane[train]'")
    torch.set_num_threads(1)
    return torch


def _model_dir(model: str | None) -> Path:
    from federated.runtime.scorer import configured_model_dir

    path = Path(model) if model else configured_model_dir()
    if path is None:
        fail("no model: pass --model DIR, set $FEDPLANE_MODEL, or ship federated/models/default")
    return path  # type: ignore[return-value]


@click.group()
def policy() -> None:
    """The learned placement policy: train, export to int8 ONNX, evaluate, explain."""


def _reshape(point: str) -> tuple[float, float, float, float, float, float, float]:
    """``T:W[:U[:TS[:H[:R[:C]]]]]`` -> (temperature, small-first, idle-first, sharing temperature (default T), whole-first,
    pinned release, CPU packing); ValueError otherwise."""
    values = [float(x) for x in point.split(":")]
    if not 2 <= len(values) <= 7:
        raise ValueError(point)
    t, w, u, ts, h, r, c = values + [0.0, values[0], 0.0, 0.0, 0.0][len(values) - 2 :]
    return (t, w, u, ts, h, r, c)


@policy.command()
@click.option("--out", "out_dir", default="build/policy", show_default=True, type=click.Path(file_okay=False), help="Where the checkpoint goes.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--openb-episodes", default=2, show_default=True, type=click.IntRange(1, 100), help="FGD teacher episodes on openb training seeds.")
@click.option("--dlrm-window", default=0.4, show_default=True, type=click.FloatRange(0.0, 1.0), help="Share of DLRM's training part replayed with the kube-default teacher.")
@click.option("--epochs", default=8, show_default=True, type=click.IntRange(1, 1000))
@click.option("--rl-steps", default=0, show_default=True, type=click.IntRange(0, 10_000_000), help="PPO steps on the twin (0 = none; PPO never beat its imitation start).")
@click.option("--reshapes", default=None, help="TEMPERATURE:SMALL_FIRST[:IDLE_FIRST[:SHARING_TEMPERATURE[:WHOLE_FIRST[:PINNED_RELEASE[:CPU_PACK]]]]] points judged on whole validation episodes, comma-separated ('' skips the search; default: the built-in grid).")
@click.option("--validation-list", "validation_lists", multiple=True, type=click.Path(dir_okay=False), help="More openb pod lists the settings search judges every point on (its margin over each list's best heuristic, worst list first); repeat for more.")
@click.option("--queue-budget", default=40, show_default=True, type=click.IntRange(0, 1000), help="Pending-queue orders judged on the DLRM training windows (0 skips; needs --dlrm-window > 0).")
@traces_option
def train(
    out_dir: str, seed: int, openb_episodes: int, dlrm_window: float, epochs: int, rl_steps: int, reshapes: str | None,
    validation_lists: tuple[str, ...], queue_budget: int, traces: str | None,
) -> None:
    """Imitate the best heuristics on the training parts of the traces, fine-tune with PPO on the twin, then pick the
    score temperature and small-node and idle-node preferences that give the best whole-episode allocation on validation seeds."""
    torch = _torch()
    from fedcore.traces import openb
    from federated import evaluating, training

    try:
        extra = [(openb.list_name(Path(p)), openb.load_pods(p)) for p in validation_lists]  # the user's own files first
        loaded = evaluating.Traces.load(traces)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    try:
        grid = training.RESHAPES if reshapes is None else tuple(_reshape(point) for point in reshapes.split(",") if point.strip())
    except ValueError:
        fail(f"--reshapes must be comma-separated TEMPERATURE:SMALL_FIRST[:IDLE_FIRST[:SHARING_TEMPERATURE[:WHOLE_FIRST[:PINNED_RELEASE[:CPU_PACK]]]]] points, got {reshapes!r}")
    if any(t <= 0 or ts <= 0 for t, _, _, ts, _, _, _ in grid):
        fail("--reshapes: temperatures must be positive")
    config = training.TrainConfig(seed, openb_episodes, dlrm_window, epochs, rl_steps, reshapes=grid, queue_budget=queue_budget)
    model, record = training.train(loaded, config, extra)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "record": record}, out / CHECKPOINT)
    reporting.emit_json({k: v for k, v in record.items() if k != "rl"} | {"checkpoint": str(out / CHECKPOINT)})


@policy.command()
@click.argument("checkpoint_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Artifact directory to write.")
@traces_option
def export(checkpoint_dir: str, out_dir: str, traces: str | None) -> None:
    """Export a trained checkpoint to an artifact: fp32 ONNX, int8 ONNX and a manifest."""
    torch = _torch()
    from fedcore.scheduling.fragmentation import PodTypes
    from federated import exporting, splits
    from federated.evaluating import Traces
    from federated.model import PlacementScorer

    path = Path(checkpoint_dir) / CHECKPOINT
    if not path.is_file():
        fail(f"{checkpoint_dir}: no {CHECKPOINT} here (write one with `fedplane policy train --out DIR`)")
    model = PlacementScorer()
    try:
        saved = torch.load(path, weights_only=False)
        model.load_state_dict(saved["state_dict"])
    except Exception as exc:  # torch raises many types for a truncated or foreign file
        fail(f"{path}: not a policy checkpoint ({type(exc).__name__}: {str(exc)[:200]})")
    try:
        types = PodTypes.from_pods(splits.openb_train_pods(Traces.load(traces).pods))
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    manifest = exporting.export(model, Path(out_dir), types, saved["record"])
    reporting.emit_json({"artifact": out_dir, "files": manifest["files"], "feature_spec": manifest["feature_spec"]})


def _service_point(point: str) -> tuple[float, float]:
    """``PACK:RESERVE`` -> (pack, reserve); ValueError otherwise."""
    pack, reserve = (float(x) for x in point.split(":"))
    return pack, reserve


@policy.command("services")
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Artifact directory to write (may be --model's).")
@click.option("--points", default=None, help="PACK:RESERVE points, comma-separated (default: the built-in grid).")
@traces_option
def services_command(model: str | None, out_dir: str, points: str | None, traces: str | None) -> None:
    """Choose service replicas' packing and slot reservation on DLRM training windows (never the held-out window)
    and write the artifact with them; no score of a pod that is not a service replica changes."""
    import tempfile

    from federated import evaluating, services
    from federated.runtime import artifacts

    source = _model_dir(model)
    try:
        artifacts.load(source)
    except artifacts.ArtifactError as exc:
        fail(str(exc))
    try:
        grid = services.GRID if points is None else tuple(_service_point(p) for p in points.split(",") if p.strip())
    except ValueError:
        fail(f"--points must be comma-separated PACK:RESERVE numbers, got {points!r}")
    if not grid:
        fail("--points: give at least one PACK:RESERVE point")
    try:
        loaded = evaluating.Traces.load(traces)
        windows = services.training_windows(loaded.dlrm_nodes, loaded.dlrm)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    with tempfile.TemporaryDirectory() as tmp, reporting.progress() as bar:
        task = bar.add_task("service points on the DLRM training windows", total=len(grid))
        chosen, record = services.search(grid, services.replay_point(source, windows, Path(tmp)), on_point=lambda: bar.advance(task))
    manifest = services.retune(source, Path(out_dir), chosen, record)
    reporting.emit_json({"artifact": out_dir, "service_search": manifest["training"]["service_search"], "files": manifest["files"]})


@policy.command("queue")
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Artifact directory to write (may be --model's).")
@click.option("--budget", default=40, show_default=True, type=click.IntRange(1, 1000), help="Weight vectors to judge (each replays the five windows).")
@traces_option
def queue_command(model: str | None, out_dir: str, budget: int, traces: str | None) -> None:
    """Choose the learned pending-queue order on DLRM training windows (never the held-out window) and write the
    artifact with it; the model files (every score) are unchanged."""
    from federated import evaluating, queuesearch, services
    from federated.runtime import artifacts

    source = _model_dir(model)
    try:
        artifacts.load(source)
        loaded = evaluating.Traces.load(traces)
        windows = services.training_windows(loaded.dlrm_nodes, loaded.dlrm)
    except artifacts.ArtifactError as exc:
        fail(str(exc))
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    with reporting.progress() as bar:
        task = bar.add_task("heuristics on the DLRM training windows", total=queuesearch.BASELINE_RUNS)
        name, baseline = queuesearch.best_heuristic(windows, on_run=lambda: bar.advance(task))
        task = bar.add_task("queue orders on the DLRM training windows", total=budget)
        best, seen = queuesearch.search(queuesearch.replay_order(source, windows), baseline, budget=budget, on_point=lambda: bar.advance(task))
    manifest = queuesearch.with_queue(source, Path(out_dir), queuesearch.record(best, seen, name, baseline))
    reporting.emit_json({"artifact": out_dir, "queue": manifest["training"]["queue_search"]["kept"], "baseline": manifest["training"]["queue_search"]["baseline"]})


@policy.command("eval")
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--precision", type=click.Choice(["int8", "fp32"]), default="int8", show_default=True)
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(1, 1000), help="openb bench seeds 0..N-1.")
@traces_option
def evaluate(model: str | None, precision: str, seeds: int, traces: str | None) -> None:
    """openb GPU allocation (learned vs FGD, bench seeds) and the held-out DLRM window (learned vs kube-default)."""
    from federated import evaluating
    from federated.runtime import artifacts

    path = _model_dir(model)
    try:
        artifacts.load(path)
        loaded = evaluating.Traces.load(traces)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    bench_seeds = list(range(seeds))
    with reporting.progress() as bar:
        task = bar.add_task("evaluating", total=2 * seeds + 2)

        def tick() -> None:
            bar.advance(task)

        fgd = evaluating.openb_alloc(loaded.nodes, loaded.pods, "fgd", bench_seeds, tick)
        held = evaluating.Window.of(loaded.dlrm_nodes, loaded.dlrm)
        kube = evaluating.dlrm_holdout(loaded.dlrm_nodes, loaded.dlrm, "kube-default", held=held)
        tick()
        with evaluating.model_override(path, precision):
            learned = evaluating.openb_alloc(loaded.nodes, loaded.pods, "learned", bench_seeds, tick)
            mine = evaluating.dlrm_holdout(loaded.dlrm_nodes, loaded.dlrm, "learned", held=held)
        tick()
    reporting.emit_json({
        "model": str(path), "precision": precision, "seeds": bench_seeds,
        "openb": {"learned_gpu_alloc_ratio": evaluating.mean(learned), "fgd_gpu_alloc_ratio": evaluating.mean(fgd), "learned": learned, "fgd": fgd},
        "dlrm_holdout": {"learned": _fields(mine), "kube_default": _fields(kube)},
    })


def _fields(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


@policy.command()
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--seed", default=0, show_default=True, type=int, help="openb submission seed.")
@click.option("--pod", "pod_index", default=500, show_default=True, type=click.IntRange(0, 100_000), help="Explain the decision for this pod of the submission order.")
@click.option("--top", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--json", "as_json", is_flag=True)
@traces_option
def explain(model: str | None, seed: int, pod_index: int, top: int, as_json: bool, traces: str | None) -> None:
    """Which features made the chosen node win one decision of the openb protocol (occlusion on the runtime model)."""
    import numpy as np

    from fedcore.nodetable import NodeTable
    from fedcore.scheduling.fragmentation import PodTypes
    from fedcore.scheduling.framework import Scheduler
    from fedcore.twin import submission
    from federated import explaining
    from federated.evaluating import Traces
    from federated.runtime import plugin
    from federated.runtime.scorer import PolicyRuntime

    path = _model_dir(model)
    try:
        loaded = Traces.load(traces)
        runtime = PolicyRuntime(path, "fp32", PodTypes.from_pods(loaded.pods))
        table = NodeTable(submission.gpu_nodes(loaded.nodes))
        scheduler = Scheduler(plugin.profile_for(runtime), table, seed)
        order = submission.workload(loaded.pods, seed, int(table.gpu_count.sum()) * 1000)
        if pod_index >= len(order):
            fail(f"the submission order has {len(order)} pods")
        for pod in order[:pod_index]:
            scheduler.schedule(pod, explain=False)
        pod = order[pod_index]
        rows = np.flatnonzero(scheduler.feasible(pod))
        if rows.size == 0:
            fail(f"pod {pod.uid} fits no node at that point (it would be dropped)")
        pod_x, node_x = runtime.inputs(pod, table, rows)
        scores = runtime.scorer(pod_x, node_x)
        node = plugin.framework_choice(scores, rows, scheduler.tie_rank)
        chosen = int(np.flatnonzero(rows == node)[0])
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    found = explaining.explain(runtime.scorer, pod_x, node_x, chosen, top)
    summary: dict[str, Any] = {
        "pod": pod.uid, "request": {"cpu_milli": pod.cpu_milli, "memory_mib": pod.memory_mib, "gpus": pod.gpu.count, "gpu_milli_each": pod.gpu.milli_each},
        "chosen_node": table.nodes[node].name, "score": float(scores[chosen]), "candidates": int(rows.size),
        "field_mean_score": float(scores.mean()), "model": runtime.version,
        "features": [_fields(a) for a in found],
    }
    if as_json:
        reporting.emit_json(summary)
        return
    reporting.stdout.print(f"pod {pod.uid} -> {summary['chosen_node']} (score {summary['score']:.2f} vs field mean {summary['field_mean_score']:.2f}, {rows.size} candidates, model {runtime.version})")
    reporting.table("features that moved the chosen node's score", summary["features"])


