"""The registry: clusters, workloads (desired state), placements and planner decisions, in SQLite.

Placements say how many replicas of a workload a cluster should run, at which fencing epoch,
and in which state (``placed``, ``stale`` = left on a failed cluster, to remove when it returns).
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from controlplane.db import Database
from controlplane.workloads import Workload
from fedcore.backends.model import check_name


class BackendKind(enum.Enum):
    TWIN = "twin"
    KUBERNETES = "kubernetes"


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

    def __post_init__(self) -> None:
        check_name("cluster", self.name)
        if not self.region:
            raise ValueError(f"cluster {self.name}: a region is required")
        if self.backend is BackendKind.KUBERNETES and not self.kube_context:
            raise ValueError(f"cluster {self.name}: a kubernetes cluster needs a kubeconfig context")
        if self.backend is BackendKind.TWIN and self.twin_nodes < 1:
            raise ValueError(f"cluster {self.name}: a twin cluster needs at least one node")

    def to_json(self) -> str:
        d = asdict(self)
        d["backend"] = self.backend.value
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> ClusterSpec:
        d = json.loads(text)
        d["backend"] = BackendKind(d["backend"])
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


class Registry:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- clusters --------------------------------------------------------------------------
    def add_cluster(self, spec: ClusterSpec) -> None:
        with self.db.tx() as c:
            c.execute("INSERT OR REPLACE INTO clusters VALUES (?, ?)", (spec.name, spec.to_json()))

    def clusters(self) -> list[ClusterSpec]:
        with self.db.tx() as c:
            return [ClusterSpec.from_json(r["spec"]) for r in c.execute("SELECT spec FROM clusters ORDER BY name")]

    # -- workloads ---------------------------------------------------------------------------
    def put_workload(self, w: Workload) -> None:
        with self.db.tx() as c:
            c.execute(
                "INSERT INTO workloads VALUES (?, ?, 1) ON CONFLICT(name) DO UPDATE SET spec = excluded.spec",
                (w.name, json.dumps(w.to_dict())),
            )

    def workload(self, name: str) -> Workload | None:
        with self.db.tx() as c:
            row = c.execute("SELECT spec FROM workloads WHERE name = ?", (name,)).fetchone()
        return Workload.from_dict(json.loads(row["spec"])) if row else None

    def workloads(self) -> list[Workload]:
        with self.db.tx() as c:
            return [Workload.from_dict(json.loads(r["spec"])) for r in c.execute("SELECT spec FROM workloads ORDER BY name")]

    def drop_workload(self, name: str) -> None:
        with self.db.tx() as c:
            c.execute("DELETE FROM workloads WHERE name = ?", (name,))

    def bump_epoch(self, name: str) -> int:
        """The next fencing epoch for a workload (strictly greater than any it has used)."""
        with self.db.tx() as c:
            c.execute("UPDATE workloads SET epoch = epoch + 1 WHERE name = ?", (name,))
            row = c.execute("SELECT epoch FROM workloads WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise KeyError(name)
        return int(row["epoch"])

    # -- placements ----------------------------------------------------------------------------
    def set_placement(self, p: Placement) -> None:
        with self.db.tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO placements VALUES (?, ?, ?, ?, ?)",
                (p.workload, p.cluster, p.replicas, p.epoch, p.state.value),
            )

    def drop_placement(self, workload: str, cluster: str) -> None:
        with self.db.tx() as c:
            c.execute("DELETE FROM placements WHERE workload = ? AND cluster = ?", (workload, cluster))

    def placements(self, workload: str | None = None) -> list[Placement]:
        query, args = "SELECT * FROM placements", ()  # type: tuple[str, tuple[Any, ...]]
        if workload is not None:
            query, args = query + " WHERE workload = ?", (workload,)
        with self.db.tx() as c:
            rows = c.execute(query + " ORDER BY workload, cluster", args).fetchall()
        return [Placement(r["workload"], r["cluster"], r["replicas"], r["epoch"], PlacementState(r["state"])) for r in rows]

    # -- homes (failed-over replicas that may return) ---------------------------------------------
    def add_home(self, h: Home) -> None:
        with self.db.tx() as c:
            c.execute(
                "INSERT INTO homes VALUES (?, ?, ?, ?) ON CONFLICT(workload, home, away) DO UPDATE SET replicas = replicas + excluded.replicas",
                (h.workload, h.home, h.away, h.replicas),
            )

    def drop_home(self, h: Home) -> None:
        with self.db.tx() as c:
            c.execute("DELETE FROM homes WHERE workload = ? AND home = ? AND away = ?", (h.workload, h.home, h.away))

    def drop_homes(self, workload: str) -> None:
        with self.db.tx() as c:
            c.execute("DELETE FROM homes WHERE workload = ?", (workload,))

    def homes(self) -> list[Home]:
        with self.db.tx() as c:
            rows = c.execute("SELECT * FROM homes ORDER BY workload, home, away").fetchall()
        return [Home(r["workload"], r["home"], r["away"], r["replicas"]) for r in rows]

    # -- submit requests (idempotency) -------------------------------------------------------------
    def remember_request(self, request_id: str, workload: str, answer: dict[str, Any]) -> None:
        """The answer a submit gave; a retry with the same id gets it again."""
        with self.db.tx() as c:
            c.execute("INSERT OR REPLACE INTO requests VALUES (?, ?, ?)", (request_id, workload, json.dumps(answer)))

    def answered(self, request_id: str) -> dict[str, Any] | None:
        with self.db.tx() as c:
            row = c.execute("SELECT answer FROM requests WHERE id = ?", (request_id,)).fetchone()
        return dict(json.loads(row["answer"])) if row else None

    def forget_requests(self, workload: str) -> None:
        with self.db.tx() as c:
            c.execute("DELETE FROM requests WHERE workload = ?", (workload,))

    # -- decisions -------------------------------------------------------------------------------
    def record_decision(self, d: DecisionRecord) -> None:
        with self.db.tx() as c:
            c.execute(
                "INSERT INTO decisions (at, kind, workload, source, target, reasons) VALUES (?, ?, ?, ?, ?, ?)",
                (d.at, d.kind, d.workload, d.source, d.target, json.dumps(list(d.reasons))),
            )

    def decisions(self, limit: int = 100) -> list[DecisionRecord]:
        with self.db.tx() as c:
            rows = c.execute("SELECT * FROM decisions ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        return [DecisionRecord(r["at"], r["kind"], r["workload"], r["source"], r["target"], tuple(json.loads(r["reasons"]))) for r in rows]
