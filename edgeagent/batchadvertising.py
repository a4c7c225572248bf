"""The node's batch capacity on Kubernetes: what the agent advertises so the kubelet admits the batch pods it places.

Batch pods ask Koordinator's ``kubernetes.io/batch-cpu`` and ``kubernetes.io/batch-memory`` instead of ``cpu`` and
``memory`` (:mod:`fedcore.backends.kubernetes`), so the kubelet classes them BestEffort (the group
:mod:`edgeagent.isolation` caps) and admits them against the node's status allocatable of those names. The kubelet keeps
such extended resources but never sets them; under Koordinator koordlet does, here the agent does
(:meth:`edgeagent.kube.KubeCluster.advertise_batch`).

The rule (:func:`batch_capacity`): batch-cpu is the node's allocatable CPU plus the plane's current reclaimed offer,
batch-memory its allocatable memory. The agent places a batch pod on its escrow (never more than allocatable, less what
online pods ask) plus the offer (:mod:`edgeagent.classfit`), so the batch pods it places never ask more than that: the
kubelet never refuses one. The agent's placement is the real fit; this is only the kubelet's admission ceiling.

Patched at start and when the offer changes (never per report), and every :data:`REFRESH_S` in case the kubelet
re-registered the node or its allocatable changed. A failure is logged and retried; it never stops the agent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, runtime_checkable

from fedcore.kubeobjects import MIB
from fedcore.resources import Resources

log = logging.getLogger("edgeagent.batchadvertising")

RETRY_S = 5.0
"""After a failed patch: the API server is away or refused; the offer keeps arriving meanwhile, the latest is sent."""
REFRESH_S = 300.0
"""Patched again this often even when the offer holds: a re-registered node starts without our resources."""


def batch_capacity(allocatable: Resources, reclaimed_milli: int) -> tuple[int, int]:
    """``(batch-cpu millicores, batch-memory bytes)`` for a node's allocatable and the plane's reclaimed offer."""
    return allocatable.cpu_milli + max(0, reclaimed_milli), allocatable.memory_mib * MIB


@runtime_checkable
class NodeStatusPatching(Protocol):
    """The back end's half (:class:`edgeagent.kube.KubeCluster`); raises on failure, returns what it set."""

    async def advertise_batch(self, node: str, reclaimed_milli: int) -> tuple[int, int]: ...


class BatchAdvertiser:
    """Keeps one node's advertised batch capacity following the plane's offer: :meth:`offer` per ack, :meth:`run` as a task."""

    def __init__(self, cluster: NodeStatusPatching, node: str, retry_s: float = RETRY_S, refresh_s: float = REFRESH_S) -> None:
        self.cluster, self.node = cluster, node
        self.retry_s, self.refresh_s = retry_s, refresh_s
        self.wanted = 0
        """The reclaimed offer to advertise (millicores); 0 until the plane's first offer."""
        self.advertised: tuple[int, int] | None = None
        """``(batch-cpu, batch-memory)`` last set on the node; None until the first patch succeeds."""
        self._sent: int | None = None
        self._changed = asyncio.Event()

    def offer(self, reclaimed_milli: int) -> None:
        """The offer of the plane's latest ack; a patch follows only when it differs from the one last sent."""
        self.wanted = max(0, reclaimed_milli)
        if self.wanted != self._sent:
            self._changed.set()

    async def run(self) -> None:
        """Patch now, then on every change (retrying failures after ``retry_s``) and every ``refresh_s``."""
        while True:
            want = self.wanted
            try:
                self.advertised = await self.cluster.advertise_batch(self.node, want)
            except Exception as exc:  # the API server away, RBAC missing, the node gone: say so, try again
                log.warning("node %s: batch capacity not advertised (retrying in %.0f s): %s", self.node, self.retry_s, exc)
                wait = self.retry_s
            else:
                self._sent, wait = want, self.refresh_s
                log.info("node %s advertises batch-cpu %dm, batch-memory %d bytes (reclaimed offer %dm)",
                         self.node, *self.advertised, want)
            self._changed.clear()
            if self.wanted != want and wait == self.refresh_s:
                continue  # the offer moved while the patch was under way
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except asyncio.TimeoutError:
                pass
