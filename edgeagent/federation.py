"""The hook for federated learning: supervise a Flower SuperNode beside the agent (off by default).

The supervisor itself belongs to ``federated`` (the agent imports no Flower code); it
is looked up by name when ``federation.enabled`` is set, and awaited as a task
that the agent cancels on shutdown. Expected signature::

    async def supervise_supernode(superlink: str, experience_dir: Path, restart_after: float) -> None
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from edgeagent.config import FederationSection

log = logging.getLogger("edgeagent.federation")
SUPERVISOR = "federated.supervising:supervise_supernode"


async def supervise(settings: FederationSection, experience_dir: Path) -> None:
    """Run the SuperNode supervisor until cancelled; logs and returns if ``federated`` provides none."""
    module_name, _, attr = SUPERVISOR.partition(":")
    try:
        supervisor = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        log.error("federation is enabled but %s is not available (%s); the agent runs without it", SUPERVISOR, exc)
        return
    await supervisor(settings.superlink, experience_dir, settings.restart_after)
