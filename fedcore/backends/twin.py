"""The embedded twin back end: a cluster held in memory, driven by an injected clock.

Pods move Pending -> Running (bound) -> Ready ``ready_delay_s`` after binding. Who binds is a
choice: ``Binder.INTERNAL`` places pending pods itself (best fit, standing in for the edge agents
until they run), ``Binder.EXTERNAL`` leaves them pending for agents to bind over the twin cluster
API. State only changes inside calls (``_advance(now)``), so a run is deterministic for a clock.

Faults: ``outage()`` stops the cluster (its pods stop running, its API is unreachable);
``partition()`` cuts its API off while its pods keep running; ``heal()`` ends either.
"""

from __future__ import annotations

import enum
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from fedcore.backends import errors, fencing
from fedcore.backends.model import (
    BindOutcome, BindResult, EventKind, EvictOutcome, EvictResult, NodeState, Phase, PodEvent, PodState, Workload, WorkloadSpec, check_name,
)
from fedcore.nodes import Arch, Node, TaintEffect
from fedcore.nodetable import NodeTable, OvercommitError, Placement
from fedcore.pods import Pod, QoS, Toleration, qos_of
from fedcore.resources import GpuRequest
from fedcore.scheduling import profiles
from fedcore.scheduling.framework import Scheduler

Clock = Callable[[], float]
MAX_EVENTS = 10_000
F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """Serialise a public method: the control plane's tick, gRPC handlers and drills share a twin."""

    @functools.wraps(method)
    def wrapper(self: TwinCluster, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Binder(enum.Enum):
    INTERNAL = "internal"
    EXTERNAL = "external"


@dataclass(slots=True)
class _Pod:
    name: str
    workload: str
    epoch: int
    pod: Pod
    phase: Phase = Phase.PENDING
    placement: Placement | None = None
    bound_at: float = 0.0
    ready: bool = False
    seq: int = 0
    """Its place in creation order (the internal binder places pending pods in that order)."""
    booked: Pod | None = None
    """What its node's table holds for it: its request, less the CPU a batch pod took from reclaimed capacity."""

    def state(self, table: NodeTable, ready: bool | None = None) -> PodState:
        node = table.nodes[self.placement.node].name if self.placement else ""
        return PodState(self.name, self.workload, self.epoch, self.phase, self.ready if ready is None else ready, node,
                        self.pod.request, self.pod)


@dataclass(slots=True)
class SafetyCounters:
    """Refused binds, kept as evidence: a duplicate is a (pod, epoch) someone tried to bind twice."""

    duplicate_binds: int = 0
    stale_binds: int = 0
    released: dict[str, int] = field(default_factory=dict)
    """Pods unbound per node by a node-not-ready report (evictions agents caused)."""


def _ordinal(pod_name: str) -> int:
    return int(pod_name.rsplit("-", 1)[1])


def make_nodes(cluster: str, region: str, count: int, cpu_milli: int = 8000, memory_mib: int = 32768, gpus: int = 0) -> list[Node]:
    """A uniform set of nodes for a twin cluster (drills, ``controlplane serve --twin-clusters``)."""
    return [
        Node(f"{cluster}-n{i}", cpu_milli, memory_mib, gpus=gpus, cluster=cluster, region=region, zone=f"{region}-z{i % 2}")
        for i in range(count)
    ]


class TwinCluster:
    """One embedded cluster implementing :class:`fedcore.backends.contract.ClusterBackend`."""

    def __init__(
        self, name: str, nodes: Sequence[Node], clock: Clock = time.monotonic, ready_delay_s: float = 0.5,
        binder: Binder = Binder.INTERNAL,
    ) -> None:
        check_name("cluster", name)
        self.name = name
        self.region = nodes[0].region if nodes else ""
        self.table = NodeTable(nodes)
        self.clock = clock
        self.ready_delay_s = ready_delay_s
        self.binder = binder
        self.scheduler = Scheduler(profiles.make("bestfit", profiles.ProfileContext()), self.table)
        self.workloads: dict[str, WorkloadSpec] = {}
        self.pods: dict[str, _Pod] = {}
        self._of: dict[str, dict[str, _Pod]] = {}
        """Per workload, its pods: a workload's reads and its ReplicaSet loop never scan the whole cluster."""
        self._moving: dict[str, _Pod] = {}
        """Pods the twin itself may move on (pending for the internal binder; bound, not yet ready): every API call
        advances these, not every pod of the cluster."""
        self._created = 0
        self._listed: tuple[NodeState, ...] = ()
        """The nodes as listed last (rebuilt when a node's readiness moves): a probe every tick lists the same
        objects, so a caller can tell an unchanged listing by identity."""
        self._ordinals: dict[str, int] = {}
        """Per workload, the number its next pod's name takes (names are never reused; see ``_reconcile``)."""
        self.reachable = True
        self.running = True
        self.safety = SafetyCounters()
        self._events: list[PodEvent] = []
        self._event_base = 0
        self._listeners: list[Callable[[], None]] = []
        """Called (under the twin's lock, from whichever thread changed it) after every event: a watch shell's wakeup."""
        self.lock = threading.RLock()

    # -- faults (the drill's and tests' hands; not part of the contract) -----------------
    @_locked
    def outage(self) -> None:
        """The cluster goes dark: API unreachable, every pod stops (its desired state survives)."""
        self.reachable = False
        self.running = False
        for p in self.pods.values():
            if p.placement is not None:
                self._unbind(p)
                self._emit(EventKind.MODIFIED, p)  # kept for watchers that return after the outage

    @_locked
    def partition(self) -> None:
        """Cut the cluster's API off from the caller; pods keep running and binding inside."""
        self.reachable = False

    @_locked
    def heal(self) -> None:
        self.reachable = True
        self.running = True

    # -- ClusterBackend ------------------------------------------------------------------------
    @_locked
    def create_workload(self, spec: WorkloadSpec) -> Workload:
        self._enter()
        if spec.name in self.workloads:
            raise errors.Conflict(self.name, f"workload {spec.name} already exists")
        self.workloads[spec.name] = spec
        self._reconcile(spec.name)
        self._advance()
        return self._workload(spec.name)

    @_locked
    def get_workload(self, name: str) -> Workload:
        self._enter()
        return self._workload(name)

    @_locked
    def list_workloads(self) -> list[Workload]:
        self._enter()
        return [self._workload(n) for n in sorted(self.workloads)]

    @_locked
    def scale_workload(self, name: str, replicas: int) -> Workload:
        self._enter()
        spec = self._spec(name)
        self.workloads[name] = replace(spec, replicas=replicas)
        self._reconcile(name)
        self._advance()
        return self._workload(name)

    @_locked
    def delete_workload(self, name: str, orphan_pods: bool = False) -> None:
        """Delete the workload and its pods; ``orphan_pods`` keeps the pods (to evict them one by one)."""
        self._enter()
        self._spec(name)
        del self.workloads[name]
        if not orphan_pods:
            self._reconcile(name)

    @_locked
    def list_pods(self, workload: str | None = None) -> list[PodState]:
        self._enter()
        return self.snapshot(workload)

    @_locked
    def list_nodes(self) -> list[NodeState]:
        self._enter()
        if len(self._listed) != len(self.table.nodes):
            self._listed = tuple(NodeState(n.name, n.capacity, bool(self.table.alive[i]), n.arch.value, dict(n.labels), spec=n)
                                 for i, n in enumerate(self.table.nodes))
        return list(self._listed)

    @_locked
    def bind_pod(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> BindResult:
        """Fenced bind (the contract in :class:`fedcore.backends.model.BindOutcome`).

        ``gpus`` names the devices the binder reserved in its own node table, so the twin books
        those rather than picking its own and the two books agree; empty lets the twin best-fit.
        ``reclaimed_milli``: CPU a batch pod takes from the node's reclaimed capacity (the plane's offer, as
        Koordinator's batch-cpu), booked outside the node's allocatable; an online pod may not.
        """
        self._enter()
        p = self.pods.get(pod)
        refused = fencing.fence(pod, node, epoch, None if p is None else fencing.Seen(
            p.epoch, self.table.nodes[p.placement.node].name if p.placement is not None else "", p.phase.value))
        if refused is not None:
            if refused.outcome is BindOutcome.STALE_EPOCH:
                self.safety.stale_binds += 1
            elif refused.outcome is BindOutcome.DUPLICATE:
                self.safety.duplicate_binds += 1
            return refused
        assert p is not None
        row = self.table.index.get(node)
        if row is None:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, f"node {node} does not exist")
        if not self.table.alive[row] or not self.running:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, f"node {node} is not ready")
        problem = self.table.device_problem(row, gpus) or _reclaim_problem(p.pod, reclaimed_milli)
        if problem:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, problem)
        try:
            self._bind(p, row, gpus, reclaimed_milli)
        except OvercommitError as exc:
            return BindResult(BindOutcome.REJECTED, node, p.epoch, str(exc))
        return BindResult(BindOutcome.BOUND, node, p.epoch)

    def watch_pods(self, timeout_s: float) -> Iterator[PodEvent]:
        """Blocking shell over :meth:`events_since` (polls every 20 ms of real time)."""
        for state in self.list_pods():
            yield PodEvent(EventKind.ADDED, state)
        cursor = self.cursor()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            events, cursor = self.events_since(cursor)
            yield from events
            time.sleep(0.02)

    # -- twin cluster API extras (agents: node status, pod completion, event cursor) -------------
    @_locked
    def cursor(self) -> int:
        return self._event_base + len(self._events)

    @_locked
    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` after every new event (it must only schedule work: it runs under the twin's lock, on the thread
        that changed the twin) until the returned function is called; a watch then need not poll to see a change."""
        self._listeners.append(wake)
        return lambda: self._forget(wake)

    @_locked
    def _forget(self, wake: Callable[[], None]) -> None:
        if wake in self._listeners:
            self._listeners.remove(wake)

    @_locked
    def events_since(self, cursor: int) -> tuple[list[PodEvent], int]:
        """Events after ``cursor`` and the new cursor; a cursor older than the kept window restarts at the oldest."""
        self._enter()
        start = max(0, cursor - self._event_base)
        return self._events[start:], self.cursor()

    @_locked
    def mark_node(self, node: str, ready: bool) -> int:
        """Node status from its agent. A node going not-ready frees its pods with a bumped epoch; returns how many."""
        self._enter()
        row = self.table.index.get(node)
        if row is None:
            raise errors.NotFound(self.name, f"node {node} does not exist")
        self.table.alive[row] = ready
        self._listed = ()
        moved = 0
        if not ready:
            for p in self.pods.values():
                if p.placement is not None and p.placement.node == row:
                    self._unbind(p)
                    p.epoch += 1
                    moved += 1
                    self._emit(EventKind.MODIFIED, p)
            if moved:
                self.safety.released[node] = self.safety.released.get(node, 0) + moved  # watchers (agents) learn it is pending at a new epoch
        self._advance()
        return moved

    @_locked
    def refence(self, pods: Iterable[str]) -> int:
        """A new epoch for each of ``pods`` still pending on no node: a claim or copy at the old epoch must lose (the
        plane's adoption window after a rebuild closed without an agent saying it runs them). Returns how many."""
        self._enter()
        moved = 0
        for name in pods:
            p = self.pods.get(name)
            if p is not None and p.phase is Phase.PENDING and p.placement is None:
                p.epoch += 1
                moved += 1
                self._emit(EventKind.MODIFIED, p)
        return moved

    @_locked
    def describe_node(self, node: str) -> Node:
        self._enter()
        row = self.table.index.get(node)
        if row is None:
            raise errors.NotFound(self.name, f"node {node} does not exist")
        return self.table.nodes[row]

    @_locked
    def complete_pod(self, pod: str, epoch: int, succeeded: bool) -> BindResult:
        self._enter()
        p = self.pods.get(pod)
        if p is None:
            raise errors.NotFound(self.name, f"pod {pod} does not exist")
        if epoch != p.epoch:
            self.safety.stale_binds += 1
            return BindResult(BindOutcome.STALE_EPOCH, epoch=p.epoch, reason=f"epoch {epoch} != current {p.epoch}")
        if p.phase in (Phase.SUCCEEDED, Phase.FAILED):  # a retry: the first call already ended it
            return BindResult(BindOutcome.REJECTED, epoch=p.epoch, reason=f"pod is {p.phase.value} already")
        self._unbind(p)
        p.phase = Phase.SUCCEEDED if succeeded else Phase.FAILED
        self._emit(EventKind.MODIFIED, p)
        return BindResult(BindOutcome.BOUND, epoch=p.epoch)

    @_locked
    def evict_pod(self, pod: str, epoch: int) -> EvictResult:
        """Delete the pod while it is at ``epoch`` (the twin has no disruption budgets to respect)."""
        self._enter()
        p = self.pods.get(pod)
        if p is None or p.phase in (Phase.SUCCEEDED, Phase.FAILED):
            return EvictResult(EvictOutcome.GONE, f"pod {pod} is gone or finished")
        if epoch != p.epoch:
            return EvictResult(EvictOutcome.STALE_EPOCH, f"pod is at epoch {p.epoch}, not {epoch}")
        self._unbind(p)
        del self.pods[pod]
        self._of.get(p.workload, {}).pop(pod, None)
        self._emit(EventKind.DELETED, p)
        return EvictResult(EvictOutcome.EVICTED)

    @_locked
    def snapshot(self, workload: str | None = None) -> list[PodState]:
        """Ground truth regardless of reachability (drills judge outcomes with it), read without driving the twin.

        A read changes nothing: no pending pod is bound, no event is emitted. Readiness is what the
        clock says (bound ``ready_delay_s`` ago), so a drill polling every 50 ms measures the run as it
        would go unobserved; only the API's callers (the control plane, agents) move the twin on.
        """
        now = self.clock()
        return [p.state(self.table, p.ready or (self.running and p.phase is Phase.RUNNING and now >= p.bound_at + self.ready_delay_s))
                for p in self.pods.values() if workload is None or p.workload == workload]

    # -- internals -----------------------------------------------------------------------------
    def _enter(self) -> None:
        if not self.reachable:
            raise errors.Unreachable(self.name, "API server unreachable")
        self._advance()

    def _spec(self, name: str) -> WorkloadSpec:
        spec = self.workloads.get(name)
        if spec is None:
            raise errors.NotFound(self.name, f"workload {name} does not exist")
        return spec

    def _workload(self, name: str) -> Workload:
        spec = self._spec(name)
        ready = sum(1 for p in self._of.get(name, {}).values() if p.ready)
        return Workload(spec, ready)

    def _reconcile(self, name: str) -> None:
        """Create or remove pods so the workload has exactly ``replicas`` (the twin's ReplicaSet controller).

        A pod name is never reused within the cluster (``{workload}-{n}``, n counting up across deletes and
        re-creations), as a ReplicaSet's random suffix is not: agents key placement claims by pod name, and a
        claim that completed is over for good, so a re-created pod under an old name would never be placed.
        Scaling down removes the newest pods first.
        """
        spec = self.workloads.get(name)
        want = spec.replicas if spec else 0
        members = self._of.setdefault(name, {})
        mine = sorted(members.values(), key=lambda p: _ordinal(p.name))
        for p in mine[want:]:
            self._unbind(p)
            del self.pods[p.name]
            del members[p.name]
            self._emit(EventKind.DELETED, p)
        for _ in range(want - len(mine)):
            assert spec is not None
            n = self._ordinals.get(name, 0)
            self._ordinals[name] = n + 1
            pod_name = f"{name}-{n}"
            pod = Pod(
                pod_name, spec.cpu_milli, spec.memory_mib, gpu=GpuRequest(spec.gpus, 1000 if spec.gpus else 0),
                gpu_model=spec.gpu_model, priority=spec.priority, qos=qos_of(spec.qos), workload=name, node_selector=dict(spec.node_selector),
                archs=frozenset(Arch(a) for a in spec.archs), max_per_node=spec.max_per_node,
                tolerations=tuple(Toleration(k, v or None, TaintEffect(e) if e else None) for k, v, e in spec.tolerations),
            )
            self._created += 1
            self.pods[pod_name] = members[pod_name] = self._moving[pod_name] = p = _Pod(pod_name, name, spec.epoch, pod, seq=self._created)
            self._emit(EventKind.ADDED, p)

    def _advance(self) -> None:
        if not self.running:
            return
        now = self.clock()
        internal = self.binder is Binder.INTERNAL
        for p in sorted(self._moving.values(), key=lambda p: p.seq):
            if self.pods.get(p.name) is not p:
                del self._moving[p.name]
                continue
            if p.phase is Phase.PENDING and p.placement is None and internal:
                chosen = self.scheduler.select(p.pod)
                if chosen is not None:
                    self._bind(p, chosen[0])
            if p.phase is Phase.RUNNING and not p.ready and now >= p.bound_at + self.ready_delay_s:
                p.ready = True
                self._emit(EventKind.MODIFIED, p)
            if not (p.phase is Phase.PENDING and p.placement is None and internal) and not (p.phase is Phase.RUNNING and not p.ready):
                self._moving.pop(p.name, None)

    def _bind(self, p: _Pod, row: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> None:
        p.booked = replace(p.pod, cpu_milli=p.pod.cpu_milli - reclaimed_milli) if reclaimed_milli else p.pod
        p.placement = self.table.allocate(p.booked, row, gpus or None)
        p.phase = Phase.RUNNING
        p.bound_at = self.clock()
        p.ready = self.ready_delay_s <= 0
        self._moving[p.name] = p
        self._emit(EventKind.MODIFIED, p)

    def _unbind(self, p: _Pod) -> None:
        if p.placement is not None:
            self.table.release(p.booked or p.pod, p.placement)
            p.placement = None
        if p.phase is Phase.RUNNING:
            p.phase = Phase.PENDING
        p.ready = False
        self._moving[p.name] = p

    def _emit(self, kind: EventKind, p: _Pod) -> None:
        self._events.append(PodEvent(kind, p.state(self.table)))
        if len(self._events) > MAX_EVENTS:
            drop = len(self._events) - MAX_EVENTS // 2
            del self._events[:drop]
            self._event_base += drop
        for wake in self._listeners:
            wake()


def _reclaim_problem(pod: Pod, reclaimed_milli: int) -> str:
    """Why ``pod`` may not take ``reclaimed_milli`` of reclaimed CPU ("" when it may)."""
    if not reclaimed_milli:
        return ""
    if pod.qos is not QoS.BEST_EFFORT:
        return f"pod {pod.uid or pod.workload} is online: only batch pods run on reclaimed capacity"
    if not 0 < reclaimed_milli <= pod.cpu_milli:
        return f"reclaimed_milli {reclaimed_milli} outside (0, the pod's CPU request {pod.cpu_milli}]"
    return ""
