"""Push-pull anti-entropy: Bloom-digest exchanges (or memberlist's full state) with one member at a time.

The anti-entropy side of :class:`gossip.node.GossipNode` (memberlist's ``pushPull``). Every
push-pull interval one member gets a Bloom digest of all we hold and answers with what the
digest does not cover plus its own digest, to which we answer likewise (a ``Delta``). Every
frame opens with an Alive about its sender, which is how a join works: ``join`` starts an
exchange with every seed, and the seeds we do not see alive are retried every two probe intervals
while we see no majority of the members we know alive (nobody yet, or we were cut off), and every
``rejoin_every`` rounds while one is lost. With ``full_state_pushpull`` the frames carry
everything instead, the baseline the benchmarks compare with.

What goes in a digest or a frame is :mod:`gossip.antientropy`'s; the digests themselves are
:mod:`gossip.digests`'. Frames go out through :mod:`gossip.sending`; the state messages a
frame carries are merged by :mod:`gossip.dispatching` before the exchange is answered. The
push-pull timer also forgets expired tombstones.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from gossip import antientropy, digests
from gossip.config import GossipConfig
from gossip.dispatching import drop
from gossip.members import LIVE_STATES, Members
from gossip.membership import Membership
from gossip.messages import Alive, Delta, DigestReply, DigestRequest, Message, PushPull
from gossip.metrics import Counters
from gossip.records import RecordStore
from gossip.sending import Outbox
from gossip.shared import Ref, SharedState
from gossip.timers import Timers
from gossip.wire import WireError


class Exchanger:
    """Our push-pull rounds, and the answers to other members' exchanges."""

    __slots__ = (
        "shared", "_seeds", "_rounds", "_name", "_config", "_rng", "_members", "_records", "_membership", "_outbox",
        "_timers", "_metrics", "_settled",
    )

    def __init__(
        self,
        name: str,
        *,
        config: GossipConfig,
        rng: random.Random,
        members: Members,
        records: RecordStore,
        membership: Membership,
        outbox: Outbox,
        timers: Timers,
        metrics: Counters,
        settled: dict[int, Message],
    ) -> None:
        """``settled`` is the inbound skip of repeated news (:mod:`gossip.dispatching`), cleared when tombstones expire."""
        self.shared: SharedState | None = None
        """The state we started from and read through to, when shared with other in-process nodes."""
        self._seeds: tuple[str, ...] = ()
        self._rounds = 0
        self._name = name
        self._config = config
        self._rng = rng
        self._members = members
        self._records = records
        self._membership = membership
        self._outbox = outbox
        self._timers = timers
        self._metrics = metrics
        self._settled = settled

    def start(self, now: float) -> None:
        """Schedule the first push-pull round at a random point of the first interval."""
        self._timers.at(now + self._rng.uniform(0, self._config.pushpull_interval), self._pushpull_round, None)

    def join(self, seeds: Sequence[str], now: float) -> None:
        """Start an exchange with every seed; retried while we see no majority alive."""
        self._seeds = tuple(s for s in seeds if s != self._name)
        for seed in self._seeds:
            self._start_exchange(seed, now)

    def _pushpull_round(self, _: None, now: float) -> None:
        cfg = self._config
        self._rounds += 1
        if self._records.reap(now - cfg.tombstone_ttl):
            self._settled.clear()  # a record we held, now forgotten, may be heard anew
        alive = self._members.live_count() - len(self._membership.suspicions)
        lonely = alive <= 0 or 2 * (alive + 1) <= self._members.cluster_size()
        # while we see no majority of the members we know alive (nobody yet, or we were cut off), retry the seeds we
        # do not see alive every two probe intervals: a healed member hears that it was declared dead, refutes and
        # learns what moved while it was away within seconds, not once its own stretched probes reach a peer
        self._timers.at(now + (min(cfg.pushpull_interval, 2 * cfg.probe_interval) if lonely else cfg.pushpull_interval), self._pushpull_round, None)
        peer = None
        if lonely or self._rounds % cfg.rejoin_every == 0:
            lost = [s for s in self._seeds if (row := self._members.get(s)) is None or row.state not in LIVE_STATES]
            peer = self._rng.choice(lost) if lost else None
        if peer is None:
            peer = next(iter(self._members.sample(self._rng, 1)), None)
        if peer is not None:
            self._start_exchange(peer, now)

    def _me(self) -> Alive:
        """What opens every frame we send: we are alive, at our incarnation."""
        return Alive(self._name, self._membership.incarnation)

    def _salt(self, now: float) -> int:
        return int(now / (self._config.pushpull_interval * self._config.digest_salt_exchanges)) & 0xFFFFFFFF

    def _start_exchange(self, peer: str, now: float) -> None:
        if self._config.full_state_pushpull:
            state = antientropy.full_state(self._name, self._membership.incarnation, self._members, self._records)
            self._outbox.send_frame(peer, [self._me(), PushPull(False), *state[1:]])
            return
        salt = self._salt(now)
        self._outbox.send_frame(peer, [self._me(), DigestRequest(salt, self.digest(salt))])
        self._count_full_state()

    def _count_full_state(self) -> None:
        if self._config.count_full_state:
            self._metrics.full_state_bytes_counted += self.full_state_frame_size()

    def full_state_frame_size(self) -> int:
        """Bytes of the sealed full-state push-pull frame we would send now (request or reply: the
        same length), computed without building it; benchmarks compare the digest exchange with it."""
        incarnation = self._membership.incarnation
        body = antientropy.full_state_body_size(self._name, incarnation, self._members, self._records, self.shared)
        return self._outbox.overhead + body

    def _entries(self, salt: int) -> Iterator[tuple[str, Ref]]:
        return antientropy.digest_entries(self._name, self._membership.incarnation, self._members, self._records, salt)

    def digest(self, salt: int) -> bytes:
        """Our Bloom digest under this salt (hashed a chunk at a time: see :mod:`gossip.digests`)."""
        count = antientropy.entry_count(self._members, self._records)
        rate = self._config.digest_error_rate
        if self.shared is None:
            return digests.build((key for key, _ in self._entries(salt)), count, rate)
        hashed, held, own = self._shared_parts(salt, digests.capacity_for(count), rate)
        return digests.build((key for key, _ in own), count, rate, (hashed, held))

    def missing_from(self, bloom: bytes, salt: int) -> list[Message]:
        """State messages for every entry the peer's digest does not cover; raises WireError if it is malformed."""
        theirs = digests.parse(bloom, self._config.max_digest_capacity)
        if self.shared is None:
            lacking = digests.missing(theirs, self._entries(salt))
        else:
            hashed, held, own = self._shared_parts(salt, *digests.geometry(theirs))
            lacking = digests.missing(theirs, own, (hashed, held, self.shared.refs))
        incarnation = self._membership.incarnation
        return list(antientropy.state_messages(self._name, incarnation, self._members, self._records, lacking))

    def _shared_parts(self, salt: int, capacity: int, rate: float) -> tuple[Any, Any, Iterator[tuple[str, Ref]]]:
        assert self.shared is not None
        incarnation = self._membership.incarnation
        return antientropy.digest_parts(self._name, incarnation, self._members, self._records, self.shared, salt, capacity, rate)

    def handle_digest_request(self, sender: str, msg: DigestRequest, now: float) -> None:
        try:
            lacking = self.missing_from(msg.bloom, msg.salt)
        except WireError as exc:
            drop(self._name, self._metrics, sender, exc)
            return
        reply = DigestReply(msg.salt, self.digest(msg.salt))
        self._outbox.send_frame(sender, [self._me(), reply, *lacking])
        self._count_full_state()

    def handle_digest_reply(self, sender: str, msg: DigestReply, now: float) -> None:
        try:
            lacking = self.missing_from(msg.bloom, msg.salt)
        except WireError as exc:
            drop(self._name, self._metrics, sender, exc)
            return
        if lacking:
            self._outbox.send_frame(sender, [self._me(), Delta(), *lacking])

    def handle_delta(self, sender: str, msg: Delta, now: float) -> None:
        """Nothing to answer: the frame's state messages were merged already."""

    def handle_push_pull(self, sender: str, msg: PushPull, now: float) -> None:
        if not msg.reply:
            state = antientropy.full_state(self._name, self._membership.incarnation, self._members, self._records)
            self._outbox.send_frame(sender, [state[0], PushPull(True), *state[1:]])
