"""Rolling a registry version out to agents: install, remove, and check what each agent says it runs.

An agent's models directory holds one artifact per version; its watcher loads the newest that
verifies (:mod:`edgeagent.policy`). Installing copies the version beside the directory and
renames it in (the watcher never sees half a model); rolling back removes the version, and the
watcher goes back to the newest remaining one — the previous model, which was never removed.
A canary goes into the ``canary`` subdirectory with its weight (:mod:`federated.runtime.canary`,
read by the agent's watcher): the agent then scores that share of its decisions with it and says so.
:class:`Files` makes these moves for a whole fleet; :class:`Signed` makes the same decisions through the plane's
models directory instead, which agents fetch over their link (no file copied onto a board).
The truth is the agent's own ``/metrics`` (``fedplane_agent_model_info{artifact=...,canary=...}``):
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
from federated.runtime import canary

_INFO = re.compile(r'^fedplane_agent_model_info\{([^}]*)\} 1', re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')

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


def install_canary(agent: Agent, version: Path, weight: float) -> None:
    """Give ``version`` the ``weight`` share of the agent's decisions (replacing any canary it had), atomically."""
    models = Path(agent.models)
    staging = models.parent / f".incoming-canary-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(version, staging / version.name)
    (staging / canary.WEIGHT).write_text(f"{weight}\n")
    drop_canary(agent)
    os.replace(staging, models / canary.DIRECTORY)


def drop_canary(agent: Agent) -> None:
    """End the agent's canary: every decision goes back to its current model."""
    remove(agent, canary.DIRECTORY)


class Files:
    """The loop's decisions as files in every agent's models directory (one machine: the loop reaches them all)."""

    def start(self, fleet: Sequence[Agent], version: Path) -> None:
        """A cold start: every agent's directory emptied, then ``version`` in it."""
        for agent in fleet:
            reset(agent)
            install(agent, version)

    def canary(self, agents: Sequence[Agent], version: Path, weight: float) -> None:
        for agent in agents:
            install_canary(agent, version, weight)

    def promote(self, fleet: Sequence[Agent], canaries: Sequence[Agent], version: Path) -> None:
        for agent in fleet:
            install(agent, version)
        self.roll_back(canaries)

    def roll_back(self, canaries: Sequence[Agent]) -> None:
        for agent in canaries:
            drop_canary(agent)


class Signed:
    """The loop's decisions through the plane's models directory (:mod:`federated.flower.shelf`): signed, fetched by
    the agents over their link (an agent is ``<region>/<name>`` there: its cluster and node)."""

    def __init__(self, directory: Path) -> None:
        from federated.flower.shelf import ModelShelf

        self.shelf = ModelShelf(directory)

    def start(self, fleet: Sequence[Agent], version: Path) -> None:
        self.shelf.promote(version)

    def canary(self, agents: Sequence[Agent], version: Path, weight: float) -> None:
        self.shelf.start_canary(version, weight, [f"{a.region}/{a.name}" for a in agents])

    def promote(self, fleet: Sequence[Agent], canaries: Sequence[Agent], version: Path) -> None:
        self.shelf.promote(version)

    def roll_back(self, canaries: Sequence[Agent]) -> None:
        self.shelf.end_canary()


def make(shelf: Path | None) -> Files | Signed:
    """How the loop's decisions reach agents: the plane's models directory ``shelf``, else their own directories."""
    return Signed(shelf) if shelf is not None else Files()


def with_canary(current: str, candidate: str) -> str:
    """What :func:`running` reads from an agent on ``current`` canarying ``candidate``."""
    return f"{current}+{candidate}"


def reset(agent: Agent) -> None:
    """Empty the agent's models directory (a new run's cold start replaces whatever it ran)."""
    models = Path(agent.models)
    for child in list(models.iterdir()) if models.is_dir() else []:
        remove(agent, child.name)


def running(agent: Agent, timeout_s: float = 1.0) -> str | None:
    """The artifact the agent says it runs (its /metrics; ``current+candidate`` during a canary), or None when it
    does not answer."""
    try:
        with urllib.request.urlopen(f"http://{agent.host}:{agent.http}/metrics", timeout=timeout_s) as reply:
            found = _INFO.search(reply.read().decode())
    except OSError:
        return None
    if not found:
        return None
    labels = dict(_LABEL.findall(found.group(1)))
    artifact, trial = labels.get("artifact", ""), labels.get("canary", "")
    return with_canary(artifact, trial) if trial else artifact


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
