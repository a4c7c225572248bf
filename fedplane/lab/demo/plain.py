"""``fedplane demo`` without ``--learn``: the control plane, twin clusters, 9 real agents, an outage drill, an autoscaled workload."""

from __future__ import annotations

from pathlib import Path

import click

from fedcore import reporting
from fedcore.commands import fail, traces_option
from fedplane.lab.drills.commands import run_stoppable


@click.command()
@click.option("--out", "out_dir", default="fedplane-demo", show_default=True, type=click.Path(file_okay=False), help="Where the report (JSON) and the PNG timeline go.")
@click.option("--pods", default=300, show_default=True, type=click.IntRange(10, 2000), help="Pods sampled from the openb trace.")
@click.option("--seed", default=0, show_default=True, type=int)
@traces_option
def demo(out_dir: str, pods: int, seed: int, traces: str | None) -> None:
    """The main job on the embedded twin: control plane, 3 clusters in 2 regions, 9 real agents, trace pods, a cluster outage, one workload autoscaled."""
    from fedcore.traces import TraceError
    from fedplane.lab.demo import planedemo

    settings = planedemo.DemoSettings(pods=pods, seed=seed, traces=traces, out=Path(out_dir))
    reporting.stderr.print("fedplane demo: starting the control plane and 9 edge agents, placing trace pods, then a cluster outage, then one workload autoscaled (under a minute)")
    try:
        run = run_stoppable(planedemo.run(settings, notice=lambda m: reporting.stderr.print(f"[yellow]notice:[/yellow] {m}")))
    except (TraceError, RuntimeError) as exc:
        fail(str(exc))
    report = planedemo.write(run, Path(out_dir))
    if report["drill"]["verdict"] != "PASS":
        raise SystemExit(1)
