"""CLI: ``fedplane federated up|down|run`` (a long-lived loopback engine) and ``fedplane bench federated``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from fedcore.commands import fail
from fedcore.traces import TraceError
from federated.flower import regions

DEFAULT_WORKDIR = Path(".fedplane") / "federated"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fedplane" / "federated"


def _data(explicit: Path | None, clients: int, split: str, fleet: int, traces: Path | None) -> Path:
    """Prepared regional data: ``--data`` as it is when it holds some, else prepared there (or in a
    cache directory named for its spec) from the traces."""
    from federated.flower import datasets

    if explicit is not None and (explicit / datasets.SPEC).exists():
        return datasets.prepared(explicit, clients)
    root = explicit or _cache_dir() / f"openb-{split}-{clients}c-fleet{fleet or 'all'}"
    return datasets.prepare(root, datasets.DataSpec(clients, split, fleet, str(traces or "")))


@click.group()
def federated() -> None:
    """Flower federation of the placement policy on a real loopback Deployment Engine."""


@federated.command()
@click.option("--clients", type=click.IntRange(1, 32), default=3, show_default=True)
@click.option("--split", type=click.Choice(regions.SPLITS), default="app", show_default=True, help="How regions differ.")
@click.option("--fleet", type=click.IntRange(0), default=0, help="First N GPU nodes of the trace (0 = all).")
@click.option("--data", type=click.Path(path_type=Path), help="Prepared data directory, used as is when it holds data (default: a cache dir).")
@click.option("--traces", type=click.Path(path_type=Path), help="Traces directory.")
@click.option("--fault", "faults", multiple=True, metavar="K=SPEC", help="Make SuperNode K misbehave, e.g. 2=scale:-10.")
@click.option("--workdir", type=click.Path(path_type=Path), default=DEFAULT_WORKDIR, show_default=True)
def up(clients: int, split: str, fleet: int, data: Path | None, traces: Path | None, faults: tuple[str, ...], workdir: Path) -> None:
    """Start a SuperLink and one SuperNode per region in the background; prints the engine as JSON."""
    from federated.flower import datasets, engine
    from federated.flower import faults as faulting

    node_faults: dict[int, str] = {}
    for item in faults:
        index, _, spec = item.partition("=")
        if not index.isdigit() or int(index) >= clients:
            raise click.BadParameter(f"{item!r}: expected K=SPEC with K < {clients}", param_hint="--fault")
        faulting.Fault.parse(spec)
        node_faults[int(index)] = spec
    try:
        root = _data(data, clients, split, fleet, traces)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    eng = engine.start(workdir.resolve(), datasets.node_configs(root, node_faults), meta={"data": str(root), "clients": clients})
    click.echo(json.dumps({"superlink": eng.address, "workdir": str(eng.workdir), "processes": eng.groups}))


@federated.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=DEFAULT_WORKDIR, show_default=True)
def down(workdir: Path) -> None:
    """Stop the engine started by `up` (every process group) and verify nothing is left."""
    from federated.flower import engine

    click.echo(json.dumps({"stopped": engine.stop_recorded(workdir.resolve())}))


@federated.command()
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True)
@click.option("--local-epochs", type=click.IntRange(1), default=2, show_default=True)
@click.option("--strategy", type=click.Choice(["fedavg", "trimmed", "median", "krum"]), default="fedavg", show_default=True)
@click.option("--clip-norm", type=click.FloatRange(0), default=0.0, help="Absolute L2 bound on client updates (0 = off).")
@click.option("--clip-median-factor", type=click.FloatRange(0), default=0.0, help="Bound updates to K x the median update norm.")
@click.option("--deadline", type=click.FloatRange(min=1), default=60.0, show_default=True, help="Seconds a round waits for clients.")
@click.option("--target", type=click.FloatRange(0, 1), default=0.0, help="Stop once held-out quality reaches this.")
@click.option("--min-clients", type=click.IntRange(1), help="Clients a round needs connected (default: all).")
@click.option("--registry", type=click.Path(path_type=Path), help="Model registry directory (default: WORKDIR/registry).")
@click.option("--workdir", type=click.Path(path_type=Path), default=DEFAULT_WORKDIR, show_default=True)
def run(rounds: int, local_epochs: int, strategy: str, clip_norm: float, clip_median_factor: float, deadline: float,
        target: float, min_clients: int | None, registry: Path | None, workdir: Path) -> None:
    """Run a federation on the engine started by `up`; prints each round as JSON."""
    from federated.flower import engine

    try:
        eng = engine.attach(workdir.resolve())
    except engine.EngineError as exc:
        fail(str(exc))
    tag = f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    report = eng.workdir / "reports" / f"{tag}.jsonl"
    eng.run({
        "run-tag": tag, "num-rounds": rounds, "local-epochs": local_epochs, "strategy": strategy, "clip-norm": clip_norm,
        "clip-median-factor": clip_median_factor, "round-deadline-s": deadline, "target-quality": target,
        "min-clients": min_clients or int(eng.meta.get("clients", 2)), "data-dir": str(eng.meta["data"]),
        "registry-dir": str((registry or eng.workdir / "registry").resolve()), "report-file": str(report),
    }, timeout_s=rounds * (deadline + 60) + 120, tag=tag)
    for line in report.read_text().splitlines():
        click.echo(line)


