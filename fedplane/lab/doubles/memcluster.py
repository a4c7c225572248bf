"""An in-memory cluster behind :class:`edgeagent.clusters.ClusterAPI`: the twin's rules, no network.

Unit tests drive agents against it directly; :mod:`fedplane.lab.doubles.linkharness` serves it
over the twin link to agent processes. It is also the ground truth a drill judges by: its
node table refuses any over-commit, its binds are fenced by epoch, and it keeps
the evidence (refused binds by reason, decision latencies).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from edgeagent.clusters import (
    BindOutcome,
    BindResult,
    ClusterUnavailable,
    EvictOutcome,
    EvictResult,
    Phase,
    PodUpdate,
    UnknownNode,
)
from fedcore.backends import fencing
from fedcore.nodes import Node
from fedcore.nodetable import NO_DEVICE, NodeTable, OvercommitError, Placement
from fedcore.pods import Pod, QoS


@dataclass(slots=True)
class _Pod:
    pod: Pod
    epoch: int = 1
    phase: Phase = Phase.PENDING
    placement: Placement | None = None
    pending_since: float = 0.0
    replaced: bool = False
    booked: Pod | None = None
    """What its node's table holds: the request less the CPU a batch pod took from reclaimed capacity."""


class Decision(NamedTuple):
    """One successful bind: how long the pod waited pending, and when (cluster clock)."""

    pod: str
    epoch: int
    seconds: float
    replaced: bool
    at: float


@dataclass(slots=True)
class Evidence:
    """What the cluster saw: refusals by reason and every successful bind."""

    duplicate_refusals: int = 0
    stale_refusals: int = 0
    capacity_refusals: int = 0
    evictions: int = 0
    decisions: list[Decision] = field(default_factory=list)


class InMemoryCluster:
    """One cluster's pods and nodes, fenced like the twin cluster API."""

    def __init__(self, nodes: Sequence[Node], clock: Callable[[], float] = time.monotonic) -> None:
        self.table = NodeTable(nodes)
        self.clock = clock
        self.pods: dict[str, _Pod] = {}
        self.reachable = True
        self.evidence = Evidence()
        self._watchers: set[asyncio.Queue[PodUpdate | None]] = set()
        self._listeners: list[Callable[[PodUpdate], None]] = []

    # -- the operator's and the drill's hands --------------------------------------------------
    def submit(self, pod: Pod) -> None:
        """A new pending pod (the control plane created it in this cluster)."""
        if pod.uid in self.pods:
            raise ValueError(f"pod {pod.uid} exists")
        self.pods[pod.uid] = p = _Pod(pod, pending_since=self.clock())
        self._emit(p)

    def finish(self, uid: str, succeeded: bool = True) -> bool:
        """The pod's work ended (as its kubelet would report); False if it was not running."""
        p = self.pods[uid]
        if p.phase is not Phase.RUNNING:
            return False
        self._release(p)
        p.phase = Phase.SUCCEEDED if succeeded else Phase.FAILED
        self._emit(p)
        return True

    def bound_node(self, uid: str) -> str:
        p = self.pods[uid]
        return self.table.nodes[p.placement.node].name if p.placement else ""

    def subscribe(self, listener: Callable[[PodUpdate], None]) -> None:
        """Call ``listener`` synchronously on every change (in-process drivers: simulations, the bench)."""
        self._listeners.append(listener)

    def overcommitted_nodes(self) -> list[str]:
        """Nodes whose bound pods exceed their capacity in any dimension or on any GPU device (should be none)."""
        t = self.table
        over = (t.cpu_used > t.cpu_cap) | (t.mem_used > t.mem_cap) | (t.disk_used > t.disk_cap)
        over |= ((t.gpu_free < 0) & (t.gpu_free != NO_DEVICE)).any(axis=1)
        return [t.nodes[i].name for i in over.nonzero()[0]]

    def close_watches(self) -> None:
        """Drop every watch connection (as an API server restart would)."""
        for queue in list(self._watchers):
            queue.put_nowait(None)

    # -- ClusterAPI ----------------------------------------------------------------------------
    async def watch(self) -> AsyncIterator[PodUpdate]:
        self._enter()
        queue: asyncio.Queue[PodUpdate | None] = asyncio.Queue()
        for p in list(self.pods.values()):
            queue.put_nowait(self._update(p))
        self._watchers.add(queue)
        try:
            while True:
                update = await queue.get()
                if update is None or not self.reachable:
                    raise ClusterUnavailable("watch closed by the cluster")
                yield update
        finally:
            self._watchers.discard(queue)

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> BindResult:
        self._enter()
        p = self.pods.get(pod)
        refused = fencing.fence(pod, node, epoch, None if p is None else fencing.Seen(
            p.epoch, self.table.nodes[p.placement.node].name if p.placement is not None else "", p.phase.value))
        if refused is not None:
            if refused.outcome is BindOutcome.STALE_EPOCH:
                self.evidence.stale_refusals += 1
            elif refused.outcome is BindOutcome.DUPLICATE:
                self.evidence.duplicate_refusals += 1
            return refused
        assert p is not None
        row = self.table.index.get(node)
        if row is None:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, f"node {node} does not exist")
        if not self.table.alive[row]:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, f"node {node} is not ready")
        problem = self.table.device_problem(row, gpus)
        if problem:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, problem)
        if reclaimed_milli and (p.pod.qos is not QoS.BEST_EFFORT or not 0 < reclaimed_milli <= p.pod.cpu_milli):
            return BindResult(BindOutcome.REJECTED, node, p.epoch, f"reclaimed_milli {reclaimed_milli}: batch pods only, within the request")
        p.booked = dataclasses.replace(p.pod, cpu_milli=p.pod.cpu_milli - reclaimed_milli)
        try:
            p.placement = self.table.allocate(p.booked, row, gpus or None)
        except OvercommitError as exc:
            self.evidence.capacity_refusals += 1
            return BindResult(BindOutcome.REJECTED, node, p.epoch, str(exc))
        p.phase = Phase.RUNNING
        now = self.clock()
        self.evidence.decisions.append(Decision(pod, p.epoch, now - p.pending_since, p.replaced, now))
        self._emit(p)
        return BindResult(BindOutcome.BOUND, node, p.epoch)

    async def evict(self, pod: str, epoch: int) -> EvictResult:
        """Delete the pod (an eviction without a controller to recreate it), only at ``epoch``."""
        self._enter()
        p = self.pods.get(pod)
        if p is None or p.phase in (Phase.SUCCEEDED, Phase.FAILED):
            return EvictResult(EvictOutcome.GONE, f"pod {pod} is gone or finished")
        if epoch != p.epoch:
            return EvictResult(EvictOutcome.STALE_EPOCH, f"pod is at epoch {p.epoch}")
        self._release(p)
        del self.pods[pod]
        self.evidence.evictions += 1
        update = self._update(p)
        self._emit_update(PodUpdate(update.pod, update.epoch, Phase.DELETED, ""))
        return EvictResult(EvictOutcome.EVICTED)

    async def report_node(self, node: str, ready: bool) -> int:
        self._enter()
        row = self.table.index.get(node)
        if row is None:
            raise ClusterUnavailable(f"node {node} is not part of this cluster")
        self.table.alive[row] = ready
        freed = 0
        if not ready:
            for p in self.pods.values():
                if p.placement is not None and p.placement.node == row:
                    self._release(p)
                    p.phase, p.epoch, p.replaced = Phase.PENDING, p.epoch + 1, True
                    p.pending_since = self.clock()
                    self._emit(p)
                    freed += 1
        return freed

    async def complete(self, pod: str, epoch: int, succeeded: bool) -> BindResult:
        self._enter()
        p = self.pods.get(pod)
        if p is None or epoch != p.epoch:
            return BindResult(BindOutcome.STALE_EPOCH, epoch=0 if p is None else p.epoch, reason="not the current epoch")
        if p.phase in (Phase.SUCCEEDED, Phase.FAILED):  # a retry: the first call already ended it
            return BindResult(BindOutcome.REJECTED, epoch=p.epoch, reason=f"pod is {p.phase.value} already")
        self.finish(pod, succeeded)
        return BindResult(BindOutcome.BOUND, epoch=p.epoch)

    async def describe_node(self, node: str) -> Node:
        self._enter()
        row = self.table.index.get(node)
        if row is None:
            raise UnknownNode(f"node {node} is not part of this cluster")
        return self.table.nodes[row]

    async def close(self) -> None:
        """Nothing to close: the cluster lives as long as its owner."""

    # -- internals -----------------------------------------------------------------------------
    def _enter(self) -> None:
        if not self.reachable:
            raise ClusterUnavailable("cluster API unreachable")

    def _release(self, p: _Pod) -> None:
        if p.placement is not None:
            self.table.release(p.booked or p.pod, p.placement)
            p.placement = None

    def _update(self, p: _Pod) -> PodUpdate:
        node = self.table.nodes[p.placement.node].name if p.placement else ""
        return PodUpdate(p.pod, p.epoch, p.phase, node)

    def _emit(self, p: _Pod) -> None:
        self._emit_update(self._update(p))

    def _emit_update(self, update: PodUpdate) -> None:
        for queue in self._watchers:
            queue.put_nowait(update)
        for listener in self._listeners:
            listener(update)
