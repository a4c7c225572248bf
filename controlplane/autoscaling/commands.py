"""``fedplane bench autoscale``: controllers side by side on held-out real series."""

from __future__ import annotations

from pathlib import Path

import click

from controlplane.autoscaling.controllers import MAX_REPLICAS
from controlplane.cliclient import client_options, connect, plane_target, tls_files
from fedcore import reporting
from fedcore.commands import FiniteRange, fail


def _call(target: str, tls: object, method: str, request: object) -> object:
    """One unary call to the Autoscaler service; a gRPC error becomes a clear message and exit code 2."""
    import grpc

    from fedapi import autoscale_pb2_grpc

    conn = connect(plane_target(target), tls)  # type: ignore[arg-type]
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
              help="Demand to replay: alibaba2018-cpu, google2019-cpu, google2019-mem, azure2-cpu, dlrm-app_N, or a CSV file here "
                   "(one sample per line, at most 20,000): this command reads it and sends the samples.")
@click.option("--stride-s", type=FiniteRange(0, 86_400), default=0.0, help="Seconds between CSV samples (default 60).")
@click.option("--policy", type=click.Choice(["forecast_hpa", "hpa"]), default="forecast_hpa", show_default=True)
@click.option("--min", "min_replicas", type=click.IntRange(1, MAX_REPLICAS), default=1, show_default=True)
@click.option("--max", "max_replicas", type=click.IntRange(1, MAX_REPLICAS), default=100, show_default=True)
@click.option("--startup-s", type=FiniteRange(0, 86_400), default=60.0, show_default=True, help="A new pod's start-up time: how far ahead to forecast.")
@click.option("--peak-replicas", type=FiniteRange(0.1, MAX_REPLICAS), default=10.0, show_default=True,
              help="Scale demand so its usual peak needs this many pods at 100%.")
@click.option("--speed", type=FiniteRange(0.001, 1000), default=1.0, show_default=True, help="Series seconds replayed per second.")
@client_options
def enable(workload: str, series: str, stride_s: float, policy: str, min_replicas: int, max_replicas: int, startup_s: float,
           peak_replicas: float, speed: float, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Autoscale WORKLOAD from now on."""
    from controlplane.autoscaling import series as sr
    from fedapi import autoscale_pb2 as pb

    values: list[float] = []
    if not sr.packaged(series):  # a file here: its samples travel, never its path
        path = Path(series)
        try:
            values = sr.read_csv(path)
        except sr.SeriesError as exc:
            fail(str(exc))
        series = "".join(c if c.isprintable() else "?" for c in path.name)[:128] or "series"
    spec = pb.AutoscaleSpec(workload=workload, series=series, stride_s=stride_s, policy=policy, min_replicas=min_replicas,
                            max_replicas=max_replicas, startup_s=startup_s, peak_replicas=peak_replicas, speed=speed, values=values)
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
