"""The objects a back end stores and reports: workload specs, pods, nodes and pod events.

A workload is Deployment-like: a name, a replica count, one pod template (requests) and a
fencing ``epoch`` that every pod it creates carries, so binds and runs from an older epoch
can be told apart from the current one after a failover.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from fedcore.nodes import Node
from fedcore.pods import Pod, qos_of
from fedcore.resources import Resources

PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
"""The image of a workload that names none: it holds its requests and does nothing."""
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_name(kind: str, name: str) -> None:
    """Kubernetes object names (RFC 1123 labels); the twin applies the same rule so both back ends agree."""
    if not DNS_LABEL.match(name):
        shown = repr(name) if len(name) <= 70 else f"{name[:64]!r}... ({len(name)} characters)"
        raise ValueError(f"{kind} name {shown} must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63)")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Desired state of a Deployment-like workload in one cluster."""

    name: str
    replicas: int
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    epoch: int = 1
    image: str = PAUSE_IMAGE
    scheduler_name: str = ""
    node_selector: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    gpu_model: str = ""
    archs: tuple[str, ...] = ()
    tolerations: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect); "" = any
    max_per_node: int = -1
    priority: int = 0  # the pods' scheduling priority (higher first); agents read it from every pod
    qos: str = "online"  # online (latency-sensitive) or batch (best-effort, may run on reclaimed capacity)

    def __post_init__(self) -> None:
        check_name("workload", self.name)
        qos_of(self.qos)
        if self.replicas < 0:
            raise ValueError(f"workload {self.name}: replicas must be >= 0")
        if min(self.cpu_milli, self.memory_mib, self.gpus) < 0:
            raise ValueError(f"workload {self.name}: requests must be non-negative")
        if self.epoch < 1:
            raise ValueError(f"workload {self.name}: epoch must be >= 1")

    @property
    def request(self) -> Resources:
        return Resources(self.cpu_milli, self.memory_mib, 0, self.gpus * 1000)


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload as a cluster reports it: its spec and how many replicas are ready."""

    spec: WorkloadSpec
    ready_replicas: int = 0


class Phase(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    workload: str
    epoch: int
    phase: Phase
    ready: bool = False
    node: str = ""
    request: Resources = Resources()
    spec: Pod | None = None  # the full scheduling spec where the back end knows it (the twin)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as a back end reports it; ``problem`` says why nothing may be placed on it (read, not fatal)."""

    name: str
    capacity: Resources
    ready: bool = True
    arch: str = "amd64"
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    problem: str = ""
    spec: Node | None = field(default=None, compare=False)
    """The full scheduling spec (taints, GPU devices and model) where the back end knows it."""


class EventKind(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class PodEvent:
    kind: EventKind
    pod: PodState


class BindOutcome(enum.Enum):
    """Expected results of a bind (values, not exceptions): only BOUND/ALREADY_BOUND place the pod.

    The fence, the same on every back end (one contract suite checks each):
    STALE_EPOCH when the named epoch is not the pod's (behind *or* ahead; ``epoch`` is the pod's),
    DUPLICATE when the (pod, epoch) is bound to another node (``node`` names it), REJECTED when
    the pod finished or is gone, or the node is unknown, not ready or has no room.
    """

    BOUND = "bound"
    ALREADY_BOUND = "already-bound"
    STALE_EPOCH = "stale-epoch"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class BindResult:
    outcome: BindOutcome
    node: str = ""
    epoch: int = 0
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND)


class EvictOutcome(enum.Enum):
    """Expected results of an eviction: every one but BLOCKED is final (retrying changes nothing)."""

    EVICTED = "evicted"
    GONE = "gone"  # already deleted or finished: nothing to stop (an eviction retried after a crash)
    STALE_EPOCH = "stale-epoch"  # the pod is at another epoch now: not the copy we meant to stop
    BLOCKED = "blocked"  # a PodDisruptionBudget forbids it now (429): retry later


@dataclass(frozen=True, slots=True)
class EvictResult:
    outcome: EvictOutcome
    reason: str = ""

    @property
    def final(self) -> bool:
        return self.outcome is not EvictOutcome.BLOCKED


def ready_capacity(nodes: list[NodeState]) -> Resources:
    """Total capacity of the ready, placeable nodes (a probe's view of what a cluster can hold)."""
    total = Resources()
    for n in nodes:
        if n.ready and not n.problem:
            total = total + n.capacity
    return total
