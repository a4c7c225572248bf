"""Pods: what a unit of work asks for and which nodes it may run on."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from fedcore.nodes import Arch, Taint, TaintEffect
from fedcore.resources import GpuRequest, Resources


class QoS(enum.Enum):
    """Kubernetes QoS classes plus openb's latency-sensitive / best-effort labels."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BE"
    LATENCY_SENSITIVE = "LS"


QOS_CLASSES = {"online": QoS.LATENCY_SENSITIVE, "batch": QoS.BEST_EFFORT}
"""A workload's class as users name it: ``online`` (latency-sensitive; never placed on reclaimed capacity) or
``batch`` (best-effort; may run on what online pods reserve but do not use, suppressed or preempted first)."""


def qos_of(name: str) -> QoS:
    """The scheduling QoS of a class name; an unknown name is a clear error, not a default."""
    try:
        return QOS_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown QoS class {name!r}; choose from {', '.join(QOS_CLASSES)}") from None


def class_of(qos: QoS) -> str:
    """The class name of a QoS: best-effort is ``batch``, everything else is served as ``online``."""
    return "batch" if qos is QoS.BEST_EFFORT else "online"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Tolerates a taint with this key (any value when ``value`` is None) and effect (any when None)."""

    key: str
    value: str | None = None
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        return (
            self.key == taint.key
            and (self.value is None or self.value == taint.value)
            and (self.effect is None or self.effect == taint.effect)
        )


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod's scheduling-relevant spec. ``uid`` is unique within a run; ``workload`` groups replicas."""

    uid: str
    cpu_milli: int
    memory_mib: int
    disk_mib: int = 0
    gpu: GpuRequest = GpuRequest()
    gpu_model: str = ""
    priority: int = 0
    qos: QoS = QoS.BEST_EFFORT
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    archs: frozenset[Arch] = frozenset()
    workload: str = ""
    tenant: str = ""
    max_per_node: int = -1

    def __post_init__(self) -> None:
        if min(self.cpu_milli, self.memory_mib, self.disk_mib) < 0:
            raise ValueError(f"pod {self.uid}: requests must be non-negative")

    @property
    def request(self) -> Resources:
        """The scalar sum of what the pod asks for (GPU summed over devices)."""
        return Resources(self.cpu_milli, self.memory_mib, self.disk_mib, self.gpu.total_milli)
