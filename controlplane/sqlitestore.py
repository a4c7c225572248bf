"""The embedded store: one SQLite file (WAL) held by one process.

Documents live in one key/value table, so SQLite and etcd answer the same contract
(:mod:`controlplane.store`). The connection is shared by the reconcile thread and gRPC handlers,
so every use goes through :meth:`SqliteStore.tx` (a lock plus ``BEGIN IMMEDIATE``).

One process owns the file: an exclusive ``flock`` on ``<file>.lock`` is taken before the file
is opened and held until :meth:`SqliteStore.close`, so a second control plane on the same file
refuses to start (:class:`~controlplane.store.StoreInUse`) instead of resetting the first one's state.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controlplane.store import Doc, StoreError, StoreInUse, prefix_end

SCHEMA = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID"
OLD_TABLES = ("workloads", "placements", "migrations")  # the schema before the store contract


def _lock(path: str) -> int:
    """Hold ``path``.lock exclusively for this process; raise :class:`StoreInUse` when another has it."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreInUse(f"database {path} is in use by another control plane (pid {holder}); stop it or pass another --db") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class _SqliteTxn:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def get(self, key: str) -> Doc | None:
        row = self.conn.execute("SELECT doc FROM kv WHERE key = ?", (key,)).fetchone()
        return dict(json.loads(row[0])) if row else None

    def scan(self, prefix: str, limit: int = 0, reverse: bool = False) -> list[tuple[str, Doc]]:
        order = "DESC" if reverse else "ASC"
        rows = self.conn.execute(
            f"SELECT key, doc FROM kv WHERE key >= ? AND key < ? ORDER BY key {order} LIMIT ?", (prefix, prefix_end(prefix), limit or -1),
        )
        return [(k, dict(json.loads(d))) for k, d in rows]

    def put(self, key: str, doc: Doc) -> None:
        self.conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, json.dumps(doc, separators=(",", ":"))))

    def delete(self, key: str) -> None:
        self.conn.execute("DELETE FROM kv WHERE key = ?", (key,))


class SqliteStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock_fd = -1 if self.path == ":memory:" else _lock(self.path)
        try:
            self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables & set(OLD_TABLES):
                raise StoreError(f"database {path} was written by an older fedplane (tables {', '.join(sorted(tables))}); pass a new --db")
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute(SCHEMA)
        except (sqlite3.Error, StoreError) as exc:
            self._unlock()
            raise StoreError(str(exc)) if isinstance(exc, sqlite3.Error) else exc
        self.lock = threading.RLock()
        self._txn = _SqliteTxn(self.conn)

    @contextmanager
    def tx(self) -> Iterator[_SqliteTxn]:
        """One atomic transaction (nested calls join the outer one)."""
        with self.lock:
            if self.conn.in_transaction:
                yield self._txn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._txn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def close(self) -> None:
        with self.lock:
            self.conn.close()
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
