"""Who acts: :class:`Solo` (SQLite, the only process) or :class:`Campaign` (etcd, one leader of N).

A campaign polls the election key every ``poll_s``; when nobody holds it, it campaigns, and on
winning runs ``plane.take_over`` (clusters attached, twins rebuilt from the store, missing
replicas re-created; the migration journal resumes on the next tick) before it answers as the
leader. From the moment it wins, a thread of its own (:class:`Keepalive`) refreshes the lease every ``ttl / 20``:
neither a long take-over nor an event loop busy with a fleet's reports may starve the lease (a standby deposes a
leader silent for 4 s). The campaign steps down when the lease is gone or no refresh got through for a whole TTL. The gRPC service asks it before every write:
standbys answer reads and name the leader to writers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from controlplane.leading import DEAD_AFTER_S, Election, Leader
from controlplane.registry import ClusterSpec
from controlplane.runtime import ControlPlane
from controlplane.store import StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
ROSTER_EVERY_S = 2.0


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def leader(self) -> Leader | None: ...

    @property
    def member(self) -> str: ...

    @property
    def refused(self) -> int:
        """Writes refused because this process did not lead: by the API (a standby's answer) or by the store (fencing)."""
        ...

    def refuse(self) -> None:
        """Count a write the API refused because this process does not lead."""
        ...

    @property
    def took_over_s(self) -> float: ...

    @property
    def members(self) -> tuple[str, ...]:
        """Every member's agents' link address, the leader's first (agents learn them from their acks); () alone."""
        ...


class Solo:
    """The embedded single-node mode: this process always leads; SQLite's file lock keeps it alone."""

    is_leader = True
    member = ""
    refused = 0
    took_over_s = 0.0
    members: tuple[str, ...] = ()

    def leader(self) -> Leader | None:
        return None

    def refuse(self) -> None:
        """Never called: the only process always leads."""


class Keepalive:
    """Refreshes the leader's lease every ``ttl / 20`` on a thread of its own until stopped or the lease is gone."""

    def __init__(self, election: Election) -> None:
        self.election = election
        self.last_ok = time.monotonic()  # the campaign's win just wrote the key under a fresh lease
        self.lost = False
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="lease-keepalive", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.election.ttl_s / 20):
            try:
                if not self.election.refresh():
                    self.lost = True
                    return
                self.last_ok = time.monotonic()
            except StoreError as exc:
                log.debug("lease refresh failed: %s", exc)  # retried; a whole TTL of failures steps down
            except Exception:
                log.exception("lease refresh failed")

    @property
    def gone(self) -> bool:
        """The lease expired (etcd said so), or no refresh got through for a whole TTL (it may have)."""
        return self.lost or time.monotonic() - self.last_ok > self.election.ttl_s

    def stop(self) -> None:
        self._stop.set()


class Campaign:
    def __init__(self, election: Election, plane: ControlPlane, specs: Sequence[ClusterSpec] = (), poll_s: float = 0.05) -> None:
        self.election, self.plane, self.specs, self.poll_s = election, plane, list(specs), poll_s
        self.known: Leader | None = None
        self.leading = False
        self.took_over_s = 0.0  # how long the last take-over took (win -> serving writes)
        self.refusals = 0
        """Writes the API refused while we did not lead (the store counts its own)."""
        plane.metrics.writes_refused.set_function(lambda: float(self.refused))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="election")
        self.links: tuple[str, ...] = ()
        """Every joined member's agents' link, as etcd listed them at most :data:`ROSTER_EVERY_S` ago."""
        self._roster_at = float("-inf")
        self._keepalive: Keepalive | None = None

    @property
    def is_leader(self) -> bool:
        return self.leading

    @property
    def member(self) -> str:
        return self.election.member

    @property
    def refused(self) -> int:
        return self.election.store.refused + self.refusals

    def refuse(self) -> None:
        self.refusals += 1

    def leader(self) -> Leader | None:
        return self.known

    @property
    def members(self) -> tuple[str, ...]:
        first = self.known.link if self.known is not None else ""
        return (first, *(link for link in self.links if link != first)) if first else self.links

    async def _roster(self) -> None:
        """Every ``ROSTER_EVERY_S``: say where we listen and read where every member does (etcd down: next time)."""
        if time.monotonic() - self._roster_at < ROSTER_EVERY_S:
            return
        self._roster_at = time.monotonic()
        try:
            await self._etcd(self.election.join)
            self.links = tuple(await self._etcd(self.election.links))
        except StoreError as exc:
            log.debug("member roster not refreshed: %s", exc)

    async def _etcd(self, call: Callable[[], T]) -> T:
        """Election calls on their own thread: a burst of requests filling the default executor must not delay a lease refresh."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def run(self) -> None:
        while True:
            try:
                await self._roster()
                if self.leading:
                    await self._hold()
                else:
                    await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception:  # etcd unreachable or refusing: keep trying, never die silently
                log.exception("election step failed")
                if not self.leading:
                    self.known = None  # who leads cannot be known without etcd: never name a stale answer
                await asyncio.sleep(self.poll_s)

    async def resign(self) -> None:
        """Graceful stop: hand over now (a standby wins within one poll), not after the lease expires."""
        if self.leading:
            self.leading, self.known = False, None
            await asyncio.to_thread(self.plane.step_down)
        self._stop_keepalive()
        await self._etcd(self.election.resign)
        try:
            await self._etcd(self.election.leave)
        except StoreError:
            pass  # a stale entry only costs agents one failed connection

    async def _watch(self) -> None:
        held = await self._etcd(self.election.holder)
        known = None
        if held is not None:
            leader, lease = held
            known = await self._etcd(lambda: self.election.confirmed(leader, lease))
        self.known = known  # swapped whole: GetLeader never reads a blank between two etcd calls
        if held is not None and known is None:
            leader, lease = held
            if lease and await self._etcd(lambda: self.election.dead(lease)):
                log.warning("leader %s missed every lease refresh for %ds: revoking its lease", leader.member, DEAD_AFTER_S)
                await self._etcd(lambda: self.election.depose(lease))
                held = None
        if held is None:
            fence = await self._etcd(self.election.campaign)
            if fence is not None:
                self._stop_keepalive()
                self._keepalive = Keepalive(self.election)  # before the take-over: a long one must not lose the lease
                started = time.monotonic()
                await asyncio.to_thread(self.plane.take_over, self.plane.clock(), self.specs)
                self.known = Leader(self.election.member, self.election.address, fence.token, self.election.link)
                self.leading = True
                self.took_over_s = time.monotonic() - started
                log.warning("leading with fencing token %d (take-over %.2fs)", fence.token, self.took_over_s)
                return
        await asyncio.sleep(self.poll_s)

    async def _hold(self) -> None:
        keepalive = self._keepalive
        if keepalive is not None and not keepalive.gone:
            await asyncio.sleep(self.election.ttl_s / 20)
            return
        log.warning("lost the lease: stepping down")
        self._stop_keepalive()
        self.leading, self.known = False, None  # never name ourselves once we do not lead
        self.election.step_down()
        await asyncio.to_thread(self.plane.step_down)

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.stop()
            self._keepalive = None
