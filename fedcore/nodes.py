"""Nodes as the scheduler sees them: capacity, architecture, labels, taints and placement in the topology."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from fedcore.resources import Resources


class Arch(enum.Enum):
    """CPU architectures an edge fleet mixes; armv7 has no onnxruntime wheel (heuristic scoring only)."""

    AMD64 = "amd64"
    ARM64 = "arm64"
    ARMV7 = "armv7"


class TaintEffect(enum.Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class Node:
    """A node's static description; what is free at a moment lives in the twin's node table or an agent's probe."""

    name: str
    cpu_milli: int
    memory_mib: int
    disk_mib: int = 0
    gpus: int = 0
    gpu_model: str = ""
    arch: Arch = Arch.AMD64
    cluster: str = "c0"
    zone: str = "z0"
    region: str = "r0"
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if min(self.cpu_milli, self.memory_mib, self.disk_mib, self.gpus) < 0:
            raise ValueError(f"node {self.name}: capacities must be non-negative")

    @property
    def capacity(self) -> Resources:
        return Resources(self.cpu_milli, self.memory_mib, self.disk_mib, self.gpus * 1000)
