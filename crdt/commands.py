"""``fedplane bench claims``: the placement-claims simulation as a benchmark with one JSON answer."""

from __future__ import annotations

import json
import statistics
import sys
import time
from functools import partial
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from crdt import wire
from crdt.claims_replica import ClaimsReplica
from crdt.simulating import SimConfig, Simulation, SimResult

SAFETY = ("double_bookings", "overcommits", "stale_epoch_wins")
"""Counters that must be zero; summed over seeds."""
INCIDENTS = ("bind_conflicts", "completed_elsewhere", "transient_double_runs", "stale_evictions", "replaced_pods",
             "escrow_refusals", "rejected_deltas", "unplaced")
"""Counters worth seeing, also summed over seeds."""


def wire_figures(sample: list[bytes], capacity_of: ClaimsReplica) -> dict[str, float]:
    """Replay a run's delta bytes into a fresh replica: decode+validate+merge rate, and merge-only rate.

    Every delta is new to the fresh replica, so this is the costly path (no duplicates).
    Rates are per second of this thread's CPU time, like ``merges_per_s``.
    """
    observer = ClaimsReplica("observer", "observer-node", capacity_of.capacity)
    start = time.thread_time()
    for data in sample:
        observer.merge(wire.decode_delta(data))
    wire_seconds = time.thread_time() - start
    decoded = [wire.decode_delta(data) for data in sample]
    fresh = ClaimsReplica("observer", "observer-node", capacity_of.capacity)
    start = time.thread_time()
    for delta in decoded:
        fresh.merge(delta)
    merge_seconds = time.thread_time() - start
    return {
        "fresh_merges_per_s": round(len(sample) / merge_seconds),
        "wire_decode_merges_per_s": round(len(sample) / wire_seconds),
    }


def figures(result: SimResult, sim: Simulation) -> dict[str, Any]:
    """One seed's figures. Full-state bytes: what a state-based CRDT would ship for the same updates
    (the sender's encoded state at each update), per claim; delta bytes: the encoded deltas, per claim."""
    return {
        "merges_per_s": round(result.merges / result.merge_seconds),
        "merges_per_s_wall": round(result.merges / result.merge_wall_seconds),
        **wire_figures(result.sample, sim.agents[0].replica),
        "delta_bytes_per_claim": round(result.delta_bytes / max(result.claims, 1), 1),
        "fullstate_bytes_per_claim": round(result.fullstate_bytes / max(result.claims, 1), 1),
        "rounds_to_converge_after_heal": result.rounds_to_converge_after_heal,
        "rounds_to_converge_after_return": result.rounds_to_converge_after_return,
        "claims": result.claims,
        "merges": result.merges,
        "rounds": result.rounds,
        "quiesced": result.quiesced,
        **{name: getattr(result, name) for name in SAFETY + INCIDENTS},
    }


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Safety and incident counters summed over seeds; every other figure is the mean."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        values = [run[key] for run in runs]
        if key in SAFETY or key in INCIDENTS or key in ("claims", "merges"):
            out[key] = sum(values)
        elif isinstance(first, bool):
            out[key] = all(values)
        else:
            out[key] = round(statistics.fmean(values), 1)
    return out


@click.command("claims")
@click.option("--agents", default=64, show_default=True, help="Edge agents, one node each.")
@click.option("--pods", default=10000, show_default=True, help="Pods announced over the arrival rounds.")
@click.option("--seed", default=1, show_default=True, help="First seed.")
@click.option("--seeds", "n_seeds", default=1, show_default=True, help="Run seeds seed..seed+N-1.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON object.")
def bench_claims(agents: int, pods: int, seed: int, n_seeds: int, as_json: bool) -> None:
    """Simulate agents claiming pods through the claims CRDT under loss, duplication, reordering,
    a healed partition and a node declared dead (epoch bump); check that no pod is double-booked,
    no node over-committed and no stale epoch wins; measure delta merges per second on one core
    and delta vs full-state bytes per claim."""
    err = Console(stderr=True)
    runs = []
    with Progress(TextColumn("seed {task.fields[seed]}"), BarColumn(), TextColumn("round {task.completed:.0f}"),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        for s in range(seed, seed + n_seeds):
            config = SimConfig(agents=agents, pods=pods, seed=s)
            task = progress.add_task("sim", total=config.max_rounds, seed=s)
            sim = Simulation(config)
            result = sim.run(partial(progress.update, task))
            progress.update(task, completed=config.max_rounds)
            runs.append(figures(result, sim))
    report = {"agents": agents, "pods": pods, **combine(runs), "seed": seed, "seeds_run": n_seeds}
    if not as_json:
        table = Table(title=f"bench claims: {agents} agents, {pods} pods, seeds {seed}..{seed + n_seeds - 1}")
        table.add_column("figure")
        table.add_column("value", justify="right")
        for key, value in report.items():
            style = "bold red" if key in SAFETY and value else None
            table.add_row(key, str(value), style=style)
        Console().print(table)
    sys.stdout.write(json.dumps(report) + "\n")
