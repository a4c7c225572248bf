"""``fedplane federated loop`` and ``fedplane bench loop``: the learning loop with real agents, as commands.

Kept apart from :mod:`edgeagent.commands` so an agent process (``fedplane agent``) never imports
the loop's orchestration; the ``federated`` group is federated's own, with ``loop`` added here
(the loop starts agents, which federated may not import).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from federated.flower.commands import federated
from federated.flower.learner import COLD_STARTS
from federated.flower.roundcommands import rounds

federated.add_command(rounds)


def progress(run: str, line: dict[str, Any], as_json: bool) -> None:
    """One line per round (and per start/baseline event) on stderr, so ``--json`` stdout stays one object."""
    if as_json:
        click.echo(f"[{run}] {json.dumps(line)}", err=True)
        return
    if line.get("event") == "start":
        click.echo(f"[{run}] cold start {line['model_version']}: {line['cold_start']}; {line['metric']} = {line['judge_metric']:.4f} "
                   f"({line['agents_on_version']}/{line['agents']} agents on it)", err=True)
    elif line.get("event") == "heuristics":
        click.echo(f"[{run}] heuristics (report seeds): " + ", ".join(f"{k} {v:.4f}" for k, v in line.items() if k != "event"), err=True)
    elif line.get("event") == "measured":
        click.echo(f"[{run}] on the report seeds {line['seeds']}: fleet per round " + ", ".join(f"{m:.4f}" for m in line["metrics"]), err=True)
    elif line.get("event") == "central":
        click.echo(f"[{run}] central (pooled experience): {line['central_metric']:.4f} on {line['examples']} rows", err=True)
    elif "round" in line:
        drill = " (rollback drill: a deliberately bad candidate)" if line.get("drill") else ""
        click.echo(f"[{run}] round {line['round']:>2}: {line['answered']}/{line['asked']} regions, "
                   f"candidate {line.get('candidate', '-')} canary {line.get('canary_metric', float('nan')):.4f} -> "
                   f"{line['canary']}; fleet {line['judge_metric']:.4f} (judged) on {line['model_version']} "
                   f"({line['agents_on_version']} agents confirm), {line['round_wall_s']:.1f} s{drill}", err=True)


def _run(coro: Any) -> Any:
    """Run the loop; a run that fails (a Flower process or the loop app) is a clear error naming its log, not a traceback.
    SIGTERM, as Ctrl-C, cancels it: its cleanup stops the Flower processes and agents it started."""
    from federated.flower.engine import EngineError
    from fedplane.lab.drills.commands import run_stoppable

    try:
        return run_stoppable(coro)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from None


def _settings(regions: int, agents_per_region: int, rounds: int, cold_start: str, rate: float, traces: str | None,
              canary_weight: float, transport: str) -> Any:
    from fedplane.lab.loop.learning import LoopSettings

    return LoopSettings(regions=regions, agents_per_region=agents_per_region, rounds=rounds, cold_start=cold_start,
                        rate=rate, traces=traces, canary_weight=canary_weight, transport=transport)


def _common(f: Any) -> Any:
    for option in reversed([
        click.option("--regions", type=click.IntRange(2, 6), default=3, show_default=True, help="regions (twin clusters, one SuperNode each)"),
        click.option("--agents-per-region", type=click.IntRange(2, 8), default=3, show_default=True),
        click.option("--rounds", type=click.IntRange(1, 50), default=10, show_default=True, help="rounds (the goal: reach the best heuristic within 10)"),
        click.option("--cold-start", type=click.Choice(COLD_STARTS), default="random", show_default=True,
                     help="where the policy starts (never a copy of the heuristic it is compared with)"),
        click.option("--rate", type=click.FloatRange(0.5, 50), default=5.0, show_default=True, help="pod arrivals per second per region"),
        click.option("--canary-weight", type=click.FloatRange(0.01, 1.0), default=0.2, show_default=True,
                     help="share of the canary agent's decisions (by pod uid) the candidate makes before promotion"),
        click.option("--traces", default=None, help="traces directory (default: $FEDPLANE_TRACES or ../shared/traces)"),
        click.option("--transport", type=click.Choice(["files", "network"]), default="files", show_default=True,
                     help="files: models copied into agents' directories, trainers read agents' logs in place; network: models "
                          "signed and fetched over the agents' link, experience shipped over it to the plane's inbox the trainers read"),
        click.option("--workdir", type=click.Path(path_type=Path), help="keep agents' data, registry and logs here (default: a temporary directory)"),
        click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object (progress goes to stderr)"),
    ]):
        f = option(f)
    return f


def _workdir(explicit: Path | None) -> tuple[Path, bool]:
    if explicit is not None:
        if explicit.exists() and any(explicit.iterdir()):
            raise click.BadParameter(f"{explicit} is not empty", param_hint="--workdir")
        explicit.mkdir(parents=True, exist_ok=True)
        return explicit.resolve(), False
    return Path(tempfile.mkdtemp(prefix="fedplane-loop-")), True


@federated.command("loop")
@_common
@click.option("--strategy", type=click.Choice(["pooled", "fedavg", "trimmed", "median", "krum"]), default="pooled", show_default=True,
              help="pooled: sum the regions' normal equations (the fit on their pooled rows); or a rule on their weights")
@click.option("--poison", default="", help="make the last region's trainer misbehave (e.g. scale:-10; see bench federated)")
def loop(regions: int, agents_per_region: int, rounds: int, cold_start: str, rate: float, canary_weight: float,
         traces: str | None, transport: str, workdir: Path | None, as_json: bool, strategy: str, poison: str) -> None:
    """Run the learning loop: agents' experience -> regional Flower training -> int8 ONNX -> canary -> rollout."""
    from federated.flower.faults import Fault
    from fedplane.lab.loop.learning import LoopFleet, event, rounds_of, run_federation

    try:
        Fault.parse(poison)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--poison") from None
    settings = _settings(regions, agents_per_region, rounds, cold_start, rate, traces, canary_weight, transport)
    root, temporary = _workdir(workdir)

    async def go() -> list[dict[str, Any]]:
        fleet = LoopFleet(settings, root)
        try:
            await fleet.start()
            overrides = {"strategy": strategy, "clip-median-factor": 1.0 if strategy not in ("pooled", "fedavg") else 0.0, "baselines": 0}
            return await run_federation(fleet, "loop", overrides, {regions - 1: poison} if poison else {},
                                        lambda line: progress("loop", line, as_json))
        finally:
            await fleet.stop()

    try:
        lines = _run(go())
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    start, done = event(lines, "start"), rounds_of(lines)
    summary = {"metric": start["metric"], "cold_start": start["cold_start"], "first_metric": event(lines, "end")["first_metric"],
               "final_metric": event(lines, "end")["final_metric"], "model_version": event(lines, "end")["model_version"],
               "promoted": sum(r["canary"] == "promoted" for r in done), "rolled_back": sum(r["canary"] == "rolled_back" for r in done),
               "rounds": done, "judge_seeds": start["judge_seeds"], "report_seeds": start["report_seeds"], "workdir": None if temporary else str(root)}
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(f"{summary['metric']}: {summary['first_metric']:.4f} (cold start) -> {summary['final_metric']:.4f} "
                   f"on {summary['model_version']}; {summary['promoted']} promoted, {summary['rolled_back']} rolled back")


@click.command("loop")
@_common
@click.option("--poison", default="scale:-10", show_default=True, help="what the poisoned region's trainer sends")
@click.option("--robust", type=click.Choice(["trimmed", "median", "krum"]), default="median", show_default=True)
@click.option("--png", type=click.Path(path_type=Path), default=Path("loop-curve.png"), show_default=True, help="where the curve goes")
@click.option("--hosts", type=click.Choice(["loopback", "netns"]), default="loopback", show_default=True,
              help="netns (root): the plane, every agent and every regional trainer on a network-namespace host of its own, "
                   "experience and models over the network (implies --transport network); a trainer host killed mid-round; "
                   "no poisoned run")
@click.option("--agent-cut", is_flag=True,
              help="with --hosts netns: also cut an agent's host off for two rounds; its experience arrives after the heal and "
                   "the plane's inbox holds each frame once (JSON: agent_cut). Promotions in those rounds wait for that agent")
def bench_loop(regions: int, agents_per_region: int, rounds: int, cold_start: str, rate: float, canary_weight: float,
               traces: str | None, transport: str, workdir: Path | None, as_json: bool, poison: str, robust: str, png: Path,
               hosts: str, agent_cut: bool) -> None:
    """The loop's must-show: clean loop vs best heuristic vs central, rollback drill, poisoned region; one JSON object."""
    from fedplane.lab.loop.learning import bench

    if hosts == "netns":
        _bench_hosts(_settings(regions, agents_per_region, rounds, cold_start, rate, traces, canary_weight, "network"),
                     workdir, png, as_json, agent_cut)
        return
    if agent_cut:
        raise click.UsageError("--agent-cut needs --hosts netns (hosts of their own to cut off)")
    settings = _settings(regions, agents_per_region, rounds, cold_start, rate, traces, canary_weight, transport)
    root, temporary = _workdir(workdir)
    try:
        result = _run(bench(settings, root, png.resolve(), poison, robust, lambda run, line: progress(run, line, as_json)))
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    _emit(result, as_json)


def _bench_hosts(settings: Any, workdir: Path | None, png: Path, as_json: bool, agent_cut: bool = False) -> None:
    """``bench loop --hosts netns``: :mod:`fedplane.lab.loop.hostsbench` inside a namespace fabric it builds and removes."""
    from fedplane.lab.drills import netns
    from fedplane.lab.loop.hostsbench import bench_hosts, hosts_for

    reason = netns.unavailable()
    if reason:
        raise click.ClickException(f"--hosts netns: {reason}")
    root, temporary = _workdir(workdir)
    try:
        with netns.Fabric(hosts_for(settings)) as fabric:
            fabric.enter()
            result = _run(bench_hosts(settings, fabric, root, png.resolve(), lambda run, line: progress(run, line, as_json), agent_cut))
    except netns.NetnsError as exc:
        raise click.ClickException(f"--hosts netns: {exc}") from None
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    _emit(result, as_json)


def _emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result))
    else:
        for key, value in result.items():
            click.echo(f"{key:>22}: {value}")
