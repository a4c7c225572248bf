"""Leader election on etcd: one active control plane at a time, fenced.

A member campaigns by creating the election key under a lease (TTL ``ttl_s``, ~5 s: 3 s caused
needless changes of leader when an etcd member itself was killed) if no key exists. The key's
create revision is the fencing token: :class:`~controlplane.etcdstore.EtcdStore` compares it in
every write, so a leader that was paused (SIGSTOP) or cut off past its lease finds its writes
refused when it wakes, while the new leader already acts. The leader refreshes the lease every
``ttl_s / 20``; when a refresh says the lease is gone, or none succeeded for ``ttl_s``, it steps
down. A graceful stop revokes the lease, so a standby takes over within one poll.

A member names a leader only while it can confirm the leader's lease is being refreshed (its remaining TTL within
:data:`CONFIRM_SLACK_S` of the full TTL): a leader killed or cut off stops refreshing, and within seconds standbys
stop sending writers (and agents) to it, long before its key expires. One that has missed every refresh for
:data:`DEAD_AFTER_S` is dead: a standby revokes its lease and campaigns at once instead of waiting out the rest of the
TTL and etcd's expiry sweep (~1.5 s more: take-over 6.0 s -> ~4.5 s). The fence keeps this safe: a leader that was
only stalled that long finds its lease gone and every write refused when it wakes.

:class:`Election` is the blocking etcd side (called from a thread); the asyncio loop that drives
it lives in :mod:`controlplane.server`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from controlplane.etcdstore import ELECTION_KEY, EtcdStore, Fence, b64, unb64
from controlplane.store import StoreError, prefix_end

MEMBERS_KEY = "members/"
"""Under the store's prefix: one key per member, its API and agents' link addresses (agents learn every member)."""

TTL_S = 5
CONFIRM_SLACK_S = 2
"""A leader whose lease has less than ``ttl - CONFIRM_SLACK_S`` seconds left missed every refresh for that long
(it refreshes every ``ttl / 20``): it is not named any more. etcd counts TTLs in whole seconds."""
DEAD_AFTER_S = 4
"""No refresh for this long (16 missed in a row) and the holder is taken for dead; a killed etcd member stalls a
refresh ~1-2 s (its election), which must not change the leader (a 3 s TTL did)."""


@dataclass(frozen=True, slots=True)
class Leader:
    member: str
    address: str  # where its gRPC API listens
    token: int
    link: str = ""  # where its agents' link listens ("": not told)


class Election:
    def __init__(self, store: EtcdStore, member: str, address: str, ttl_s: int = TTL_S) -> None:
        self.store, self.member, self.address, self.ttl_s = store, member, address, ttl_s
        self.link = ""
        """Where this member's agents' link listens (set by the server once it is bound)."""
        self.key = store.prefix + ELECTION_KEY
        self.lease = 0
        self.fence: Fence | None = None

    def join(self) -> None:
        """Say where this member's API and agents' link listen, for agents told of one member only."""
        value = b64(json.dumps({"member": self.member, "address": self.address, "link": self.link}))
        self.store.client.post("/kv/put", {"key": b64(self.store.prefix + MEMBERS_KEY + self.member), "value": value})

    def leave(self) -> None:
        """A graceful stop: agents need not try this member any more."""
        self.store.client.post("/kv/deleterange", {"key": b64(self.store.prefix + MEMBERS_KEY + self.member)})

    def links(self) -> list[str]:
        """Every joined member's agents' link address."""
        prefix = self.store.prefix + MEMBERS_KEY
        found = self.store.client.post("/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        links = (json.loads(unb64(kv["value"])).get("link", "") for kv in found.get("kvs", []))
        return sorted(link for link in links if link)

    def holder(self) -> tuple[Leader, int] | None:
        """Who holds the election key now, and under which lease (None: nobody, a campaign can start)."""
        found = self.store.client.post("/kv/range", {"key": b64(self.key)})
        kvs = found.get("kvs", [])
        if not kvs:
            return None
        d = json.loads(unb64(kvs[0]["value"]))
        return Leader(d["member"], d["address"], int(kvs[0]["create_revision"]), d.get("link", "")), int(kvs[0].get("lease", 0))

    def leader(self) -> Leader | None:
        """The leader, if its lease is being refreshed now (None: nobody holds the key, or its holder stopped refreshing)."""
        held = self.holder()
        return self.confirmed(*held) if held is not None else None

    def confirmed(self, leader: Leader, lease: int) -> Leader | None:
        """``leader`` while its lease ``lease`` was refreshed within the last :data:`CONFIRM_SLACK_S` seconds, else None."""
        if not lease:
            return leader
        return leader if self.left(lease) >= self.ttl_s - CONFIRM_SLACK_S else None

    def left(self, lease: int) -> int:
        """Whole seconds the lease has left (-1: gone). etcd floors them and omits a zero: a lease refreshed just now reads
        ``ttl - 1``, one last refreshed ``k`` to ``k + 1`` seconds ago ``ttl - 1 - k``."""
        return int(self.store.client.post("/lease/timetolive", {"ID": str(lease)}).get("TTL", 0))

    def dead(self, lease: int) -> bool:
        """The holder under ``lease`` missed every refresh for :data:`DEAD_AFTER_S` or more (or the lease is gone)."""
        return self.left(lease) <= self.ttl_s - 1 - DEAD_AFTER_S

    def depose(self, lease: int) -> None:
        """Revoke a dead holder's lease: its key goes now and a campaign can win (its writes were fenced already)."""
        try:
            self.store.client.post("/lease/revoke", {"ID": str(lease)})
        except StoreError:
            pass  # gone already, or etcd busy: the next poll tries again

    def campaign(self) -> Fence | None:
        """Try once to become leader; on success the store writes under the returned fence."""
        self.lease = int(self.store.client.post("/lease/grant", {"TTL": self.ttl_s, "ID": 0})["ID"])  # fresh: an old one may have expired
        value = b64(json.dumps({"member": self.member, "address": self.address, "link": self.link}))
        answer = self.store.client.post("/kv/txn", {
            "compare": [{"key": b64(self.key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": b64(self.key), "value": value, "lease": str(self.lease)}}],
            "failure": [],
        })
        if not answer.get("succeeded", False):
            self.lease = 0  # left to expire
            return None
        self.fence = Fence(self.key, int(answer["header"]["revision"]), self.member)
        self.store.lead(self.fence)
        return self.fence

    def refresh(self) -> bool:
        """Keep the lease alive; False once etcd says it has expired (another member may lead)."""
        if not self.lease:
            return False
        found = self.store.client.post("/lease/keepalive", {"ID": str(self.lease)})
        alive = int(found.get("result", {}).get("TTL", -1)) > 0
        if not alive:
            self.lease = 0
        return alive

    def step_down(self) -> None:
        """Stop writing (the store refuses from now on) and forget the lease."""
        self.fence = None
        self.lease = 0
        self.store.follow()

    def resign(self) -> None:
        """Graceful hand-over: revoke the lease so the key goes now, not at expiry."""
        lease = self.lease
        self.step_down()
        if lease:
            try:
                self.store.client.post("/lease/revoke", {"ID": str(lease)})
            except StoreError:
                pass  # it expires on its own
