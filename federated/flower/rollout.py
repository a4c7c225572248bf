"""Rolling a registry version out to agents: install, remove, and check what each agent says it runs.

An agent's models directory holds one artifact per version; its watcher loads the newest that
verifies (:mod:`edgeagent.policy`). Installing copies the version beside the directory and
renames it in (the watcher never sees half a model); rolling back removes the version, and the
watcher goes back to the newest remaining one — the previous model, which was never removed.
The truth is the agent's own ``/metrics`` (``fedplane_agent_model_info{artifact=...}``):
:func:`wait_for` polls it until every agent runs what it should. No torch, no flwr.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from federated.flower.loopconfig import Agent

_INFO = re.compile(r'^fedplane_agent_model_info\{[^}]*artifact="([^"]*)"[^}]*\} 1', re.M)
POLL_S = 0.25
SILENT_S = 2.0
"""An agent whose /metrics does not answer for this long is down: the rollout stops waiting for it."""


def install(agent: Agent, version: Path) -> None:
    """Put ``version`` (a registry directory) into the agent's models directory, atomically."""
    models = Path(agent.models)
    target = models / version.name
    if target.exists():
        return
    staging = models.parent / f".incoming-{version.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(version, staging)
    os.replace(staging, target)


def remove(agent: Agent, name: str) -> None:
    """Take version ``name`` out of the agent's models directory (it falls back to its previous model)."""
    target = Path(agent.models) / name
    if target.exists():
        trash = Path(agent.models).parent / f".removed-{name}-{os.getpid()}"
        os.replace(target, trash)
        shutil.rmtree(trash, ignore_errors=True)


def reset(agent: Agent) -> None:
    """Empty the agent's models directory (a new run's cold start replaces whatever it ran)."""
    models = Path(agent.models)
    for child in list(models.iterdir()) if models.is_dir() else []:
        remove(agent, child.name)


def running(agent: Agent, timeout_s: float = 1.0) -> str | None:
    """The artifact the agent says it runs (its /metrics), or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.http}/metrics", timeout=timeout_s) as reply:
            found = _INFO.search(reply.read().decode())
    except OSError:
        return None
    return found.group(1) if found else None


def wait_for(expected: Mapping[str, str], agents: Sequence[Agent], timeout_s: float) -> dict[str, str | None]:
    """Poll until every agent in ``expected`` (name -> artifact) reports it, or ``timeout_s`` passes, or the rest
    have not answered for :data:`SILENT_S` (down); returns what each agent last reported (a dead agent: None)."""
    seen: dict[str, str | None] = {}
    started = time.monotonic()
    pending = [a for a in agents if a.name in expected]
    while True:
        for agent in pending:
            seen[agent.name] = running(agent)
        silent = time.monotonic() - started >= SILENT_S
        pending = [a for a in pending if seen[a.name] != expected[a.name] and not (silent and seen[a.name] is None)]
        if not pending or time.monotonic() - started >= timeout_s:
            return seen
        time.sleep(POLL_S)
