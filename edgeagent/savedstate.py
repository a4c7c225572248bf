"""What an agent keeps beside its claims journal so that it restarts without the back end or the control plane.

Two small files in the data directory, each replaced atomically (a crash leaves the old or the
new file, never a mix): the node description the probe gave last (an agent restarted while
the cluster is unreachable describes its node from it), and the last workload context the
control plane sent (:mod:`edgeagent.contextkeeping`: a restart while the plane is away scores
as its peers still do). The journal itself is the effect pipeline's (:mod:`edgeagent.committing`);
the shell (:mod:`edgeagent.daemon`) calls these at start and when a context arrives.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from fedapi import agentlink
from fedapi.workloadcontext import WorkloadContext
from fedcore.nodes import Node

from edgeagent import linkcodec
from edgeagent.clustercalls import BACKOFF_MAX
from edgeagent.clusters import ClusterUnavailable
from edgeagent.probes import NodeProbe
from edgeagent.contextkeeping import ContextKeeper

log = logging.getLogger("edgeagent")

NODE_FILE = "node.msgpack"
CONTEXT_FILE = "context.msgpack"
"""The last workload context from the control plane: an agent restarted while it is away scores as its peers still do."""


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def describe_node(probe: NodeProbe, data: Path) -> Node:
    """Ask the probe; fall back to the last description on disk, so an agent restarts offline."""
    saved = data / NODE_FILE
    backoff = 0.2
    while True:
        try:
            node = await probe.describe()
            atomic_write(saved, agentlink.encode(linkcodec.node_to_wire(node)))
            return node
        except ClusterUnavailable as exc:
            if saved.exists():
                try:
                    node = linkcodec.node_from_wire(agentlink.decode(saved.read_bytes()))
                except (ValueError, ClusterUnavailable) as bad:
                    log.error("the saved node description %s is unreadable (%s): waiting for the cluster", saved, bad)
                else:
                    log.warning("cluster unreachable (%s): using the saved node description", exc)
                    return node
            log.warning("cluster unreachable (%s): retrying", exc)
        await asyncio.sleep(backoff)
        backoff = min(BACKOFF_MAX, backoff * 2)


def save_context(data: Path, context: WorkloadContext) -> None:
    """Keep ``context`` for a restart; a failure to is logged (the restart would wait for the control plane's)."""
    try:
        atomic_write(data / CONTEXT_FILE, agentlink.encode(context.to_wire()))
    except OSError as exc:
        log.warning("could not save the workload context (a restart would wait for the control plane's): %s", exc)


def restore_context(data: Path, keeper: ContextKeeper) -> None:
    """Hand ``keeper`` the context saved before a restart, if one was saved and is readable."""
    saved = data / CONTEXT_FILE
    try:
        value = agentlink.decode(saved.read_bytes())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        log.warning("the saved workload context %s is unreadable (%s): waiting for the control plane's", saved, exc)
        return
    keeper.receive(value, str(saved))
