"""Flower processes without Flower: commands, environment, process groups, and the SuperNode supervisor.

This module imports neither torch nor flwr, so the edge agent can call
:func:`supervise_supernode` to keep a ``flower-supernode`` running beside it, bound to its local
experience log (the learning loop's ClientApp, :mod:`federated.flower.loopclient`, trains on it): the
SuperNode restarts with exponential backoff when it exits, and stops cleanly
(SIGTERM to its whole process group, SIGKILL after a grace period) when the agent sets ``stop``.
Every Flower process runs in its own session, so stopping its group also ends the ClientApp
processes it spawned. The engine (:mod:`federated.flower.engine`) reuses the same pieces.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

OFFLINE_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "ORT_DISABLE_TELEMETRY": "1"}
TASK_POLL_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
"""A SuperNode's SuperExec looks for a message to run every 0.2 s instead of 1 s: up to 0.8 s less per round."""
STOP_GRACE_S = 5.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def flower_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for Flower processes: private ``FLWR_HOME``, no telemetry or update checks, and this
    interpreter's bin directory first on PATH (the SuperLink launches ``flower-superexec`` by name)."""
    env = dict(os.environ if base is None else base)
    env.update(OFFLINE_ENV)
    env.update(TASK_POLL_ENV)
    env["FLWR_HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def node_config_arg(values: Mapping[str, str | int | float]) -> str:
    """``--node-config`` text: ``key=value`` pairs, strings quoted (single quotes: TOML literal strings)."""
    def quote(value: str | float) -> str:
        if isinstance(value, str):
            if "'" in value or "\n" in value:
                raise ValueError(f"node-config value {value!r} cannot contain quotes or newlines")
            return f"'{value}'"
        return str(value)

    return " ".join(f"{key}={quote(value)}" for key, value in values.items())


def supernode_command(superlink: str, port: int, node_config: Mapping[str, str | int | float], security: Sequence[str] = ()) -> list[str]:
    """The ``flower-supernode`` command line (runtime dependency installation stays off); ``security``: the TLS and
    authentication flags (:meth:`federated.flower.linktls.LinkSecurity.supernode_args`), else ``--insecure``."""
    return [
        str(Path(sys.executable).parent / "flower-supernode"), *(security or ["--insecure"]), "--superlink", superlink,
        "--host", "127.0.0.1", "--port", str(port), "--node-config", node_config_arg(node_config),
    ]


def spawn(command: list[str], env: Mapping[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session (its own process group), output appended to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        return subprocess.Popen(command, env=dict(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = STOP_GRACE_S, reap: bool = True) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after ``grace_s``; returns when the group is gone.

    ``reap`` collects our own exited children in the group; pass False when asyncio's child
    watcher owns them (it reaps them itself, and would otherwise lose their exit status).
    """
    stop_groups([pgid], grace_s, reap)


def stop_groups(pgids: list[int], grace_s: float = STOP_GRACE_S, reap: bool = True) -> None:
    """:func:`stop_group` for several groups at once (signals go out together, so the waits overlap).

    Flower's SuperExec puts the apps it launches in a session of their own, so the groups of
    every descendant found at the start are stopped too; raises if any process survives SIGKILL.
    """
    live = sorted(set(pgids) | _descendant_groups(pgids))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in live:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            if reap:
                for pgid in live:
                    _reap(pgid)
            live = [pgid for pgid in live if group_alive(pgid)]
            if live:
                time.sleep(0.05)
        if not live:
            return
    raise RuntimeError(f"process groups {live} survived SIGKILL")


def _descendant_groups(pgids: list[int]) -> set[int]:
    """Process groups of every live descendant of the leaders ``pgids``."""
    groups: set[int] = set()
    for pgid in pgids:
        try:
            children = psutil.Process(pgid).children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            try:
                groups.add(os.getpgid(child.pid))
            except ProcessLookupError:
                pass
    return groups


def _reap(pgid: int) -> None:
    """Collect exited children of ours in the group, so they do not linger as zombies (which keep it 'alive')."""
    try:
        while True:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
            if pid == 0:
                return
    except ChildProcessError:
        return


def backoff_s(failures: int, base_s: float, cap_s: float) -> float:
    """Delay before restart number ``failures`` (1, 2, ...): base, 2x base, 4x base ... up to ``cap_s``."""
    return min(cap_s, base_s * 2.0 ** max(failures - 1, 0))


@dataclass(frozen=True, slots=True)
class SuperNodeSpec:
    """What an edge agent supervises: a SuperNode bound to its own experience log (one region of one agent)."""

    superlink: str
    """The SuperLink's Fleet address, ``host:port``."""
    experience: Path
    """The agent's data directory, where it writes its experience log (``federated.runtime.experience``)."""
    home: Path
    """A private ``FLWR_HOME`` (state, logs)."""
    partition_id: int = 0
    port: int = 0
    """ClientAppIo port; 0 picks a free one at each start."""
    extra_config: Mapping[str, str | int | float] = field(default_factory=dict)
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    healthy_after_s: float = 60.0
    """A SuperNode that ran this long before exiting restarts without accumulated backoff."""

    def command(self) -> list[str]:
        config = {"partition-id": self.partition_id, "agents": str(self.experience), **self.extra_config}
        return supernode_command(self.superlink, self.port or free_port(), config)


async def supervise_supernode(spec: SuperNodeSpec, stop: asyncio.Event) -> int:
    """Keep a ``flower-supernode`` for ``spec`` running until ``stop`` is set; returns how many times it restarted.

    The SuperNode restarts with exponential backoff after each exit; setting ``stop`` ends it
    (process group SIGTERM, then SIGKILL) and returns promptly, also during a backoff wait.
    """
    env = flower_env(spec.home)
    failures = restarts = 0
    while not stop.is_set():
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *spec.command(), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )
        exited = asyncio.ensure_future(process.wait())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            exited.cancel()
            await asyncio.to_thread(stop_group, process.pid, STOP_GRACE_S, False)
            await process.wait()
            return restarts
        stopping.cancel()
        await asyncio.to_thread(stop_group, process.pid, STOP_GRACE_S, False)  # ClientApps it left behind
        failures = 1 if time.monotonic() - started >= spec.healthy_after_s else failures + 1
        delay = backoff_s(failures, spec.backoff_base_s, spec.backoff_cap_s)
        log.warning("flower-supernode exited with %s; restarting in %.1f s", process.returncode, delay)
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
        except TimeoutError:
            restarts += 1
    return restarts
