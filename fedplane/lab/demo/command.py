"""``fedplane demo``: the control plane's demo as it is, and with ``--learn`` a few rounds of the learning loop.

The plain demo is the control plane's own command, untouched (same options, output and time);
``--learn`` runs the loop instead (:mod:`fedplane.lab.loop.learning`: 9 real agents in 3 regions, a Flower
SuperLink and one SuperNode per region, 3 rounds from a random cold start) and writes its report
(``learn-report.json``) and curve (``learn-curve.png``) into ``--out``. It lives here, on top,
because it composes the control plane's command with the agents' loop.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from fedplane.lab.demo.plain import demo as plain

LEARN_ROUNDS = 3


def _learn(out_dir: Path, seed: int, traces: str | None) -> None:
    from fedplane.lab.loop.learning import (
        LoopFleet,
        LoopSettings,
        event,
        plot,
        rounds_of,
        run_federation,
    )
    from fedplane.lab.loop.loopcmd import progress

    settings = LoopSettings(rounds=LEARN_ROUNDS, seed=seed, traces=traces)
    work = Path(tempfile.mkdtemp(prefix="fedplane-demo-learn-"))
    click.echo(f"fedplane demo --learn: 9 agents in 3 regions, a SuperLink and 3 SuperNodes, {LEARN_ROUNDS} rounds "
               "from a random cold start (a few minutes)", err=True)

    async def go() -> list[dict[str, Any]]:
        fleet = LoopFleet(settings, work)
        try:
            await fleet.start()
            return await run_federation(fleet, "demo", {"baselines": 1}, {}, lambda line: progress("learn", line, False))
        finally:
            await fleet.stop()

    try:
        lines = asyncio.run(go())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    start, heuristics, done = event(lines, "start"), event(lines, "heuristics"), rounds_of(lines)
    best = max((k for k in heuristics if k != "event"), key=lambda k: heuristics[k])
    report = {
        "metric": start["metric"], "metric_detail": start["metric_detail"], "cold_start": start["cold_start"],
        "first_metric": event(lines, "end")["first_metric"], "final_metric": done[-1]["metric"], "rounds": done,
        "heuristics": {k: v for k, v in heuristics.items() if k != "event"}, "best_heuristic": best,
        "best_heuristic_metric": heuristics[best], "central_metric": event(lines, "central")["central_metric"],
        "detail": {"best_heuristic": best},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "learn-report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, out_dir / "learn-curve.png")
    click.echo(f"{report['metric']}: {report['first_metric']:.4f} (cold start) -> {report['final_metric']:.4f} after "
               f"{len(done)} rounds; best heuristic {best} {report['best_heuristic_metric']:.4f}; central "
               f"{report['central_metric']:.4f}. Report and curve in {out_dir}/learn-report.json, learn-curve.png")


def _run(ctx: click.Context, learn: bool, **options: Any) -> None:
    if learn:
        _learn(Path(options["out_dir"]), options["seed"], options["traces"])
    else:
        ctx.invoke(plain, **options)


demo = click.Command(
    name="demo", callback=click.pass_context(_run), help=(plain.help or "") + (
        "\n\nWith --learn: the learning loop instead, a few rounds with 9 real agents, a Flower SuperLink and "
        "SuperNodes; its report and curve go to --out."),
    params=[*plain.params, click.Option(["--learn"], is_flag=True, help="Show the learning loop: a few rounds, report and PNG.")],
)
