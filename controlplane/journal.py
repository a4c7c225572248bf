"""The migration journal: every migration's state, and an append-only log of each step's intent and result.

A step is written as ``intent`` before the executor acts and ``done`` after, in SQLite (WAL), so
after a crash the executor knows the last completed step of every migration and re-runs the
next one (steps are idempotent, so a step that did act before the crash is not doubled).
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, replace

from controlplane.db import Database


class MigrationState(enum.Enum):
    PLANNED = "planned"
    TARGET_CREATED = "target-created"
    TARGET_READY = "target-ready"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (MigrationState.DONE, MigrationState.FAILED, MigrationState.CANCELLED)


class Kind(enum.Enum):
    FAILOVER = "failover"    # source failed: recreate elsewhere with a bumped epoch
    REBALANCE = "rebalance"  # source overloaded: make-before-break
    MANUAL = "manual"
    RETURN = "return"        # back home after recovery


@dataclass(frozen=True, slots=True)
class Migration:
    id: str
    workload: str
    source: str
    target: str
    replicas: int       # replicas moved
    target_total: int   # replicas the target runs once done (it may already host some)
    epoch: int
    kind: Kind
    state: MigrationState = MigrationState.PLANNED
    attempts: int = 0
    next_at: float = 0.0
    error: str = ""
    reasons: tuple[str, ...] = ()
    created: float = 0.0
    updated: float = 0.0

    def moved(self, **changes: object) -> Migration:
        return replace(self, **changes)  # type: ignore[arg-type]


def new_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Entry:
    migration: str
    step: str
    phase: str
    detail: str
    at: float


class Journal:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, m: Migration) -> None:
        """Insert or update one migration."""
        with self.db.tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO migrations (id, workload, source, target, replicas, epoch, kind, state, target_total,"
                " attempts, next_at, error, reasons, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (m.id, m.workload, m.source, m.target, m.replicas, m.epoch, m.kind.value, m.state.value,
                 m.target_total, m.attempts, m.next_at, m.error, json.dumps(list(m.reasons)), m.created, m.updated),
            )

    def log(self, migration: str, step: str, phase: str, at: float, detail: str = "") -> None:
        with self.db.tx() as c:
            c.execute("INSERT INTO journal (migration, step, phase, detail, at) VALUES (?,?,?,?,?)", (migration, step, phase, detail, at))

    def entries(self, migration: str | None = None) -> list[Entry]:
        query, args = "SELECT * FROM journal", ()  # type: tuple[str, tuple[str, ...]]
        if migration:
            query, args = query + " WHERE migration = ?", (migration,)
        with self.db.tx() as c:
            rows = c.execute(query + " ORDER BY seq", args).fetchall()
        return [Entry(r["migration"], r["step"], r["phase"], r["detail"], r["at"]) for r in rows]

    def get(self, mid: str) -> Migration | None:
        found = self._select("WHERE id = ?", (mid,))
        return found[0] if found else None

    def active(self) -> list[Migration]:
        return self._select("WHERE state NOT IN ('done', 'failed', 'cancelled')", ())

    def all(self) -> list[Migration]:
        return self._select("", ())

    def _select(self, where: str, args: tuple[str, ...]) -> list[Migration]:
        with self.db.tx() as c:
            rows = c.execute(f"SELECT * FROM migrations {where} ORDER BY created, id", args).fetchall()
        return [
            Migration(r["id"], r["workload"], r["source"], r["target"], r["replicas"], r["target_total"],
                      r["epoch"], Kind(r["kind"]), MigrationState(r["state"]), r["attempts"], r["next_at"], r["error"],
                      tuple(json.loads(r["reasons"])), r["created"], r["updated"])
            for r in rows
        ]
