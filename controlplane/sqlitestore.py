"""The embedded store: one SQLite file (WAL) held by one process.

Documents live in one key/value table, so SQLite and etcd answer the same contract
(:mod:`controlplane.store`). The connection is shared by the reconcile thread and gRPC handlers,
so every use goes through :meth:`SqliteStore.tx` (a lock plus ``BEGIN IMMEDIATE``).

One process owns the file: an exclusive ``flock`` on ``<file>.lock`` is taken before the file
is opened and held until :meth:`SqliteStore.close`, so a second control plane on the same file
refuses to start (:class:`~controlplane.store.StoreInUse`) instead of resetting the first one's state.
"""

from __future__ import annotations

import bisect
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
HELD = ("clusters/", "workloads/", "placements/", "homes/", "migrations-active/")
"""Prefixes every tick and submit scans whole: their decoded rows are held, and writes under them update the held rows
(10,000 agents, 1,000 workloads: the tick decoded ~3,000 JSON documents it had read unchanged the tick before, a third
of its time)."""


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
        self.held: dict[str, list[tuple[str, Doc]]] = {}
        """A whole forward scan of each :data:`HELD` prefix, as decoded; kept up to date by writes, dropped by a rollback."""
        self.depth = 0
        """Open :meth:`SqliteStore.tx` calls (nested ones join the outermost)."""
        self.begun = False
        """Whether this transaction has begun SQLite's (at its first statement)."""

    def _sql(self, statement: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        if not self.begun:
            self.conn.execute("BEGIN IMMEDIATE")
            self.begun = True
        return self.conn.execute(statement, args)

    def get(self, key: str) -> Doc | None:
        row = self._sql("SELECT doc FROM kv WHERE key = ?", (key,)).fetchone()
        return dict(json.loads(row[0])) if row else None

    def scan(self, prefix: str, limit: int = 0, reverse: bool = False) -> list[tuple[str, Doc]]:
        """Rows under ``prefix``; a held prefix's from memory, the held documents themselves (no copy: the documents
        under those prefixes are read, never changed in place; a tick copying them allocated thousands of objects for
        the collector to walk)."""
        held = prefix in HELD and not limit and not reverse
        rows = self.held.get(prefix) if held else None
        if rows is None:
            order = "DESC" if reverse else "ASC"
            found = self._sql(
                f"SELECT key, doc FROM kv WHERE key >= ? AND key < ? ORDER BY key {order} LIMIT ?", (prefix, prefix_end(prefix), limit or -1),
            )
            rows = [(k, json.loads(d)) for k, d in found]
            if held:
                self.held[prefix] = rows
        return list(rows)

    def put(self, key: str, doc: Doc) -> None:
        text = json.dumps(doc, separators=(",", ":"))
        self._sql("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, text))
        self._write(key, text)

    def delete(self, key: str) -> None:
        self._sql("DELETE FROM kv WHERE key = ?", (key,))
        self._write(key, None)

    def _write(self, key: str, text: str | None) -> None:
        """A held scan takes the write in place (``None``: deleted), decoded from what was written, so a submit
        re-decodes one document, not every workload and placement."""
        for prefix in HELD:
            rows = self.held.get(prefix) if key.startswith(prefix) else None
            if rows is None:
                continue
            at = bisect.bisect_left(rows, key, key=_key)  # SQLite's text order is the code points' order, as str's
            here = at < len(rows) and rows[at][0] == key
            if text is None:
                if here:
                    del rows[at]
            elif here:
                rows[at] = (key, json.loads(text))
            else:
                rows.insert(at, (key, json.loads(text)))


def _key(row: tuple[str, Doc]) -> str:
    return row[0]


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
        """One atomic transaction (nested calls join the outer one). SQLite's own begins at the first statement: one
        that only reads held scans runs none (every tick reads a dozen times; each statement lets go of the GIL, and
        a tick thread sharing it with a busy event loop waited up to a switch interval to get it back, each time)."""
        with self.lock:
            txn = self._txn
            if txn.depth:
                txn.depth += 1
                try:
                    yield txn
                finally:
                    txn.depth -= 1
                return
            txn.depth, txn.begun = 1, False
            try:
                yield txn
            except BaseException:
                if txn.begun:
                    txn.held.clear()  # it may hold what the rolled-back writes made
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                txn.depth = 0
            if txn.begun:
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.Error:
                    txn.held.clear()
                    raise

    def close(self) -> None:
        with self.lock:
            self.conn.close()
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
