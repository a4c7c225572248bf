"""``fedplane federated rounds start|status|stop``: the learning loop as a service of the plane (:mod:`roundservice`).

``start`` launches the companion process on the plane's host and returns once its SuperLink listens (printing the
command each region's trainer joins with); ``status`` says what it is doing and what the last rounds decided;
``stop`` ends it. Torch and Flower load only in the companion, not in these commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from fedcore import reporting
from fedcore.commands import fail

_DIR = click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path),
                    help="The service's directory on the plane's host (state, report, registry, SuperLink logs).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
READY_S = 60.0


@click.group()
def rounds() -> None:
    """The learning loop as a service of the plane: rounds on a schedule or on demand (start, status, stop)."""


def _options(f: Any) -> Any:
    for option in reversed([
        _DIR,
        click.option("--models", "models_dir", required=True, type=click.Path(file_okay=False),
                     help="The plane's models directory (controlplane serve --models): where every decision goes."),
        click.option("--fleet", "fleet_file", required=True, type=click.Path(dir_okay=False),
                     help="The agents (JSON list: name, region, models, data, http, host): canaries are chosen from it and "
                          "each one's /metrics confirms what it runs."),
        click.option("--traces", default="", help="traces directory for the held-out judge (default: $FEDPLANE_TRACES)"),
        click.option("--rounds", "rounds_per_run", type=click.IntRange(1, 100), default=3, show_default=True, help="rounds per run"),
        click.option("--every", "every_s", type=click.FloatRange(0), default=0.0, show_default=True,
                     help="seconds between runs (0: one run, on demand, then the service ends)"),
        click.option("--deadline", type=click.FloatRange(1), default=30.0, show_default=True,
                     help="seconds a round waits for the regions' trainers"),
        click.option("--warmup", type=click.FloatRange(0), default=60.0, show_default=True,
                     help="the first run only: seconds the fleet places pods with the cold start before round 1 (its first experience)"),
        click.option("--min-clients", type=click.IntRange(1), default=2, show_default=True,
                     help="trainers connected before a round goes out (a round completes with whoever answers by its deadline)"),
        click.option("--canary", type=click.IntRange(1), default=1, show_default=True, help="agents that try a candidate first"),
        click.option("--host", default="127.0.0.1", show_default=True, help="where the SuperLink listens (the trainers' hosts reach it there)"),
        click.option("--insecure", is_flag=True,
                     help="serve the SuperLink without TLS and let any SuperNode join (trusted network only; default: TLS with the "
                          "service's own CA and only the fleet's regions' trainers, each with its key)"),
    ]):
        f = option(f)
    return f


def _overrides(models_dir: str, fleet_file: str, traces: str, deadline: float, min_clients: int, canary: int) -> dict[str, Any]:
    return {"shelf-dir": str(Path(models_dir).resolve()), "fleet-file": str(Path(fleet_file).resolve()), "traces": traces,
            "round-deadline-s": deadline, "min-clients": min_clients, "canary": canary}


@rounds.command()
@_options
@_JSON
def start(directory: Path, models_dir: str, fleet_file: str, traces: str, rounds_per_run: int, every_s: float, deadline: float,
          warmup: float, min_clients: int, canary: int, host: str, insecure: bool, as_json: bool) -> None:
    """Start the rounds service on this host (the plane's): a SuperLink the regions' trainers join, and the rounds."""
    from federated.flower import roundservice
    from federated.flower.loopconfig import read_fleet
    from federated.flower.runconfig import ConfigError

    if not Path(models_dir).is_dir():
        fail(f"--models {models_dir}: no such directory (the plane's: controlplane serve --models DIR creates it)")
    try:
        agents = read_fleet(Path(fleet_file))
    except ConfigError as exc:
        fail(f"--fleet: {exc}")
    if not agents:
        fail(f"--fleet {fleet_file}: lists no agents (their regions name the trainers the SuperLink admits)")
    directory.mkdir(parents=True, exist_ok=True)
    state = _state(directory)
    if state is not None and roundservice.alive(state):
        fail(f"a rounds service already runs in {directory} (pid {state['pid']}): stop it first")
    (directory / roundservice.STATE).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "fedplane", *roundservice.MARK.split(), "--dir", str(directory.resolve()), "--models", models_dir,
            "--fleet", fleet_file, "--traces", traces, "--rounds", str(rounds_per_run), "--every", str(every_s),
            "--deadline", str(deadline), "--warmup", str(warmup), "--min-clients", str(min_clients), "--canary", str(canary), "--host", host,
            *(["--insecure"] if insecure else [])]
    with (directory / "rounds.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline_at = time.monotonic() + READY_S
    while time.monotonic() < deadline_at:
        state = _state(directory)
        if state is not None and state.get("superlink"):
            break
        if process.poll() is not None:
            fail(f"the rounds service exited ({process.returncode}); see {directory / 'rounds.log'}")
        time.sleep(0.3)
    else:
        fail(f"the rounds service did not start its SuperLink within {READY_S:.0f} s; see {directory / 'rounds.log'}")
    superlink = state["superlink"]
    if as_json:
        reporting.emit_json({"pid": process.pid, "superlink": superlink, "directory": str(directory), "tls": state.get("tls", False),
                             "root_certificates": state.get("root_certificates"), "trainer_keys": state.get("trainer_keys", {})})
        return
    keys = state.get("trainer_keys") or {}
    channel = f"--root-certificates {state['root_certificates']} --auth-supernode-private-key KEY" if state.get("tls") else "--insecure"
    reporting.stderr.print(
        f"rounds service pid {process.pid}, SuperLink at {superlink}{' over TLS' if state.get('tls') else ' WITHOUT TLS'}. "
        f"Each region's trainer joins from its own host (copy the CA and its region's KEY there) with:\n"
        f"  flower-supernode {channel} --superlink {superlink} --node-config "
        "\"feed='http://PLANE:FEEDPORT' region='REGION' token-file='PATH'\""
        + "".join(f"\n  {region}: KEY {key}" for region, key in sorted(keys.items())))


@rounds.command()
@_DIR
@_JSON
def status(directory: Path, as_json: bool) -> None:
    """What the rounds service does now and what its last rounds decided."""
    from federated.flower import roundservice

    state = _state(directory)
    if state is None:
        fail(f"no rounds service was started in {directory}")
    live = roundservice.alive(state)
    recent = [{k: line.get(k) for k in ("round", "answered", "asked", "candidate", "canary", "model_version", "judge_metric", "round_wall_s")}
              for line in roundservice.last_rounds(directory, 5)]
    summary = {**state, "alive": live, "recent_rounds": recent}
    if as_json:
        reporting.emit_json(summary)
        return
    phase = state.get("phase") if live or state.get("phase") in ("done", "stopped") else f"{state.get('phase')} (process gone)"
    reporting.stderr.print(f"rounds service pid {state.get('pid')}: {phase}, run {state.get('run')}, SuperLink {state.get('superlink', '-')}")
    for line in recent:
        reporting.stderr.print(f"  round {line['round']}: {line['answered']}/{line['asked']} regions, candidate {line['candidate'] or '-'} "
                               f"{line['canary']}; fleet on {line['model_version']}")


@rounds.command()
@_DIR
@_JSON
def stop(directory: Path, as_json: bool) -> None:
    """Stop the rounds service: the run under way ends and its SuperLink stops (the plane's models stay as decided)."""
    from federated.flower import roundservice

    state = _state(directory)
    if state is None or not roundservice.alive(state):
        fail(f"no rounds service runs in {directory}")
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    for _ in range(150):
        if not roundservice.alive(state):
            break
        time.sleep(0.2)
    else:
        fail(f"the rounds service (pid {pid}) did not stop within 30 s")
    if as_json:
        reporting.emit_json({"stopped": pid})
    else:
        reporting.stderr.print(f"rounds service pid {pid} stopped")


@rounds.command("serve", hidden=True)
@_options
def serve(directory: Path, models_dir: str, fleet_file: str, traces: str, rounds_per_run: int, every_s: float, deadline: float,
          warmup: float, min_clients: int, canary: int, host: str, insecure: bool) -> None:
    """The companion process itself (``start`` launches it)."""
    from federated.flower import roundservice
    from federated.flower.loopconfig import read_fleet

    timeout = rounds_per_run * (deadline + 90) + 600
    regions = sorted({agent.region for agent in read_fleet(Path(fleet_file))})
    roundservice.Service(directory, _overrides(models_dir, fleet_file, traces, deadline, min_clients, canary), rounds_per_run,
                         every_s, host, timeout + warmup, warmup, regions, secure=not insecure).serve()


def _state(directory: Path) -> dict[str, Any] | None:
    from federated.flower import roundservice
    from federated.flower.engine import EngineError

    try:
        return roundservice.read_state(directory)
    except EngineError as exc:
        fail(str(exc))
