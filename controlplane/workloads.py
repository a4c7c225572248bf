"""Workloads as the control plane keeps them: a pod template, a placement policy, a replica count.

This is the desired state failover recreates from; it is stored as JSON in the registry, so
every field has a plain-data form (``to_dict``/``from_dict``) and is validated on the way in.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from controlplane import limits
from controlplane.failbacks import Failback
from fedcore.backends.model import PAUSE_IMAGE, WorkloadSpec, check_name
from fedcore.nodes import Arch, TaintEffect
from fedcore.pods import Pod, Toleration, qos_of
from fedcore.resources import GpuRequest


class Spread(enum.Enum):
    NONE = "none"
    CLUSTERS = "clusters"
    REGIONS = "regions"


@dataclass(frozen=True, slots=True)
class Template:
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""
    archs: tuple[str, ...] = ()
    tolerations: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect); "" = any
    node_selector: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    priority: int = 0
    image: str = PAUSE_IMAGE
    qos: str = "online"
    """``online`` (latency-sensitive: never on reclaimed capacity) or ``batch`` (best-effort: may be suppressed, preempted)."""

    def __post_init__(self) -> None:
        if min(self.cpu_milli, self.memory_mib, self.gpus) < 0:
            raise ValueError("pod requests must be non-negative")
        qos_of(self.qos)
        limits.count("pod cpu_milli", self.cpu_milli, 0, limits.MAX_CPU_MILLI)
        limits.count("pod memory_mib", self.memory_mib, 0, limits.MAX_MEMORY_MIB)
        limits.count("pod gpus", self.gpus, 0, limits.MAX_GPUS)
        limits.count("pod priority", self.priority, -limits.MAX_PRIORITY - 1, limits.MAX_PRIORITY)
        limits.text("pod gpu_model", self.gpu_model)
        limits.text("pod image", self.image, 512)
        limits.entries("pod archs", self.archs)
        limits.entries("pod tolerations", self.tolerations)
        for key, value, _effect in self.tolerations:
            limits.text("toleration key", key)
            limits.text("toleration value", value, limits.MAX_VALUE)
        limits.labels("pod node_selector", self.node_selector)
        known = {a.value for a in Arch}
        for arch in self.archs:
            if arch not in known:
                raise ValueError(f"unknown arch {arch!r}; choose from {', '.join(sorted(known))}")
        effects = {e.value for e in TaintEffect} | {""}
        for _key, _value, effect in self.tolerations:
            if effect not in effects:
                raise ValueError(f"unknown toleration effect {effect!r}")


@dataclass(frozen=True, slots=True)
class Policy:
    spread: Spread = Spread.NONE
    clusters: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    avoid_clusters: tuple[str, ...] = ()
    cluster_labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    movable: bool = True
    max_per_cluster: int = 0
    home_region: str = ""
    failback: Failback = Failback()
    group: str = ""
    """Workloads of one group fail back together, in one round, once every member's home is ready ("" = alone)."""

    def __post_init__(self) -> None:
        if self.group:
            check_name("group", self.group)
        for what, names in (("clusters", self.clusters), ("regions", self.regions), ("avoid_clusters", self.avoid_clusters)):
            limits.entries(f"policy {what}", names, limits.MAX_LIST)
            for name in names:
                limits.text(f"policy {what} entry", name)
        limits.labels("policy cluster_labels", self.cluster_labels)
        limits.text("policy home_region", self.home_region)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    replicas: int
    template: Template
    policy: Policy = Policy()
    stateful: bool = False
    """Its replicas write a volume: a migration hands the state over (fence, checkpoint, restore: controlplane.handoffs)."""

    def __post_init__(self) -> None:
        check_name("workload", self.name)
        if not 1 <= self.replicas <= 10_000:
            raise ValueError(f"workload {self.name}: replicas must be 1..10000, got {self.replicas}")
        limits.count("max_per_cluster", self.policy.max_per_cluster, 0, 10_000)

    def pod(self, index: int) -> Pod:
        """The scheduling view of one replica (the cluster-level filters and scores read it)."""
        t = self.template
        tolerations = tuple(
            Toleration(k, v or None, TaintEffect(e) if e else None) for k, v, e in t.tolerations
        )
        return Pod(
            f"{self.name}-{index}", t.cpu_milli, t.memory_mib, gpu=GpuRequest(t.gpus, 1000 if t.gpus else 0),
            gpu_model=t.gpu_model, priority=t.priority, qos=qos_of(t.qos), tolerations=tolerations,
            node_selector=dict(self.policy.cluster_labels), archs=frozenset(Arch(a) for a in t.archs),
            workload=self.name, max_per_node=self.policy.max_per_cluster or -1,
        )

    def spec(self, replicas: int, epoch: int, *, scheduler_name: str) -> WorkloadSpec:
        """What one cluster is asked to run; ``scheduler_name`` says who binds its pods there ("" = kube-scheduler).

        The scheduler name has no default on purpose: a re-creation that forgot it (a restore, a take-over)
        sent the pods to kube-scheduler instead of the agents. Every template field goes across; a test
        fails when a new one does not.
        """
        t = self.template
        return WorkloadSpec(
            self.name, replicas, t.cpu_milli, t.memory_mib, t.gpus, epoch, t.image, scheduler_name, node_selector=dict(t.node_selector),
            gpu_model=t.gpu_model, archs=t.archs, tolerations=t.tolerations,
            priority=t.priority, qos=t.qos,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["policy"]["spread"] = self.policy.spread.value
        out["policy"]["failback"] = self.policy.failback.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Workload:
        t, p = dict(d["template"]), dict(d["policy"])
        t["archs"] = tuple(t.get("archs", ()))
        t["tolerations"] = tuple(tuple(x) for x in t.get("tolerations", ()))
        p["spread"] = Spread(p.get("spread", "none"))
        p["failback"] = Failback.from_dict(p.get("failback"))  # absent in workloads stored before failback policies
        for key in ("clusters", "regions", "avoid_clusters"):
            p[key] = tuple(p.get(key, ()))
        return cls(d["name"], int(d["replicas"]), Template(**t), Policy(**p), bool(d.get("stateful", False)))
