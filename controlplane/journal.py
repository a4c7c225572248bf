"""The migration journal: every migration's state, and an append-only log of each step's intent and result.

A step is written as ``intent`` before the executor acts and ``done`` after, in the store, so
after a crash the executor knows the last completed step of every migration and re-runs the
next one (steps are idempotent, so a step that did act before the crash is not doubled).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, replace
from typing import Any

from controlplane.store import Store, next_seq, seq_key


class MigrationState(enum.Enum):
    PLANNED = "planned"
    SOURCE_FENCED = "source-fenced"  # stateful hand-off (controlplane.handoffs): the source's writers are fenced off
    CHECKPOINTED = "checkpointed"    # ... its volume is copied; the reference is in ``Migration.checkpoint``
    RESTORED = "restored"            # ... the copy is the target's volume, fenced at the migration's epoch
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
    checkpoint: str = ""
    """A stateful hand-off's state as JSON: the source's fence before it, then the checkpoint's reference."""

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


JOURNAL_KEEP = 100_000  # the newest step entries kept
ACTIVE = "migrations-active/"
"""A copy of every migration not yet ended, under its own prefix: the tick reads the active ones several times a round,
and a scan of every migration ever recorded grows without bound (10,000 agents: thousands after one region's failover)."""
INDEXED = "index/migrations-active"
"""Present once every active migration is under :data:`ACTIVE` (a store written before the index has none)."""


class Journal:
    """Migrations (``migrations/<id>``, the active ones also under ``migrations-active/<id>``) and their step log
    (``journal/<seq>``) in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._indexed = False

    def save(self, m: Migration) -> None:
        """Insert or update one migration (and its place in the active index, in the same transaction)."""
        doc = {
            "workload": m.workload, "source": m.source, "target": m.target, "replicas": m.replicas, "target_total": m.target_total,
            "epoch": m.epoch, "kind": m.kind.value, "state": m.state.value, "attempts": m.attempts, "next_at": m.next_at,
            "error": m.error, "reasons": list(m.reasons), "created": m.created, "updated": m.updated,
            "checkpoint": m.checkpoint,
        }
        with self.store.tx() as t:
            t.put(f"migrations/{m.id}", doc)
            if m.state.terminal:
                t.delete(ACTIVE + m.id)
            else:
                t.put(ACTIVE + m.id, doc)

    def index(self) -> None:
        """Build the active index of a store written before it (a leader's take-over; a no-op once built)."""
        with self.store.tx() as t:
            if t.get(INDEXED) is not None:
                return
            for key, d in t.scan("migrations/"):
                if not MigrationState(d["state"]).terminal:
                    t.put(ACTIVE + key.split("/", 1)[1], d)
            t.put(INDEXED, {"v": 1})

    def log(self, migration: str, step: str, phase: str, at: float, detail: str = "") -> None:
        with self.store.tx() as t:
            seq = next_seq(t, "journal")
            t.put(seq_key("journal/", seq), {"migration": migration, "step": step, "phase": phase, "detail": detail, "at": at})
            if seq > JOURNAL_KEEP:
                t.delete(seq_key("journal/", seq - JOURNAL_KEEP))

    def entries(self, migration: str | None = None) -> list[Entry]:
        with self.store.tx() as t:
            rows = t.scan("journal/")
        return [Entry(d["migration"], d["step"], d["phase"], d["detail"], d["at"]) for _, d in rows
                if not migration or d["migration"] == migration]

    def get(self, mid: str) -> Migration | None:
        with self.store.tx() as t:
            d = t.get(f"migrations/{mid}")
        return _migration(mid, d) if d else None

    def active(self) -> list[Migration]:
        """The migrations not yet ended, oldest first: from the index once it is built, else from every migration."""
        with self.store.tx() as t:
            self._indexed = self._indexed or t.get(INDEXED) is not None
            if not self._indexed:
                return [m for m in self.all() if not m.state.terminal]
            return _sorted(t.scan(ACTIVE))

    def all(self) -> list[Migration]:
        with self.store.tx() as t:
            return _sorted(t.scan("migrations/"))


def _sorted(rows: list[tuple[str, dict[str, Any]]]) -> list[Migration]:
    return sorted((_migration(key.split("/", 1)[1], d) for key, d in rows), key=lambda m: (m.created, m.id))


def _migration(mid: str, d: dict[str, Any]) -> Migration:
    return Migration(mid, d["workload"], d["source"], d["target"], int(d["replicas"]), int(d["target_total"]), int(d["epoch"]),
                     Kind(d["kind"]), MigrationState(d["state"]), int(d["attempts"]), float(d["next_at"]), d["error"],
                     tuple(d["reasons"]), float(d["created"]), float(d["updated"]), str(d.get("checkpoint", "")))
