"""The Flower Deployment Engine on loopback: one SuperLink and N SuperNodes as real processes.

Everything runs offline under a private ``FLWR_HOME`` inside ``workdir``: telemetry and update
checks off, runtime dependency installation off, free ports chosen at start. Each process runs
in its own process group, and :meth:`Engine.stop` ends every group (ClientApp and ServerApp
processes included) and checks that none survives. ``engine.json`` in ``workdir`` records the
process groups so ``fedplane federated down`` can stop an engine started by another process.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from federated.flower import appdir, linktls, supervisor

STATE = "engine.json"
CONNECTION = "fedplane"


class EngineError(RuntimeError):
    """The engine could not start or a run failed: the message names the log to read."""


@dataclass
class Engine:
    """A running SuperLink and its SuperNodes."""

    workdir: Path
    port: int
    host: str = "127.0.0.1"
    """Where the SuperLink listens (its Fleet and Control APIs): loopback, or the plane's address when trainers run
    on hosts of their own."""
    groups: dict[str, int] = field(default_factory=dict)
    """Process name -> process group id (== the leader's pid)."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    """What ``fedplane federated run`` needs to know about this engine (e.g. its data directory)."""
    security: linktls.LinkSecurity | None = None
    """TLS and SuperNode authentication on the SuperLink (None: ``--insecure``, loopback labs)."""

    @property
    def home(self) -> Path:
        return self.workdir / "flwr-home"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        return supervisor.flower_env(self.home)

    def add_supernode(self, name: str, node_config: Mapping[str, str | int | float], wrap: Sequence[str] = ()) -> None:
        """Start a SuperNode; ``wrap`` runs it elsewhere (``ip netns exec HOST``: a trainer on a host of its own)."""
        security: list[str] = []
        if self.security is not None:
            self.register(name)
            security = self.security.supernode_args(name)
        command = supervisor.supernode_command(self.address, supervisor.free_port(), node_config, security)
        self._spawn(name, [*wrap, *command])

    def register(self, name: str) -> None:
        """Tell the SuperLink trainer ``name``'s public key (made the first time): only registered SuperNodes join."""
        assert self.security is not None
        public_key = linktls.node_keys(self.security, name)
        command = [str(Path(sys.executable).parent / "flwr"), "supernode", "register", str(public_key), CONNECTION]
        done = subprocess.run(command, check=False, env=self.env(), capture_output=True, text=True, timeout=60)
        if done.returncode != 0 and "already" not in (done.stdout + done.stderr).lower():
            raise EngineError(f"flwr supernode register {name} failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-300:]}")

    def run(self, overrides: Mapping[str, str | int | float | bool], timeout_s: float, tag: str = "run",
            app: appdir.App = appdir.PLACEMENT) -> str:
        """``flwr run`` the app with ``overrides`` and stream until it finishes; returns its output."""
        app_dir = appdir.write(self.workdir / app.name, app)
        config = appdir.write_overrides(self.workdir / f"{tag}.toml", overrides, app)
        command = [str(Path(sys.executable).parent / "flwr"), "run", str(app_dir), CONNECTION, "--stream", "--run-config", str(config)]
        try:
            done = subprocess.run(command, check=False, env=self.env(), capture_output=True, text=True, timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"flwr run {tag} did not finish within {timeout_s:.0f} s; logs in {self.workdir}") from exc
        output = done.stdout + done.stderr
        (self.workdir / f"{tag}.log").write_text(output)
        if done.returncode != 0 or "ERROR" in output:
            raise EngineError(f"flwr run {tag} failed (exit {done.returncode}); see {self.workdir / (tag + '.log')}")
        return output

    def stop(self) -> None:
        """Stop every process group at once and check that none survives."""
        supervisor.stop_groups(list(self.groups.values()))
        self.groups.clear()
        self.processes.clear()
        (self.workdir / STATE).unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, command: list[str]) -> None:
        process = supervisor.spawn(command, self.env(), self.workdir / "logs" / f"{name}.log")
        self.processes[name] = process
        self.groups[name] = process.pid
        self._save()

    def _save(self) -> None:
        state = {"port": self.port, "host": self.host, "groups": self.groups, "meta": self.meta,
                 "security": str(self.security.directory) if self.security else None}
        (self.workdir / STATE).write_text(json.dumps(state, indent=2) + "\n")


def write_connection(home: Path, address: str, security: linktls.LinkSecurity | None = None) -> None:
    """``$FLWR_HOME/config.toml``: the one SuperLink connection ``flwr run`` uses (TLS, verified with the service's CA,
    when ``security`` is given)."""
    home.mkdir(parents=True, exist_ok=True)
    channel = f'root-certificates = "{security.ca}"\n' if security else "insecure = true\n"
    (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\naddress = "{address}"\n{channel}')


def start(
    workdir: Path, node_configs: Sequence[Mapping[str, str | int | float]], meta: Mapping[str, Any] | None = None,
    ready_timeout_s: float = 60.0, host: str = "127.0.0.1", wraps: Sequence[Sequence[str]] = (), secure: bool = False,
) -> Engine:
    """Start a SuperLink on ``host`` and one SuperNode per entry of ``node_configs`` (the k-th behind ``wraps[k]`` when
    given: on its own host); returns once the SuperLink answers. ``secure``: TLS and SuperNode authentication, with a
    CA kept in ``workdir/tls`` (:mod:`federated.flower.linktls`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / STATE).exists():
        raise EngineError(f"{workdir / STATE} exists: an engine may be running there (run `fedplane federated down`)")
    security = linktls.prepare(workdir / "tls", host) if secure else None
    engine = Engine(workdir, supervisor.free_port(host), host, meta=dict(meta or {}), security=security)
    write_connection(engine.home, engine.address, security)
    try:
        engine._spawn("superlink", [
            str(Path(sys.executable).parent / "flower-superlink"), *(security.superlink_args() if security else ["--insecure"]),
            "--host", host, "--port", str(engine.port),
            "--database", str(workdir / "state.db"), "--disable-runtime-dependency-installation",
        ])
        wait_listening(engine, ready_timeout_s)
        for k, config in enumerate(node_configs):
            engine.add_supernode(f"supernode-{k}", config, wraps[k] if wraps else ())
    except BaseException:
        engine.stop()
        raise
    return engine


def wait_listening(engine: Engine, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.processes["superlink"].poll() is not None:
            raise EngineError(f"flower-superlink exited; see {engine.workdir / 'logs' / 'superlink.log'}")
        with socket.socket() as sock:
            if sock.connect_ex((engine.host, engine.port)) == 0:
                return
        time.sleep(0.2)
    raise EngineError(f"flower-superlink did not listen on {engine.address} within {timeout_s:.0f} s")


def attach(workdir: Path) -> Engine:
    """The engine recorded in ``workdir/engine.json`` (started by another process)."""
    try:
        state = json.loads((workdir / STATE).read_text())
        security = linktls.LinkSecurity(Path(state["security"])) if state.get("security") else None
        return Engine(workdir, int(state["port"]), str(state.get("host", "127.0.0.1")), {k: int(v) for k, v in state["groups"].items()},
                      meta=dict(state["meta"]), security=security)
    except FileNotFoundError:
        raise EngineError(f"no engine recorded in {workdir} (start one with `fedplane federated up`)") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise EngineError(f"{workdir / STATE}: unreadable ({exc})") from None


def stop_recorded(workdir: Path) -> list[str]:
    """Stop the engine recorded in ``workdir``; returns the names of the processes it stopped."""
    if not (workdir / STATE).exists():
        return []
    engine = attach(workdir)
    live = {name: pgid for name, pgid in engine.groups.items() if _is_flower(pgid)}
    supervisor.stop_groups(list(live.values()))
    (workdir / STATE).unlink()
    return sorted(live)


def _is_flower(pid: int) -> bool:
    """Guard against a recycled pid: only stop a group whose leader is still a Flower process."""
    try:
        return "flower-" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
