"""``fedplane bench gossip``: the gossip figures and their baselines, from one seeded run."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from gossip import bench
from gossip.config import GossipConfig

T = TypeVar("T")
SERF_MODEL_ROUNDS = 11
"""Serf's convergence model: rounds for fanout 3 to reach 99.99% of 1,000 nodes."""
PUSHPULL_INTERVAL = 10.0
"""Anti-entropy interval of both modes in the bytes comparison."""
BYTES_WINDOW = 10.0
LOSS_SECONDS = {0.10: 10.0, 0.30: 4.0}
"""Virtual seconds under each loss rate; 30% loss saturates every gossip queue and costs ~15x the CPU."""


def run(nodes: int, fanout: int, probe_interval: float, seed: int, progress: bench.Progress | None = None) -> dict[str, Any]:
    """Every scenario at one size and seed; returns the report as a JSON-able dict."""
    started = time.perf_counter()
    cpu: dict[str, float] = {}

    def timed(label: str, fn: Callable[[], T]) -> T:
        t0 = time.process_time()
        result = fn()
        cpu[label] = round(time.process_time() - t0, 1)
        return result

    config = GossipConfig(probe_interval=probe_interval, probe_timeout=probe_interval / 2, fanout=fanout, pushpull_interval=PUSHPULL_INTERVAL)
    crashes = min(10, max(1, nodes // 20))
    spread = timed("spread_detect", lambda: bench.spread_and_detect(nodes, config, seed, crashes, progress))
    deaths10, suspicions10 = timed("loss10", lambda: bench.false_deaths(nodes, config, seed, 0.10, LOSS_SECONDS[0.10], progress))
    deaths30, suspicions30 = timed("loss30", lambda: bench.false_deaths(nodes, config, seed, 0.30, LOSS_SECONDS[0.30], progress))
    digest = timed("bytes_digest", lambda: bench.antientropy_bytes(nodes, config, seed, BYTES_WINDOW, settle=PUSHPULL_INTERVAL, progress=progress))
    full_config = config.replace(full_state_pushpull=True)
    full = timed("bytes_fullstate", lambda: bench.antientropy_bytes(nodes, full_config, seed, BYTES_WINDOW, settle=PUSHPULL_INTERVAL, progress=progress))
    return {
        "nodes": nodes,
        "fanout": fanout,
        "probe_interval_s": probe_interval,
        "rounds_to_99_99": spread.rounds_to_99_99,
        "seconds_to_99_99": round(spread.seconds_to_99_99, 3),
        "serf_model_rounds": SERF_MODEL_ROUNDS,
        "digest_bytes_per_node_s": round(digest.bytes_per_node_s, 1),
        "fullstate_bytes_per_node_s": round(full.bytes_per_node_s, 1),
        "bytes_ratio": round(digest.bytes_per_node_s / full.bytes_per_node_s, 4) if full.bytes_per_node_s else None,
        "digest_stale_fraction_end": digest.stale_fraction_end,
        "fullstate_stale_fraction_end": full.stale_fraction_end,
        "gossip_bytes_per_node_s": round(digest.other_bytes_per_node_s, 1),
        "pushpull_interval_s": PUSHPULL_INTERVAL,
        "detect_s_median": round(bench.median(spread.detect_first_s), 3),
        "detect_s_p99": round(bench.p99(spread.detect_first_s), 3),
        "detect_all_s_median": round(bench.median(spread.detect_all_s), 3),
        "detect_all_s_p99": round(bench.p99(spread.detect_all_s), 3),
        "crashed_nodes": len(spread.detect_first_s),
        "false_deaths_loss0": spread.false_deaths,
        "false_deaths_loss10": deaths10,
        "false_deaths_loss30": deaths30,
        "suspicions_loss10": suspicions10,
        "suspicions_loss30": suspicions30,
        "loss_run_s": {f"{int(loss * 100)}%": seconds for loss, seconds in LOSS_SECONDS.items()},
        "sim_wall_s": round(time.perf_counter() - started, 1),
        "scenario_cpu_s": cpu,
        "seed": seed,
    }


@click.command("gossip")
@click.option("--nodes", default=1000, show_default=True, help="Cluster size N.")
@click.option("--fanout", default=3, show_default=True, help="Members gossiped to per round.")
@click.option("--probe-interval", default=0.2, show_default=True, help="SWIM probe interval, seconds.")
@click.option("--seed", default=1, show_default=True, help="Seed of the deterministic network.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def bench_gossip(nodes: int, fanout: int, probe_interval: float, seed: int, as_json: bool) -> None:
    """Gossip in the deterministic network: spread, failure detection, false deaths, anti-entropy bytes.

    Runs, in virtual time with real encoded and encrypted bytes: one update spreading to
    99.99% of N (in gossip rounds, against Serf's 11-round model); crashes timed to the
    first member declaring them dead (median and p99, 200 ms probe by default); live
    members wrongly declared dead at 10% and 30% packet loss; and the anti-entropy bytes
    of Bloom-digest push-pull against memberlist-style full-state push-pull under the same
    churn (1% of nodes change a record each second) and the same convergence.
    """
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

        report = run(nodes, fanout, probe_interval, seed, progress)
    if as_json:
        click.echo(json.dumps(report))
        return
    table = Table(title=f"fedplane bench gossip (N={nodes}, seed={seed})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in report.items():
        table.add_row(key, str(value))
    Console().print(table)
