"""The registry: clusters, workloads (desired state), placements and planner decisions, in the store.

Placements say how many replicas of a workload a cluster should run, at which fencing epoch,
and in which state (``placed``, ``stale`` = left on a failed cluster, to remove when it returns).
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from controlplane import limits
from controlplane.store import Store, next_seq, seq_key
from controlplane.workloads import Workload
from fedcore.backends.model import check_name
from fedcore.kubeobjects import SCHEDULER_NAME


class BackendKind(enum.Enum):
    TWIN = "twin"
    KUBERNETES = "kubernetes"


class Placer(enum.Enum):
    """Who binds the control plane's pods in a cluster: its edge agents, or the cluster's kube-scheduler."""

    AGENTS = "agents"
    KUBE_SCHEDULER = "kube-scheduler"

    @property
    def scheduler_name(self) -> str:
        """The pods' ``spec.schedulerName`` ("" leaves Kubernetes' default, kube-scheduler)."""
        return SCHEDULER_NAME if self is Placer.AGENTS else ""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    region: str
    backend: BackendKind = BackendKind.TWIN
    kube_context: str = ""
    kubeconfig: str = ""
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    twin_nodes: int = 4
    twin_cpu_milli: int = 8000
    twin_memory_mib: int = 32768
    placer: Placer = Placer.AGENTS
    twin_gpus: int = 0
    """GPUs per twin node (RegisterCluster's twin_node_capacity.gpu_milli / 1000)."""

    def __post_init__(self) -> None:
        check_name("cluster", self.name)
        if not self.region:
            raise ValueError(f"cluster {self.name}: a region is required")
        limits.text(f"cluster {self.name}: region", self.region)
        limits.text(f"cluster {self.name}: kube_context", self.kube_context)
        limits.text(f"cluster {self.name}: kubeconfig", self.kubeconfig, limits.MAX_PATH)
        limits.labels(f"cluster {self.name}: labels", self.labels)
        limits.count(f"cluster {self.name}: twin_nodes", max(self.twin_nodes, 0), 0, limits.MAX_TWIN_NODES)
        limits.count(f"cluster {self.name}: twin_cpu_milli", self.twin_cpu_milli, 1, limits.MAX_CPU_MILLI)
        limits.count(f"cluster {self.name}: twin_memory_mib", self.twin_memory_mib, 1, limits.MAX_MEMORY_MIB)
        if self.backend is BackendKind.KUBERNETES and not self.kube_context:
            raise ValueError(f"cluster {self.name}: a kubernetes cluster needs a kubeconfig context")
        if self.backend is BackendKind.TWIN and self.twin_nodes < 1:
            raise ValueError(f"cluster {self.name}: a twin cluster needs at least one node")
        if not 0 <= self.twin_gpus <= 64:
            raise ValueError(f"cluster {self.name}: twin nodes hold 0..64 GPUs, not {self.twin_gpus}")

    def changes(self, new: ClusterSpec) -> list[str]:
        """What registering ``new`` over this spec would change, one ``field old -> new`` each (labels included)."""
        old_d, new_d = json.loads(self.to_json()), json.loads(new.to_json())
        return [f"{k} {old_d[k]!r} -> {new_d[k]!r}" for k in old_d if old_d[k] != new_d.get(k)]

    def to_json(self) -> str:
        d = asdict(self)
        d["backend"] = self.backend.value
        d["placer"] = self.placer.value
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> ClusterSpec:
        d = json.loads(text)
        d["backend"] = BackendKind(d["backend"])
        d["placer"] = Placer(d.get("placer", Placer.AGENTS.value))
        return cls(**d)


class PlacementState(enum.Enum):
    PLACED = "placed"
    STALE = "stale"  # on a cluster we failed away from: remove when it is reachable again


@dataclass(frozen=True, slots=True)
class Placement:
    workload: str
    cluster: str
    replicas: int
    epoch: int
    state: PlacementState = PlacementState.PLACED


@dataclass(frozen=True, slots=True)
class Home:
    """Replicas failed over from ``home`` to ``away``; they may return once ``home`` is healthy again."""

    workload: str
    home: str
    away: str
    replicas: int


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    at: float
    kind: str
    workload: str
    source: str
    target: str
    reasons: tuple[str, ...]


DECISIONS_KEEP = 20_000  # the newest decisions kept (a planner noting an unplaceable workload every tick adds ~5/s)


class Registry:
    """Desired state and its history as documents in a :class:`~controlplane.store.Store`.

    Keys: ``clusters/<name>``, ``workloads/<name>`` (spec and fencing epoch), ``placements/<workload>/<cluster>``,
    ``homes/<workload>/<home>/<away>``, ``requests/<request id>``, ``decisions/<seq>``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._specs: dict[str, tuple[dict[str, Any], ClusterSpec]] = {}
        self._parsed: dict[str, tuple[dict[str, Any], Workload]] = {}
        self._placed: dict[str, tuple[dict[str, Any], Placement]] = {}
        """Placement key -> (its document, the placement), reused while the store hands back the same document."""
        """Workload name -> the spec document last read and its Workload: a tick reads every workload several times,
        and building one (every field checked) costs far more than comparing its document with the last one."""

    # -- clusters --------------------------------------------------------------------------
    def add_cluster(self, spec: ClusterSpec) -> None:
        with self.store.tx() as t:
            t.put(f"clusters/{spec.name}", json.loads(spec.to_json()))

    def clusters(self) -> list[ClusterSpec]:
        with self.store.tx() as t:
            return [self._cluster(d) for _, d in t.scan("clusters/")]

    def scheduler_name(self, cluster: str) -> str:
        """``spec.schedulerName`` for the control plane's pods in ``cluster`` (its placer; unknown: the agents)."""
        with self.store.tx() as t:
            d = t.get(f"clusters/{cluster}")
        return (self._cluster(d).placer if d else Placer.AGENTS).scheduler_name

    def _cluster(self, d: dict[str, Any]) -> ClusterSpec:
        """The spec of a cluster document, built once per document (every tick and every submit reads them all)."""
        held = self._specs.get(str(d.get("name")))
        if held is not None and held[0] == d:
            return held[1]
        spec = ClusterSpec.from_json(json.dumps(d))
        self._specs[spec.name] = (d, spec)
        return spec

    # -- workloads ---------------------------------------------------------------------------
    def put_workload(self, w: Workload) -> None:
        with self.store.tx() as t:
            old = t.get(f"workloads/{w.name}")
            t.put(f"workloads/{w.name}", {"spec": w.to_dict(), "epoch": old["epoch"] if old else 1})

    def workload(self, name: str) -> Workload | None:
        with self.store.tx() as t:
            d = t.get(f"workloads/{name}")
        return self._workload(d["spec"]) if d else None

    def workloads(self) -> list[Workload]:
        with self.store.tx() as t:
            rows = t.scan("workloads/")
        found = [self._workload(d["spec"]) for _, d in rows]
        if len(self._parsed) > 2 * len(found) + 64:  # deleted workloads leave the memo now and then
            names = {w.name for w in found}
            self._parsed = {n: v for n, v in self._parsed.items() if n in names}
        return found

    def _workload(self, spec: dict[str, Any]) -> Workload:
        held = self._parsed.get(str(spec.get("name")))
        if held is not None and (held[0] is spec or held[0] == spec):  # the store may hand back the document it held
            return held[1]
        w = Workload.from_dict(spec)
        self._parsed[w.name] = (spec, w)
        return w

    def drop_workload(self, name: str) -> None:
        with self.store.tx() as t:
            t.delete(f"workloads/{name}")

    def bump_epoch(self, name: str) -> int:
        """The next fencing epoch for a workload (strictly greater than any it has used)."""
        with self.store.tx() as t:
            d = t.get(f"workloads/{name}")
            if d is None:
                raise KeyError(name)
            d["epoch"] = int(d["epoch"]) + 1
            t.put(f"workloads/{name}", d)
        return int(d["epoch"])

    # -- placements ----------------------------------------------------------------------------
    def set_placement(self, p: Placement) -> None:
        with self.store.tx() as t:
            t.put(f"placements/{p.workload}/{p.cluster}", {"replicas": p.replicas, "epoch": p.epoch, "state": p.state.value})

    def drop_placement(self, workload: str, cluster: str) -> None:
        with self.store.tx() as t:
            t.delete(f"placements/{workload}/{cluster}")

    def placements(self, workload: str | None = None) -> list[Placement]:
        with self.store.tx() as t:
            rows = t.scan("placements/" if workload is None else f"placements/{workload}/")
        out = []
        for key, d in rows:
            held = self._placed.get(key)
            if held is None or held[0] is not d:  # a held scan hands back the same document until it is written
                name, cluster = key.split("/")[1:3]
                held = self._placed[key] = (d, Placement(name, cluster, int(d["replicas"]), int(d["epoch"]), PlacementState(d["state"])))
            out.append(held[1])
        if workload is None and len(self._placed) > 2 * len(out) + 64:  # dropped placements leave the memo now and then
            keys = {key for key, _ in rows}
            self._placed = {k: v for k, v in self._placed.items() if k in keys}
        return out

    # -- homes (failed-over replicas that may return) ---------------------------------------------
    def add_home(self, h: Home) -> None:
        with self.store.tx() as t:
            key = f"homes/{h.workload}/{h.home}/{h.away}"
            t.put(key, {"replicas": int((t.get(key) or {"replicas": 0})["replicas"]) + h.replicas})

    def drop_home(self, h: Home) -> None:
        with self.store.tx() as t:
            t.delete(f"homes/{h.workload}/{h.home}/{h.away}")

    def drop_homes(self, workload: str) -> None:
        with self.store.tx() as t:
            for key, _ in t.scan(f"homes/{workload}/"):
                t.delete(key)

    def homes(self) -> list[Home]:
        with self.store.tx() as t:
            rows = t.scan("homes/")
        return [Home(*key.split("/")[1:4], int(d["replicas"])) for key, d in rows]

    # -- submit requests (idempotency) -------------------------------------------------------------
    def remember_request(self, request_id: str, workload: str, answer: dict[str, Any]) -> None:
        """The answer a submit gave; a retry with the same id gets it again."""
        with self.store.tx() as t:
            t.put(f"requests/{request_id}", {"workload": workload, "answer": answer})

    def answered(self, request_id: str) -> dict[str, Any] | None:
        with self.store.tx() as t:
            d = t.get(f"requests/{request_id}")
        return dict(d["answer"]) if d else None

    def forget_requests(self, workload: str) -> None:
        with self.store.tx() as t:
            for key, d in t.scan("requests/"):
                if d["workload"] == workload:
                    t.delete(key)

    # -- decisions -------------------------------------------------------------------------------
    def record_decision(self, d: DecisionRecord) -> None:
        with self.store.tx() as t:
            seq = next_seq(t, "decisions")
            t.put(seq_key("decisions/", seq), {"at": d.at, "kind": d.kind, "workload": d.workload, "source": d.source,
                                                "target": d.target, "reasons": list(d.reasons)})
            if seq > DECISIONS_KEEP:
                t.delete(seq_key("decisions/", seq - DECISIONS_KEEP))

    def decisions(self, limit: int = 100) -> list[DecisionRecord]:
        with self.store.tx() as t:
            rows = t.scan("decisions/", limit, reverse=True)
        return [DecisionRecord(d["at"], d["kind"], d["workload"], d["source"], d["target"], tuple(d["reasons"])) for _, d in rows]
