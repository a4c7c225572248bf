"""The replicated store: etcd (>= 3.5) through its HTTP gateway (``etcd3gw``), for control planes in HA.

Every write is one etcd transaction. Once a fence is set (:mod:`controlplane.leading` sets it on
winning the election) each transaction compares the election key's create revision with the
token this process won with: after the lease expired and another member won, the key has a new
create revision and the write is refused whole (:class:`~controlplane.store.Fenced`), however long
this process was paused. Each fenced transaction also stamps ``writer`` with (member, token), so
the history itself shows who wrote what (the crash drill audits it).

The leader, the only writer, reads from a mirror of the prefix loaded when it takes over (kept
by its own commits; the decision and step history is left in etcd, so a take-over does not grow
with it); standbys read etcd directly. A commit whose outcome is unknown (a
timeout) drops the mirror, which is reloaded before the next read.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from types import ModuleType
from urllib.parse import urlsplit

from controlplane.store import Doc, Fenced, StoreError, StoreUnavailable, merge, prefix_end

ELECTION_KEY = "leader"
HISTORY = frozenset({"decisions", "journal"})  # append-mostly, bounded but large: never mirrored, so a take-over reads no history
WRITER_KEY = "writer"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


@dataclass(frozen=True, slots=True)
class Fence:
    key: str       # the election key (full etcd key)
    token: int     # its create revision when this process won
    member: str


def _gateway() -> tuple[ModuleType, ModuleType]:
    """etcd3gw and its exceptions, imported on first use: only the replicated mode needs the ``ha`` extra."""
    try:
        import etcd3gw
        from etcd3gw import exceptions
    except ImportError:
        raise StoreError("the replicated control plane needs the etcd client: pip install 'fedplane[ha]'") from None
    return etcd3gw, exceptions


class EtcdClient:
    """POSTs to the gateway of the first member that answers (connection errors move on to the next)."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float = 2.0) -> None:
        if not endpoints:
            raise StoreError("no etcd endpoint given")
        etcd3gw, self.errors = _gateway()
        self.clients = []
        for url in endpoints:
            parts = urlsplit(url if "//" in url else f"http://{url}")
            if not parts.hostname or not parts.port:
                raise StoreError(f"bad etcd endpoint {url!r}: expected http://host:port")
            self.clients.append(etcd3gw.client(parts.hostname, parts.port, timeout=timeout_s, protocol=parts.scheme or "http", api_path="/v3/"))
        self.current = 0

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for i in range(len(self.clients)):
            client = self.clients[(self.current + i) % len(self.clients)]
            try:
                found: dict[str, Any] = client.post(client.get_url(path), data=json.dumps(body))
            except (self.errors.ConnectionFailedError, self.errors.ConnectionTimeoutError, self.errors.InternalServerError) as exc:
                last = exc
                continue
            except self.errors.Etcd3Exception as exc:
                raise StoreError(f"etcd refused {path}: {exc}") from None
            self.current = (self.current + i) % len(self.clients)
            return found
        raise StoreUnavailable(f"no etcd member answered {path}: {last}")


class _EtcdTxn:
    def __init__(self, store: EtcdStore) -> None:
        self.store = store
        self.writes: dict[str, Doc | None] = {}

    def get(self, key: str) -> Doc | None:
        if key in self.writes:
            return self.writes[key]
        mirror = self.store.mirror_now(key)
        if mirror is not None:
            found = mirror.get(_top(key), {}).get(key)
            return dict(found) if found is not None else None  # a caller's edit must not reach the mirror before it commits
        rows = self.store.range(key, "")
        return rows[0][1] if rows else None

    def scan(self, prefix: str, limit: int = 0, reverse: bool = False) -> list[tuple[str, Doc]]:
        mirror = self.store.mirror_now(prefix)
        if mirror is not None:
            found = [(k, dict(d)) for k, d in mirror.get(_top(prefix), {}).items() if k.startswith(prefix)]
        else:
            # with pending writes a limit could cut rows they delete: read the whole prefix then
            found = self.store.range(prefix, prefix_end(prefix), 0 if self.writes else limit, reverse)
        return merge(found, self.writes, prefix, limit, reverse)

    def put(self, key: str, doc: Doc) -> None:
        self.writes[key] = doc

    def delete(self, key: str) -> None:
        self.writes[key] = None


class EtcdStore:
    def __init__(self, endpoints: Sequence[str], prefix: str = "/fedplane/", timeout_s: float = 2.0, require_fence: bool = True) -> None:
        self.client = EtcdClient(endpoints, timeout_s)
        self.prefix = prefix
        self.require_fence = require_fence
        self.fence: Fence | None = None
        self.mirror: dict[str, dict[str, Doc]] | None = None  # top-level key segment -> key -> document
        self.use_mirror = False
        self.refused = 0  # fenced writes refused (a deposed leader's attempts)
        self.lock = threading.RLock()
        self._txn: _EtcdTxn | None = None

    # -- the Store contract -------------------------------------------------------------------
    @contextmanager
    def tx(self) -> Iterator[_EtcdTxn]:
        with self.lock:
            if self._txn is not None:
                yield self._txn
                return
            self._txn = txn = _EtcdTxn(self)
            try:
                yield txn
            finally:
                self._txn = None
            if txn.writes:
                self._commit(txn.writes)

    def close(self) -> None:
        with self.lock:
            self.mirror = None

    # -- leader's mirror -----------------------------------------------------------------------------
    def mirror_now(self, key: str) -> dict[str, dict[str, Doc]] | None:
        """The mirror, when the leader reads ``key`` from it (history buckets are read from etcd)."""
        if not self.use_mirror or _top(key) in HISTORY:
            return None
        if self.mirror is None:
            mirror: dict[str, dict[str, Doc]] = {}
            start = ""
            for bucket in sorted(HISTORY):  # every key but the history buckets, in len(HISTORY) + 1 ranges
                for k, doc in self.range(start, f"{bucket}/"):
                    mirror.setdefault(_top(k), {})[k] = doc
                start = f"{bucket}0"  # '0' follows '/': the first key after the bucket
            for k, doc in self.range(start, "", whole=True):
                mirror.setdefault(_top(k), {})[k] = doc
            self.mirror = mirror
        return self.mirror

    def lead(self, fence: Fence) -> None:
        """From now on write under ``fence`` and read from a fresh mirror."""
        with self.lock:
            self.fence, self.use_mirror, self.mirror = fence, True, None

    def follow(self) -> None:
        with self.lock:
            self.fence, self.use_mirror, self.mirror = None, False, None

    # -- etcd ---------------------------------------------------------------------------------------
    def range(self, key: str, end: str, limit: int = 0, reverse: bool = False, whole: bool = False) -> list[tuple[str, Doc]]:
        """Documents from ``key`` (exactly, when ``end`` is "") to ``end``, keys without the store prefix."""
        full = self.prefix + key
        body: dict[str, Any] = {"key": b64(full)}
        if whole:
            body["range_end"] = b64(prefix_end(self.prefix))
        elif end:
            body["range_end"] = b64(self.prefix + end)
        if limit:
            body["limit"] = limit
        if reverse:
            body["sort_order"], body["sort_target"] = "DESCEND", "KEY"
        found = self.client.post("/kv/range", body)
        rows = []
        for kv in found.get("kvs", []):
            k = unb64(kv["key"])[len(self.prefix):]
            if k in (ELECTION_KEY, WRITER_KEY):
                continue
            rows.append((k, dict(json.loads(unb64(kv.get("value", ""))))))
        return rows

    def _commit(self, writes: dict[str, Doc | None]) -> None:
        ops: list[dict[str, Any]] = []
        for key, doc in writes.items():
            full = b64(self.prefix + key)
            if doc is None:
                ops.append({"request_delete_range": {"key": full}})
            else:
                ops.append({"request_put": {"key": full, "value": b64(json.dumps(doc, separators=(",", ":")))}})
        compare: list[dict[str, Any]] = []
        fence = self.fence
        if fence is not None:
            compare.append({"key": b64(fence.key), "target": "CREATE", "result": "EQUAL", "create_revision": str(fence.token)})
            ops.append({"request_put": {"key": b64(self.prefix + WRITER_KEY),
                                        "value": b64(json.dumps({"member": fence.member, "token": fence.token}))}})
        elif self.require_fence:
            self.refused += 1
            raise Fenced("this control plane is not the leader: writes go to the leader")
        try:
            answer = self.client.post("/kv/txn", {"compare": compare, "success": ops, "failure": []})
        except StoreUnavailable:
            self.mirror = None  # the outcome is unknown: read the truth again before the next decision
            raise
        if compare and not answer.get("succeeded", False):
            self.refused += 1
            raise Fenced(f"fenced: the election key no longer carries token {fence.token if fence else 0}; another member leads now")
        if self.mirror is not None:
            for key, doc in writes.items():
                if _top(key) in HISTORY:
                    continue
                bucket = self.mirror.setdefault(_top(key), {})
                if doc is None:
                    bucket.pop(key, None)
                else:
                    bucket[key] = doc


def _top(key: str) -> str:
    return key.split("/", 1)[0]
