"""``fedplane drill failover``: the failover drills as a command (loopback or network-namespace hosts, ``--ha``)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from fedcore import reporting
from fedcore.commands import check_plot_path, fail

T = TypeVar("T")


def run_stoppable(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where SIGTERM (``timeout``, a supervisor) cancels ``main``, so the agent processes it started are stopped."""

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await main

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        raise SystemExit(128 + signal.SIGTERM) from None


@click.group()
def drill() -> None:
    """Failover drills against a live control plane on twin clusters."""


@drill.command()
@click.option("--scenario", required=True, type=click.Choice(["cluster-outage", "region-partition", "agent-crash", "control-plane-crash",
                                                              "host-partition", "leader-crash", "leader-partition", "flapping", "stateful"]),
              help="flapping: a cluster down and up every 20 s (failback hysteresis); stateful: a key-value service's state handed over mid-write.")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="PNG timeline (default: drill-<scenario>.png).")
@click.option("--ha", "ha_members", default=0, show_default=True, type=click.IntRange(0, 9),
              help="control-plane-crash: crash real control-plane processes: N >= 2 replicated on a local 3-member etcd (the leader is killed or paused); "
                   "1: one process on SQLite, killed and restarted on the same file (0: the in-process drill). With --hosts netns, each member "
                   "on a host of its own with agents on others: control-plane-crash --ha 1, leader-crash and leader-partition --ha 3.")
@click.option("--hosts", default="loopback", show_default=True, type=click.Choice(["loopback", "netns"]),
              help="netns: the control plane and each agent in its own network namespace (root; a cut link is a real partition).")
@click.option("--loss", default=0.0, show_default=True, type=click.FloatRange(0.0, 0.5),
              help="Share of every real agent's gossip datagrams dropped (user-space loss injection).")
@click.option("--agents", default=5, show_default=True, type=click.IntRange(3, 250),
              help="--hosts netns scenarios (host-partition, agent-crash, the --ha ones): agent hosts, one agent each.")
@click.option("--pods", default=200, show_default=True, type=click.IntRange(10, 10000),
              help="--hosts netns scenarios: pods placed before the fault (a multiple of 10).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def failover(scenario: str, runs: int, seed: int, plot: str | None, ha_members: int, hosts: str, loss: float,
             agents: int, pods: int, as_json: bool) -> None:
    """Inject a fault N times and measure detection, recovery, success, pods lost and duplicated.

    Real ``fedplane agent`` processes (one per twin node) place the pods and report themselves. On ``--hosts netns``,
    host-partition and agent-crash hit one agent host of a cluster with the shipped timings (whole-host cut 20 s, or
    kill -9 and a restart on its data directory after 10 s)."""
    from fedplane.lab.drills import agentfleet, failoverdrill

    if scenario in ("leader-crash", "leader-partition") or (scenario == "control-plane-crash" and hosts == "netns"):
        if hosts != "netns" or not ha_members:
            fail(f"--scenario {scenario} runs with --hosts netns and --ha N (1: control-plane-crash, 3: the leader scenarios)")
        if pods % 10:
            fail(f"--pods must be a multiple of 10, got {pods}")
        _plane_faults(scenario, runs, seed, ha_members, agents, pods, as_json)
        return
    if scenario == "host-partition" or (scenario == "agent-crash" and hosts == "netns"):
        if hosts != "netns":
            fail("--scenario host-partition needs --hosts netns (a whole-host cut needs hosts of their own)")
        if pods % 10:
            fail(f"--pods must be a multiple of 10, got {pods}")
        _host_faults(scenario, runs, seed, agents, pods, as_json)
        return

    if not ha_members:
        check_plot_path(plot or f"drill-{scenario}.png")  # before the drill runs, not after minutes of it
    if ha_members:
        _ha_failover(scenario, runs, ha_members, as_json)
        return

    config = failoverdrill.DrillConfig()
    fleet = functools.partial(agentfleet.AgentFleet, loss=loss)
    kwargs: dict[str, Any] = {"source": fleet, "evidence": agentfleet.EVIDENCE}
    if scenario in ("flapping", "stateful"):
        _failback(scenario, runs, seed, fleet, as_json)
        return

    def run(config: failoverdrill.DrillConfig) -> tuple[dict[str, Any], list[failoverdrill.RunResult]]:
        with reporting.progress() as bar:
            task = bar.add_task(f"drill {scenario}", total=runs)
            return run_stoppable(failoverdrill.run_drill(scenario, runs, seed, config, on_run=lambda i, r: bar.advance(task), **kwargs))

    if hosts == "netns":
        from fedplane.lab.drills import netns

        reason = netns.unavailable()
        if reason:
            fail(f"--hosts netns: {reason}")
        nodes = [f"c{i}-n{j}" for i in range(config.clusters) for j in range(config.nodes_per_cluster)]
        try:
            with netns.Fabric(nodes) as fabric:
                fabric.enter()
                kwargs["source"] = functools.partial(fleet, hosts=fabric)
                summary, results = run(dataclasses.replace(config, host=netns.CONTROL_PLANE_ADDRESS))
        except netns.NetnsError as exc:
            fail(f"--hosts netns: {exc}")
        summary["hosts"] = netns.DESCRIPTION
    else:
        summary, results = run(config)
        summary["hosts"] = "loopback: the control plane and every agent on this host's loopback interface"
    summary["gossip_loss"] = loss
    try:
        summary["plot"] = str(failoverdrill.plot(results, scenario, plot or f"drill-{scenario}.png"))
    except RuntimeError as exc:
        summary["plot"] = f"not written: {exc}"
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table(f"fedplane drill failover --scenario {scenario}", [{"metric": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in summary.items()])


def _ha_failover(scenario: str, runs: int, members: int, as_json: bool) -> None:
    """``drill failover --scenario control-plane-crash --ha N``: leader crashes on a replicated control plane."""
    from controlplane.store import StoreError
    from fedplane.lab.drills import hadrill

    if scenario != "control-plane-crash":
        fail(f"--ha applies to --scenario control-plane-crash only, not {scenario}")
    with reporting.progress() as bar:
        task = bar.add_task(f"drill {scenario} --ha {members}", total=runs)
        try:
            summary, _ = hadrill.run_ha_drill(runs, hadrill.HaDrillConfig(members=members), on_run=lambda i, r: bar.advance(task))
        except (StoreError, RuntimeError) as exc:
            fail(str(exc))
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table(f"fedplane drill failover --scenario {scenario} --ha {members}",
                        [{"metric": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in summary.items()])


def _failback(scenario: str, runs: int, seed: int, fleet: Any, as_json: bool) -> None:
    """``drill failover --scenario flapping|stateful``: failback without flapping, state carried across clusters."""
    from fedplane.lab.drills import flappingdrill, statefuldrill

    drills: dict[str, Any] = {"flapping": flappingdrill.run_flapping, "stateful": statefuldrill.run_stateful}
    with reporting.progress() as bar:
        task = bar.add_task(f"drill {scenario}", total=runs)
        summary, _ = run_stoppable(drills[scenario](runs, seed, source=fleet, on_run=lambda i, r: bar.advance(task)))
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table(f"fedplane drill failover --scenario {scenario}",
                        [{"metric": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in summary.items()])


def _host_faults(scenario: str, runs: int, seed: int, agents: int, pods: int, as_json: bool) -> None:
    """``drill failover --hosts netns --scenario host-partition|agent-crash``: one agent host hit, shipped timings."""
    from fedplane.lab.drills import hostfaults, netns

    reason = netns.unavailable()
    if reason:
        fail(f"--hosts netns: {reason}")
    config = hostfaults.HostDrillConfig(agents=agents, pods=pods)
    try:
        with netns.Fabric(hostfaults.hosts_for(config)) as fabric, reporting.progress() as bar:
            fabric.enter()
            task = bar.add_task(f"drill {scenario}", total=runs)
            summary, _ = run_stoppable(hostfaults.run_host_drill(scenario, runs, seed, config, fabric, netns.CONTROL_PLANE_ADDRESS,
                                                                 on_run=lambda i, r: bar.advance(task)))
    except netns.NetnsError as exc:
        fail(f"--hosts netns: {exc}")
    summary["hosts"] = netns.DESCRIPTION
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table(f"fedplane drill failover --hosts netns --scenario {scenario}",
                        [{"metric": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in summary.items()])


def _plane_faults(scenario: str, runs: int, seed: int, members: int, agents: int, pods: int, as_json: bool) -> None:
    """``drill failover --hosts netns --ha N --scenario control-plane-crash|leader-crash|leader-partition``."""
    from controlplane.store import StoreError
    from fedplane.lab.drills import netns, planefaults

    reason = netns.unavailable()
    if reason:
        fail(f"--hosts netns: {reason}")
    try:
        config = planefaults.PlaneDrillConfig(members=members, agents=agents, pods=pods)
        with netns.Fabric(planefaults.hosts_for(config)) as fabric, reporting.progress() as bar:
            fabric.enter()
            task = bar.add_task(f"drill {scenario} --ha {members}", total=runs)
            summary, _ = run_stoppable(planefaults.run_plane_drill(scenario, runs, seed, config, fabric, on_run=lambda i, r: bar.advance(task)))
    except (netns.NetnsError, StoreError, RuntimeError, ValueError) as exc:
        fail(f"drill {scenario}: {exc}")
    summary["hosts"] = netns.DESCRIPTION
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.table(f"fedplane drill failover --hosts netns --ha {members} --scenario {scenario}",
                        [{"metric": k, "value": json.dumps(v) if isinstance(v, (dict, list)) else v} for k, v in summary.items()])
