"""``fedplane agent`` (the edge daemon) and ``fedplane bench agent``, as click commands.

The daemon's plain start skips click (see :mod:`edgeagent.entry`, which also pins
the environment before numpy or onnxruntime load); these commands give it the same
usage, help and errors as every other command.
"""

from __future__ import annotations

import json

import click

from edgeagent import config as agent_config
from edgeagent import entry


def _options_help() -> str:
    lines = ["\b", "Configuration keys (YAML; $VAR expanded from the environment):"]
    for name, text, default in agent_config.options():
        lines.append(f"  {name} = {default!r}")
        lines.append(f"      {text}")
    return "\n".join(lines)


@click.command(epilog=_options_help(), context_settings={"max_content_width": 120})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), required=True, help="agent.yaml to load")
@click.option("--check", is_flag=True, help="validate the configuration, load the policy model, say which, and exit")
def agent(config_path: str, check: bool) -> None:
    """Run the edge agent: gossip, placement claims, binding through the cluster back end."""
    try:
        config = agent_config.load(config_path)
    except agent_config.ConfigError as exc:
        raise click.UsageError(f"invalid configuration: {exc}") from None
    entry.run(config, config_path, check)


@click.command("agent")
@click.option("--agents", default=16, show_default=True, help="agent processes on loopback")
@click.option("--pods", default=1000, show_default=True, help="pods from the openb trace")
@click.option("--rate", default=10.0, show_default=True, help="pod arrivals per second")
@click.option("--life", default=6.0, show_default=True, help="mean pod lifetime in seconds (exponential)")
@click.option("--kill", default=2, show_default=True, help="agents SIGKILLed halfway through")
@click.option("--seed", default=1, show_default=True)
@click.option("--traces", default=None, help="traces directory (default: $FEDPLANE_TRACES or ../shared/traces)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="set an agent configuration key for every agent (e.g. gossip.retransmit_mult=2)")
@click.option("--scorer-selection/--no-scorer-selection", default=True, show_default=True,
              help="the control plane's per-cluster scorer selection (its worker process), as 'controlplane serve' runs it")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON object")
def bench_agent(agents: int, pods: int, rate: float, life: float, kill: int, seed: int, traces: str | None,
                overrides: tuple[str, ...], scorer_selection: bool, as_json: bool) -> None:
    """16 agent processes place trace pods through the twin service (a control plane process, over the twin
    link); footprint, latency and safety."""
    import asyncio

    from edgeagent.benching import BenchSettings, run_bench

    if not 0 <= kill < agents:
        raise click.UsageError("--kill must leave at least one live agent")
    import yaml

    settings: list[tuple[str, object]] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--set wants KEY=VALUE, got {item!r}")
        settings.append((key, yaml.safe_load(value)))
    result = asyncio.run(run_bench(BenchSettings(agents, pods, rate, life, kill, seed, traces, overrides=tuple(settings),
                                                     scorer_selection=scorer_selection)))
    if as_json:
        click.echo(json.dumps(result))
    else:
        for key, value in result.items():
            click.echo(f"{key:>24}: {value}")


@click.command("claims")
@click.option("--agents", default=64, show_default=True, type=click.IntRange(2, 1024), help="Agents, one node each.")
@click.option("--pods", default=10000, show_default=True, type=click.IntRange(1, 1_000_000), help="Pods arriving over the run.")
@click.option("--rate", default=100.0, show_default=True, type=click.FloatRange(min=0.01), help="Pod arrivals per simulated second.")
@click.option("--life", default=8.0, show_default=True, type=click.FloatRange(min=0.01), help="Mean pod lifetime, simulated seconds.")
@click.option("--seed", default=1, show_default=True, help="Seed of the workload and the network.")
@click.option("--oracle-variant", is_flag=True, help="Also run the CRDT-only simulation with a quorum oracle, labelled, for comparison.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON object.")
def bench_claims(agents: int, pods: int, rate: float, life: float, seed: int, oracle_variant: bool, as_json: bool) -> None:
    """Agents' own placement cores (edgeagent.placing) place pods through the claims CRDT: delta merges
    per second, delta vs full-state bytes per claim, and the safety counters (double bookings, over-commits,
    stale-epoch wins), on a seeded lossy network with an agent killed and restarted from its journal."""
    from rich.console import Console
    from rich.progress import Progress

    from edgeagent.claimsbench import ClaimsBench, run

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"{agents} agents, {pods} pods", total=1.0)
        report = run(ClaimsBench(agents, pods, seed, rate, life), lambda done: bar.update(task, completed=done))
        if oracle_variant:
            from crdt.commands import oracle_variant as crdt_oracle

            bar.update(task, description="oracle variant (CRDT only)")
            report["variants"] = {"crdt-sim-quorum-oracle": crdt_oracle(agents, pods, seed)}
    if as_json:
        click.echo(json.dumps(report))
    else:
        for key, value in report.items():
            click.echo(f"{key:>28}: {value}")
