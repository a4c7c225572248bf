"""``fedplane bench gossip``: the gossip figures and their baselines, from one seeded run."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from collections.abc import Collection
from typing import Any

import click

from fedplane.lab.benches import gossipbench
from fedplane.lab.doubles.memnet import LinkModel
from gossip.config import GossipConfig

BYTES_WINDOW = 10.0
LOSS_SECONDS = {0.10: 10.0, 0.30: 4.0}
"""Virtual seconds under each loss rate; 30% loss saturates every gossip queue and costs ~15x the CPU."""


SCENARIOS = ("spread", "loss10", "loss30", "bytes")
"""What ``--scenarios`` may pick: spread and detection; false deaths at 10% and 30% loss;
anti-entropy bytes of Bloom digests against full-state push-pull (both modes, one run)."""
LARGE = 2000
"""Above this N the default leaves out loss30 (every gossip queue saturates: hours of CPU at
N = 10,000) and the bytes scenario counts the full-state baseline instead of running it."""
FULL_STATE_COUNTED_AS = (
    "full-state push-pull frames counted in the digest run: at every exchange leg, the sealed size of the frame "
    "memberlist-style push-pull would have sent from that node's state at that moment "
    "(GossipNode.full_state_frame_size, tested equal to the real frame's length)"
)
FULL_STATE_RUN_AS = "a second run of the same churn with full-state push-pull (GossipConfig.full_state_pushpull): bytes of its real frames"


_LABELS = (("spread", "spread_detect"), ("loss10", "loss10"), ("loss30", "loss30"), ("bytes", "bytes_digest"), ("bytes", "bytes_fullstate"))
"""Scenario -> the runs it takes, in report order."""
_COST = ("bytes_digest", "loss30", "loss10", "bytes_fullstate", "spread_detect")
"""Runs by CPU they take at N = 10,000, most first (measured): the order processes start them."""


def default_scenarios(nodes: int) -> tuple[str, ...]:
    return SCENARIOS if nodes <= LARGE else tuple(s for s in SCENARIOS if s != "loss30")


def default_jobs(nodes: int, chosen: int) -> int:
    """Scenario processes: one up to N = 2,000 (seconds each), else one per CPU we may use (each
    N = 10,000 scenario is a single-threaded simulation of tens of minutes and ~1.8 GiB)."""
    return 1 if nodes <= LARGE else max(1, min(chosen, len(os.sched_getaffinity(0))))


def _scenario(label: str, nodes: int, config: GossipConfig, seed: int, progress: gossipbench.Progress | None = None) -> tuple[Any, float, float]:
    """One scenario of the report: (its result, CPU seconds, peak RSS MiB of the process running it)."""
    t0 = time.process_time()
    with gossipbench.no_cycle_collection():
        if label == "spread_detect":
            result: Any = gossipbench.spread_and_detect(nodes, config, seed, min(10, max(1, nodes // 20)), progress)
        elif label in ("loss10", "loss30"):
            loss = 0.10 if label == "loss10" else 0.30
            result = gossipbench.false_deaths(nodes, config, seed, loss, LOSS_SECONDS[loss], progress)
        else:
            mode = config.replace(count_full_state=True) if label == "bytes_digest" else config.replace(full_state_pushpull=True)
            result = gossipbench.antientropy_bytes(nodes, mode, seed, BYTES_WINDOW, settle=config.pushpull_interval, progress=progress)
    return result, round(time.process_time() - t0, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    nodes: int, fanout: int, probe_interval: float, seed: int, progress: gossipbench.Progress | None = None, scenarios: Collection[str] = SCENARIOS,
    jobs: int = 1,
) -> dict[str, Any]:
    """The chosen scenarios at one size and seed; returns the report as a JSON-able dict
    (the figures of scenarios not run are null).

    With ``jobs`` > 1 the scenarios run side by side in that many processes: each builds its
    own network from the seed, so every figure is the one a sequential run gives.
    """
    started = time.perf_counter()
    config = GossipConfig().replace(probe_interval=probe_interval, probe_timeout=probe_interval / 2, fanout=fanout)
    labels = [label for scenario, label in _LABELS if scenario in scenarios and (label != "bytes_fullstate" or nodes <= LARGE)]
    results: dict[str, Any] = {}
    cpu: dict[str, float] = {}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if jobs <= 1:
        for label in labels:
            results[label], cpu[label], rss = _scenario(label, nodes, config, seed, progress)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn, not fork: the parent may run a progress thread; longest first, so they end together
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_scenario, label, nodes, config, seed): label for label in sorted(labels, key=_COST.index)}
            for future in as_completed(futures):
                label = futures[future]
                results[label], cpu[label], child_rss = future.result()
                rss = max(rss, child_rss)
                if progress is not None:
                    progress(label, 1.0)
        cpu = {label: cpu[label] for label in labels}
    spread, loss10, loss30 = results.get("spread_detect"), results.get("loss10"), results.get("loss30")
    digest, full = results.get("bytes_digest"), results.get("bytes_fullstate")
    report: dict[str, Any] = {
        "backend": "deterministic in-memory network (fedplane.lab.doubles.memnet): the shipped GossipNode cores, real encoded XChaCha20-Poly1305 bytes",
        "config": "GossipConfig defaults (the agents'), probe_interval set by --probe-interval",
        "scenarios": [name for name in SCENARIOS if name in scenarios],
        "nodes": nodes,
        "fanout": fanout,
        "probe_interval_s": probe_interval,
        "rounds_counted_as": "fanout rounds: forwarding hops from the publisher to the member that completes 99.99%",
        "serf_model_rounds": gossipbench.serf_model_rounds(nodes, fanout),
        "serf_model": "Serf convergence simulator: share after r rounds = 1 / (1 + (N+1) exp(-fanout/2 * r)), computed for this N and fanout",
        "gossip_interval_s": config.gossip_interval,
        "clock_skew_s": LinkModel().clock_skew,
        "suspicion_mult": config.suspicion_mult,
        "retransmit_mult": config.retransmit_mult,
        "pushpull_interval_s": config.pushpull_interval,
        "loss_run_s": {f"{int(loss * 100)}%": seconds for loss, seconds in LOSS_SECONDS.items()},
        "seed": seed,
    }
    report |= _spread_figures(spread, config)
    report |= {
        "false_deaths_loss10": None if loss10 is None else loss10[0],
        "suspicions_loss10": None if loss10 is None else loss10[1],
        "false_deaths_loss30": None if loss30 is None else loss30[0],
        "suspicions_loss30": None if loss30 is None else loss30[1],
    }
    report |= _bytes_figures(digest, full)
    report |= {
        "sim_wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mib": round(rss, 1),
        "peak_rss_of": "the largest process: the one running every scenario, or with jobs > 1 the largest scenario process",
        "jobs": jobs,
        "gc": "cyclic garbage collector off during each scenario (the simulated nodes make no reference cycles); agents keep it on",
        "scenario_cpu_s": cpu,
    }
    return report


def _spread_figures(spread: gossipbench.Spread | None, config: GossipConfig) -> dict[str, Any]:
    if spread is None:
        keys = ("rounds_to_99_99", "seconds_to_99_99", "interval_rounds_to_99_99", "detect_s_median", "detect_s_p99",
                "detect_all_s_median", "detect_all_s_p99", "crashed_nodes", "false_deaths_loss0")  # fmt: skip
        return dict.fromkeys(keys)
    seconds = spread.seconds_to_99_99
    return {
        "rounds_to_99_99": spread.rounds_to_99_99,
        "seconds_to_99_99": round(seconds, 3),
        "interval_rounds_to_99_99": math.ceil(seconds / config.gossip_interval - 1e-9) if math.isfinite(seconds) else -1,
        "detect_s_median": round(gossipbench.median(spread.detect_first_s), 3),
        "detect_s_p99": round(gossipbench.p99(spread.detect_first_s), 3),
        "detect_all_s_median": round(gossipbench.median(spread.detect_all_s), 3),
        "detect_all_s_p99": round(gossipbench.p99(spread.detect_all_s), 3),
        "crashed_nodes": len(spread.detect_first_s),
        "false_deaths_loss0": spread.false_deaths,
    }


def _bytes_figures(digest: gossipbench.Bytes | None, full: gossipbench.Bytes | None) -> dict[str, Any]:
    if digest is None:
        keys = ("digest_bytes_per_node_s", "fullstate_bytes_per_node_s", "fullstate_counted_bytes_per_node_s", "bytes_ratio",
                "digest_stale_fraction_end", "fullstate_stale_fraction_end", "gossip_bytes_per_node_s", "fullstate_figure")  # fmt: skip
        return dict.fromkeys(keys)
    counted = digest.counted_full_state_bytes_per_node_s
    baseline = full.bytes_per_node_s if full is not None else counted
    return {
        "digest_bytes_per_node_s": round(digest.bytes_per_node_s, 1),
        "fullstate_bytes_per_node_s": None if baseline is None else round(baseline, 1),
        "fullstate_counted_bytes_per_node_s": None if counted is None else round(counted, 1),
        "bytes_ratio": round(digest.bytes_per_node_s / baseline, 4) if baseline else None,
        "fullstate_figure": FULL_STATE_RUN_AS if full is not None else FULL_STATE_COUNTED_AS,
        "fullstate_counted_figure": FULL_STATE_COUNTED_AS,
        "digest_stale_fraction_end": digest.stale_fraction_end,
        "fullstate_stale_fraction_end": None if full is None else full.stale_fraction_end,
        "gossip_bytes_per_node_s": round(digest.other_bytes_per_node_s, 1),
    }


@click.command("gossip")
@click.option("--nodes", default=1000, show_default=True, type=click.IntRange(20, 100_000), help="Cluster size N.")
@click.option("--fanout", default=GossipConfig().fanout, show_default=True, type=click.IntRange(1, 64), help="Members gossiped to per round.")
@click.option("--probe-interval", default=0.2, show_default=True, type=click.FloatRange(min=0.001),
              help="SWIM probe interval, seconds (the detection target names 200 ms; agents default to GossipConfig's).")
@click.option("--seed", default=1, show_default=True, help="Seed of the deterministic network.")
@click.option("--scenarios", default=None,
              help="Comma-separated scenarios to run (spread, loss10, loss30, bytes); figures of the others are null. "
                   f"Default: all of them up to N = {LARGE}, all but loss30 above.")
@click.option("--jobs", default=None, type=click.IntRange(1, 64),
              help=f"Scenarios run side by side in this many processes (same figures). Default: 1 up to N = {LARGE}, "
                   "else one per CPU this process may use.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def bench_gossip(nodes: int, fanout: int, probe_interval: float, seed: int, scenarios: str | None, jobs: int | None, as_json: bool) -> None:
    """Gossip in the deterministic network: spread, failure detection, false deaths, anti-entropy bytes.

    Runs GossipConfig's defaults (what agents run) with the probe interval given, in
    virtual time with real encoded and encrypted bytes: one update spreading to 99.99% of
    N (in fanout rounds counted hop by hop, beside Serf's convergence model computed for
    the same N and fanout); crashes timed to the
    first member declaring them dead (median and p99, 200 ms probe by default); live
    members wrongly declared dead at 10% and 30% packet loss; and the anti-entropy bytes
    of Bloom-digest push-pull against memberlist-style full-state push-pull under the same
    churn (1% of nodes change a record each second) and the same convergence. Above
    N = 2,000 the full-state baseline is counted in the digest run (the size of the frame
    each exchange leg would have sent) rather than run, and loss30 runs only if asked for.
    """
    chosen = set(default_scenarios(nodes)) if scenarios is None else {name.strip() for name in scenarios.split(",") if name.strip()}
    if not chosen or not chosen <= set(SCENARIOS):
        raise click.BadParameter(f"{scenarios!r}: choose among {', '.join(SCENARIOS)}", param_hint="--scenarios")
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    err = Console(file=sys.stderr)
    with Progress(console=err, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, fraction: float) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=1.0)
            bar.update(tasks[label], completed=min(1.0, fraction))

        report = run(nodes, fanout, probe_interval, seed, progress, chosen, default_jobs(nodes, len(chosen)) if jobs is None else jobs)
    if as_json:
        click.echo(json.dumps(report))
        return
    table = Table(title=f"fedplane bench gossip (N={nodes}, seed={seed})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in report.items():
        table.add_row(key, str(value))
    Console().print(table)
