"""The twin's sub-commands: ``fedplane sim`` and ``fedplane bench schedule``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from fedcore import reporting
from fedcore.nodetable import NodeTable
from fedcore.scheduling import profiles
from fedcore.traces import TraceError, dlrm, locate, openb, synthetic
from fedcore.twin import submission
from fedcore.twin.faults import Fault
from fedcore.twin.replay import Replay, ReplayResult

F = TypeVar("F", bound=Callable[..., Any])
PLOT_STEP = 0.005
"""Share of cluster GPU arrived between two points of the openb protocol's plot."""


class FiniteRange(click.FloatRange):
    """A :class:`click.FloatRange` that also refuses ``nan`` and ``inf`` (every comparison with NaN is false, so click's
    own range lets it through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def fail(message: str) -> NoReturn:
    """Print a clear error and exit non-zero (bad input is the user's to fix, not a traceback)."""
    reporting.error(message)
    sys.exit(2)


def traces_option(f: F) -> F:
    return click.option(
        "--traces", type=click.Path(file_okay=False), default=None,
        help="Traces folder (default: $FEDPLANE_TRACES, else ../shared/traces when present).",
    )(f)


def check_profile(name: str) -> str:
    if name not in profiles.available():
        fail(f"unknown profile {name!r}; choose from: {', '.join(profiles.available())}")
    return name


def check_plot_path(path: str | None) -> None:
    """Refuse a plot path that cannot be written before spending a replay on it."""
    if path is None:
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        fail(f"--plot {path}: is a directory; name a .png file")
    if not folder.is_dir():
        fail(f"--plot {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        fail(f"--plot {path}: folder {folder} is not writable")


def plot_protocol(curve: list[tuple[float, dict[str, float]]], profile: str, path: str) -> Path:
    """The openb protocol's picture: allocation ratios as the submitted GPU share grows."""
    arrived = [100.0 * share for share, _ in curve]
    return reporting.plot_series(
        path, f"openb protocol ({profile}): allocation as GPU demand arrives", arrived,
        {f"{kind} allocated": [ratios[kind] for _, ratios in curve] for kind in ("gpu", "cpu", "mem")},
        "arrived GPU demand, % of cluster GPU", ylabel="share of cluster capacity allocated",
    )


def plot_replay(result: ReplayResult, path: str, faults: Sequence[Fault] = ()) -> Path:
    """Allocation and pending pods over simulated time, each fault's start and end marked."""
    tl = result.timeline
    hours = [t / 3600.0 for t in tl.t]
    marks = [(f.at / 3600.0, f"{f.kind.value} {f.target}") for f in faults]
    marks += [((f.at + f.duration) / 3600.0, f"{f.target} back") for f in faults if f.duration != float("inf")]
    return reporting.plot_series(
        path, f"twin replay ({result.profile}): allocation and pending over time", hours,
        {"cpu allocated": tl.cpu, "memory allocated": tl.mem, "gpu allocated": tl.gpu},
        "simulated hours", right={"pods pending": tl.pending}, right_label="pods pending",
        ylabel="share of cluster capacity allocated", marks=marks,
    )


@click.command()
@click.option("--nodes", "nodes_csv", type=click.Path(dir_okay=False), help="openb-format node list (default: the openb trace's).")
@click.option("--node-scale", default=1, show_default=True, type=click.IntRange(1, 64), help="Replicate the node list K times.")
@click.option("--clusters", default=1, show_default=True, type=click.IntRange(1, 1000), help="Deal nodes round-robin into this many clusters.")
@click.option("--regions", default=1, show_default=True, type=click.IntRange(1, 100), help="Clusters are dealt round-robin into regions.")
@click.option("--dlrm", "dlrm_csv", type=click.Path(dir_okay=False), help="Time-replay the DLRM trace (creations and deletions).")
@click.option("--pods", "pods_csv", type=click.Path(dir_okay=False), help="Run the openb submission-order protocol on this pod list.")
@click.option("--synthetic", "synthetic_pods", type=click.IntRange(1, 10_000_000), help="Time-replay N synthetic pods instead of a trace.")
@click.option("--profile", default="kube-default", show_default=True, help="Scheduling profile.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--arrived-load", default=1.0, show_default=True, type=float, help="openb protocol: read allocation at this share of cluster GPU arrived.")
@click.option("--fault", "faults", multiple=True, metavar="KIND:TARGET@AT[+DUR]", help="Inject a fault, e.g. cluster-outage:c1@3600+600 (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a PNG of allocation and pending over time.")
@traces_option
def sim(
    nodes_csv: str | None, node_scale: int, clusters: int, regions: int, dlrm_csv: str | None, pods_csv: str | None,
    synthetic_pods: int | None, profile: str, seed: int, arrived_load: float, faults: Sequence[str], as_json: bool,
    plot: str | None, traces: str | None,
) -> None:
    """Run one scenario on the digital twin and summarise it.

    With --dlrm (the default workload) or --synthetic: a discrete-event time replay with
    waits, departures and faults. With --pods: the openb submission-order protocol.
    """
    check_profile(profile)
    check_plot_path(plot)
    if sum(x is not None for x in (dlrm_csv, pods_csv, synthetic_pods)) > 1:
        fail("choose one workload: --dlrm, --pods or --synthetic")
    try:
        parsed = [Fault.parse(spec) for spec in faults]
        nodes = openb.load_nodes(locate.trace_file(nodes_csv, locate.OPENB_NODES, traces), node_scale, clusters, regions)
        if pods_csv is not None:
            if parsed:
                fail("faults apply to time replays (--dlrm or --synthetic), not to the openb protocol")
            curve: list[tuple[float, dict[str, float]]] = []

            def sample(arrived: float, table: NodeTable) -> None:
                if not curve or arrived - curve[-1][0] >= PLOT_STEP:
                    curve.append((arrived, table.alloc_ratios()))

            result = submission.run(nodes, openb.load_pods(pods_csv), profile, seed, arrived_load, sample if plot else None)
            summary: dict[str, Any] = {k: getattr(result, k) for k in result.__dataclass_fields__}
            if plot:
                summary["plot"] = str(plot_protocol(curve, profile, plot))
        else:
            instances = (
                synthetic.generate(synthetic_pods, seed) if synthetic_pods
                else dlrm.load(locate.trace_file(dlrm_csv, locate.DLRM, traces))
            )
            replay = Replay(nodes, instances, profile, seed, parsed)
            with reporting.progress() as bar:
                task = bar.add_task(f"replaying {len(instances)} pods", total=len(instances) + sum(i.deleted is not None for i in instances))
                replayed = replay.run(on_event=lambda _t: bar.advance(task))
            summary = {"nodes": len(nodes), **replayed.summary()}
            if plot:
                summary["plot"] = str(plot_replay(replayed, plot, parsed))
    except (TraceError, ValueError, RuntimeError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or plot}: {exc.strerror or exc}")
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table("fedplane sim", [{"metric": k, "value": v} for k, v in summary.items()])


