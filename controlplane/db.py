"""The control plane's SQLite file: WAL mode, one schema, one lock.

Registry and journal share one file so a migration step and the placement it changes commit
together. Connections are shared across the reconcile thread and gRPC handlers, so every use
goes through :meth:`Database.tx` (a lock plus a transaction).

One process owns the file: an exclusive ``flock`` on ``<file>.lock`` is taken before the file
is opened and held until :meth:`Database.close`, so a second control plane on the same file
refuses to start (:class:`DatabaseInUse`) instead of resetting the first one's state.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS clusters (name TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (name TEXT PRIMARY KEY, spec TEXT NOT NULL, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS placements (
    workload TEXT NOT NULL, cluster TEXT NOT NULL, replicas INTEGER NOT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, PRIMARY KEY (workload, cluster));
CREATE TABLE IF NOT EXISTS migrations (
    id TEXT PRIMARY KEY, workload TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
    replicas INTEGER NOT NULL, epoch INTEGER NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
    target_total INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '', reasons TEXT NOT NULL DEFAULT '[]', created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, migration TEXT NOT NULL, step TEXT NOT NULL, phase TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '', at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS homes (
    workload TEXT NOT NULL, home TEXT NOT NULL, away TEXT NOT NULL, replicas INTEGER NOT NULL,
    PRIMARY KEY (workload, home, away));
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL, workload TEXT NOT NULL,
    source TEXT NOT NULL, target TEXT NOT NULL, reasons TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, workload TEXT NOT NULL, answer TEXT NOT NULL);
"""


class DatabaseInUse(RuntimeError):
    """Another process holds the database: start this one on another file (or stop the other)."""


def _lock(path: str) -> int:
    """Hold ``path``.lock exclusively for this process; raise :class:`DatabaseInUse` when another has it."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DatabaseInUse(f"database {path} is in use by another control plane (pid {holder}); stop it or pass another --db") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class Database:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock_fd = -1 if self.path == ":memory:" else _lock(self.path)
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        self.lock = threading.RLock()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One atomic transaction (nested calls join the outer one)."""
        with self.lock:
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def close(self) -> None:
        with self.lock:
            self.conn.close()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1
