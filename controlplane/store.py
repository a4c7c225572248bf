"""The control plane's store: one interface, two implementations.

- :class:`controlplane.sqlitestore.SqliteStore`: one SQLite file, one process (the embedded default).
- :class:`controlplane.etcdstore.EtcdStore`: etcd >= 3.5, shared by replicated control planes; only
  the elected leader writes, and every write is fenced by its election token.

The registry and the migration journal are written against this interface only, as JSON
documents under string keys. The rule the interface exists for: everything a caller does inside
one :meth:`Store.tx` commits together or not at all (a submit's record, placements, decision and
request id; a migration step and the placement it changes). Nested ``tx()`` calls join the outer
transaction. ``tests/controlplane/test_cp_store_contract.py`` runs one suite against both.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

Doc = dict[str, Any]


class StoreError(RuntimeError):
    """The store cannot be used as asked (its message says why and what to do)."""


class StoreInUse(StoreError):
    """Another process holds this store (SQLite): stop it or use another file."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now (etcd quorum lost, timeouts): retry later."""


class Fenced(StoreError):
    """This process is not the leader (any more): its write was refused, nothing was changed."""


class Txn(Protocol):
    """Reads see this transaction's own writes; writes commit when the outermost ``tx()`` ends."""

    def get(self, key: str) -> Doc | None: ...

    def scan(self, prefix: str, limit: int = 0, reverse: bool = False) -> list[tuple[str, Doc]]:
        """Every (key, document) under ``prefix`` in key order (``reverse``: descending), at most ``limit`` (0: all)."""
        ...

    def put(self, key: str, doc: Doc) -> None: ...

    def delete(self, key: str) -> None: ...


class Store(Protocol):
    def tx(self) -> AbstractContextManager[Txn]:
        """One atomic transaction (nested calls join the outer one); raises :class:`Fenced` when refused."""
        ...

    def close(self) -> None: ...


def next_seq(t: Txn, name: str) -> int:
    """The next number of a named sequence (1, 2, ...), taken inside the caller's transaction."""
    seq = int((t.get(f"seq/{name}") or {"n": 0})["n"]) + 1
    t.put(f"seq/{name}", {"n": seq})
    return seq


def seq_key(prefix: str, seq: int) -> str:
    """Sequence keys sort as numbers do."""
    return f"{prefix}{seq:012d}"


def prefix_end(prefix: str) -> str:
    """The smallest key after every key that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def merge(found: list[tuple[str, Doc]], writes: dict[str, Doc | None], prefix: str, limit: int, reverse: bool) -> list[tuple[str, Doc]]:
    """A scan's committed rows overlaid with a transaction's pending writes (``None`` = deleted)."""
    rows = dict(found)
    for key, doc in writes.items():
        if key.startswith(prefix):
            if doc is None:
                rows.pop(key, None)
            else:
                rows[key] = doc
    ordered = sorted(rows.items(), reverse=reverse)
    return ordered[:limit] if limit else ordered

