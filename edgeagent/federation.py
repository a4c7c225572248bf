"""The hook for federated learning: supervise a Flower SuperNode beside the agent (off by default).

The supervisor belongs to ``federated`` (``federated.flower.supervisor``: restart with
backoff, process-group stop); the agent imports it only when ``federation.enabled`` is
set, runs it as a task, and on shutdown sets its stop event and waits for the SuperNode
to be stopped. The SuperNode's ClientApp (the learning loop's, ``federated.flower.loopclient``)
reads the experience log the agent writes in ``<data_dir>`` and keeps its Flower state in
``<data_dir>/flwr``: nothing outside the data directory. The loop's bench and CLI run one
SuperNode per region instead (``fedplane.lab.loop.learning`` says why: its footprint).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from edgeagent.config import FederationSection

log = logging.getLogger("edgeagent.federation")


async def supervise(settings: FederationSection, data_dir: Path) -> None:
    """Keep the SuperNode running until cancelled; logs and returns if ``federated`` cannot provide one."""
    try:
        from federated.flower.supervisor import SuperNodeSpec, supervise_supernode
    except ImportError as exc:
        log.error("federation is enabled but its supervisor is unavailable (%s); the agent runs without it", exc)
        return
    home = data_dir / "flwr"
    home.mkdir(parents=True, exist_ok=True)
    spec = SuperNodeSpec(superlink=settings.superlink, experience=data_dir, home=home,
                         backoff_base_s=settings.restart_after)
    stop = asyncio.Event()
    runner = asyncio.ensure_future(supervise_supernode(spec, stop))
    try:
        restarts = await asyncio.shield(runner)
        log.info("SuperNode supervisor ended after %d restarts", restarts)
    except asyncio.CancelledError:
        stop.set()
        await runner  # stops the SuperNode's process group before the agent exits
        raise
