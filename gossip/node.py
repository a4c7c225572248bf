"""The sans-IO gossip node: SWIM + Lifeguard membership and versioned-record anti-entropy.

Rules, in the order a reader needs them:

* Time and chance come in from outside: every entry point takes ``now`` and the node
  draws only from its own ``random.Random``. It never touches a socket or a clock.
* Every entry point returns a list of effects (``effects``): datagrams and stream frames
  to send, member and record events to deliver. ``next_deadline()`` says when ``tick``
  must be called next.
* Probing: one probe round per (awareness-scaled) probe interval. A ping unanswered
  within the (scaled) probe timeout is retried through k members; a target silent at
  the end of the round is suspected. Suspicions expire after a timeout that scales with
  log N and shrinks with independent confirmations; a suspected node refutes by raising
  its incarnation. Lifeguard: failed probes without nacks and refutations raise the
  local awareness score, which stretches our own timeouts.
* Dissemination: membership and record changes are queued as broadcasts and piggybacked
  on every packet, plus pushed to ``fanout`` members each gossip round, each sent a
  bounded number of times. Rounds are synchronous, as in the epidemic model behind
  Serf's convergence figures: they start on a grid of the (shared) clock, and news we
  relay waits for our next round, so it travels one hop per round. News of our own
  (a record we publish, a refutation, a suspicion we raise) goes out at once.
* Anti-entropy: every push-pull interval one member gets a Bloom digest of all we hold and
  answers with what it does not cover plus its own digest, to which we answer likewise.
* Unknown senders: a sender that is not in our table may only probe (Ping, Ack, Nack)
  and introduce itself (an Alive about itself, which opens every push-pull frame, i.e.
  a join). Everything else it sends is dropped and counted until it is known.
"""

from __future__ import annotations

import heapq
import logging
import random
from operator import attrgetter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gossip import antientropy, digests, timeouts, wire
from gossip.awareness import Awareness
from gossip.broadcasts import BroadcastQueue
from gossip.config import GossipConfig
from gossip.effects import Effect, MemberEvent, RecordEvent, Send, SendStream
from gossip.envelopes import Envelopes
from gossip.keyring import Keyring
from gossip.members import LIVE_STATES, MemberState, MemberView, Members
from gossip.messages import (
    Ack,
    Alive,
    Dead,
    Delta,
    DigestReply,
    DigestRequest,
    IndirectPing,
    Message,
    Nack,
    Ping,
    PushPull,
    Record,
    Suspect,
)
from gossip.metrics import Counters
from gossip.records import RecordStore, RecordValue
from gossip.shared import SharedState
from gossip.suspicion import Suspicion
from gossip.wire import DropReason, WireError

log = logging.getLogger("gossip")

_ORIGINS: dict[type, Callable[[Any], str]] = {
    Alive: attrgetter("node"), Suspect: attrgetter("accuser"), Dead: attrgetter("accuser"), Record: attrgetter("owner")
}
"""Who raised a piece of news: the member it vouches for, its accuser or its record's owner."""


_ALIVE, _SUSPECT, _DEAD, _LEFT = MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD, MemberState.LEFT
"""Module constants: reading ``MemberState.X`` costs ~170 ns (a lookup on the enum class), and
the handlers compare states for every message a node hears."""
_QUIET_DROPS = (DropReason.REPLAYED, DropReason.UNKNOWN_SENDER)
"""Expected in normal operation (duplicated datagrams, gossip racing a join): logged at debug."""
_INTRODUCTIONS = (Ping, Ack, Nack)
_EXCHANGES = (DigestRequest, DigestReply, PushPull, Delta)
_EXCHANGE_TYPES = frozenset(_EXCHANGES)
_SETTLING = frozenset((Alive, Suspect, Dead, Record))
"""News whose repeats ``GossipNode._settles`` can recognise."""
SETTLED_LIMIT = 1024
"""Settled messages a node remembers before starting over (~100 KiB): a piece of news is heard
again within about a second of the first time, so this covers several seconds of news."""


@dataclass(slots=True)
class _ProbeRound:
    target: str
    incarnation: int
    seq: int
    acked: bool = False
    nacks: int = 0
    expected_nacks: int = 0


class GossipNode:
    """One member of the cluster; drive it with ``on_packet``, ``on_stream`` and ``tick``."""

    def __init__(
        self,
        name: str,
        *,
        now: float,
        rng: random.Random,
        config: GossipConfig | None = None,
        keyring: Keyring | None = None,
        epoch: int = 0,
        round_offset: float = 0.0,
    ) -> None:
        """``name`` is also the address peers send to; ``epoch`` must grow across restarts.

        ``round_offset`` maps the driver's clock onto the cluster's shared one (the UDP
        driver passes wall-clock minus loop time), so every node starts its gossip rounds together.
        """
        self.name = name
        self.config = config or GossipConfig()
        self.incarnation = 0
        self.metrics = Counters()
        self._rng = rng
        self._members = Members()
        self._records = RecordStore()
        self._shared: SharedState | None = None
        """The state we started from and read through to, when shared with other in-process nodes."""
        self._broadcasts = BroadcastQueue()
        self._awareness = Awareness(self.config.awareness_max)
        self._suspicions: dict[str, Suspicion] = {}
        self._suspicions_at: float | None = None
        """When the timer watching the suspicions runs next (None: no suspicion is watched)."""
        self._envelopes = Envelopes(name, epoch, keyring)
        self._timers: list[tuple[float, int, Callable[[Any, float], None], Any]] = []
        self._timer_seq = 0
        self._seq = 0
        self._probe: _ProbeRound | None = None
        self._relays: dict[int, tuple[str, int]] = {}
        """Indirect probes we run for others: our ping seq -> (requester, its seq)."""
        self._clock = 0
        """Version of our latest published record."""
        self._seeds: tuple[str, ...] = ()
        self._pushpull_rounds = 0
        self._left = False
        self._in_stream = False
        """True while handling a stream frame: fallback pings are answered over a stream."""
        self._out: list[Effect] = []
        self._settled: dict[int, Message] = {}
        """Messages heard that hearing again cannot change anything, by identity (see ``_settles``)."""
        self._round_offset = round_offset
        self._round_at: float | None = None
        """When the next gossip round starts (one is scheduled only while broadcasts are queued)."""
        self._burst_at: float | None = None
        """When the extra round sending news of our own at once runs (None if none is scheduled)."""
        cfg = self.config
        self._at(now + rng.uniform(0, cfg.probe_interval), self._probe_round, None)
        self._at(now + rng.uniform(0, cfg.pushpull_interval), self._pushpull_round, None)

    # ------------------------------------------------------------------ public API

    def join(self, seeds: Sequence[str], now: float) -> list[Effect]:
        """Start an anti-entropy exchange with every seed; retried while we know nobody."""
        self._seeds = tuple(s for s in seeds if s != self.name)
        for seed in self._seeds:
            self._start_exchange(seed, now)
        return self._flush(now)

    def restore(
        self,
        members: Iterable[tuple[str, int, MemberState]],
        records: Iterable[tuple[str, str, int, RecordValue]],
        now: float,
    ) -> list[Effect]:
        """Prime an empty node from a snapshot (as Serf's snapshot on restart) without gossiping it.

        Our own records in the snapshot become ours again, so later publishes outbid them.
        Returns the member and record events the snapshot implies.
        """
        self._settled.clear()  # a snapshot may set members and records back
        for name, incarnation, state in members:
            if name != self.name:
                self._members.set(name, incarnation, state, now, self._rng)
                self._out.append(MemberEvent(name, state, incarnation, None))
                if state not in LIVE_STATES:
                    self._at(now + self.config.reap_after, self._reap, (name, now))
        for owner, key, version, value in records:
            if self._records.apply(owner, key, version, value, now):
                self._out.append(RecordEvent(owner, key, version, value))
                if owner == self.name:
                    self._clock = max(self._clock, version)
        return self._flush(now)

    def adopt(self, state: SharedState, now: float) -> list[Effect]:
        """Start from a state shared with other in-process nodes, as ``restore`` would, without copying it.

        For simulated clusters that all start from one snapshot: the node reads through to
        ``state`` and copies only what changes. No events are emitted for what the state
        holds (the caller built it). Raises ValueError unless the node is still empty.
        """
        if len(self._members) or len(self._records):
            raise ValueError("adopt needs a node that holds nothing yet")
        self._members = Members(state.members, exclude=self.name)
        self._records = RecordStore(state.records, state.record_count)
        self._shared = state
        self._clock = max([self._clock, *(version for version, _ in state.records.get(self.name, {}).values())])
        for name in state.members.down:
            if name != self.name:
                self._at(state.members.at + self.config.reap_after, self._reap, (name, state.members.at))
        return self._flush(now)

    def publish(self, key: str, value: RecordValue, now: float) -> list[Effect]:
        """Publish (or, with None, withdraw) one of our records; raises ValueError if unencodable."""
        self._publish(key, value, now)
        return self._flush(now)

    def _publish(self, key: str, value: RecordValue, now: float) -> None:
        if not isinstance(key, str) or len(key.encode()) > wire.MAX_NAME_BYTES:
            raise ValueError(f"record keys are str of at most {wire.MAX_NAME_BYTES} bytes")
        self._clock += 1
        record = Record(self.name, key, self._clock, value)
        try:
            wire.encode(record)
        except (TypeError, ValueError, OverflowError) as exc:
            self._clock -= 1
            raise ValueError(f"record value is not msgpack-encodable: {exc}") from exc
        self._records.apply(self.name, key, self._clock, value, now)
        self._broadcast((self.name, key), record, now)
        self._out.append(RecordEvent(self.name, key, self._clock, value))

    def leave(self, now: float) -> list[Effect]:
        """Announce a graceful departure; keep ticking a few gossip rounds so it spreads."""
        self._left = True
        goodbye = Dead(self.name, self.incarnation, self.name)
        self._broadcast((self.name, None), goodbye, now)
        for peer in self._members.sample(self._rng, self.config.fanout):
            self._send(peer, [goodbye], now)
        return self._flush(now)

    def on_packet(self, src: str, data: bytes, now: float) -> list[Effect]:
        """A datagram arrived; ``src`` is the transport address, used only for logging."""
        self.metrics.packets_in += 1
        self._receive(src, data, now, self.config.mtu)
        return self._flush(now)

    def on_stream(self, src: str, data: bytes, now: float) -> list[Effect]:
        """A whole stream frame arrived (the driver strips its length prefix)."""
        self.metrics.streams_in += 1
        self._in_stream = True
        try:
            self._receive(src, data, now, self.config.max_stream_bytes)
        finally:
            self._in_stream = False
        return self._flush(now)

    def tick(self, now: float) -> list[Effect]:
        """Run every timer due at ``now``."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, fn, arg = heapq.heappop(timers)
            fn(arg, now)
        return self._flush(now)

    def next_deadline(self) -> float:
        """When ``tick`` must next be called (an answered probe's timeout is dropped, not woken for)."""
        timers = self._timers
        while timers[0][2] == self._probe_timeout and self._probe_settled(timers[0][3]):
            heapq.heappop(timers)
        return timers[0][0]

    def members(self) -> dict[str, MemberView]:
        """Every member we know, ourselves included."""
        views = {v.name: v for v in self._members.views()}
        views[self.name] = MemberView(self.name, self.incarnation, MemberState.LEFT if self._left else MemberState.ALIVE)
        return views

    def records(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """owner -> key -> (version, value) of every record we hold (tombstones have value None)."""
        return self._records.snapshot()

    def record(self, owner: str, key: str) -> tuple[int, RecordValue] | None:
        """(version, value) of one record we hold (value None: a tombstone), or None."""
        return self._records.get(owner, key)

    @property
    def awareness(self) -> int:
        """Lifeguard local-health score: 0 is healthy."""
        return self._awareness.score

    @property
    def keyring(self) -> Keyring | None:
        return self._envelopes.keyring

    # ------------------------------------------------------------------ plumbing

    def _flush(self, now: float) -> list[Effect]:
        """Hand over the effects, making sure a gossip round is scheduled while news is queued.

        Rounds run only while there is news to push, so an idle node's only timers are its
        probe and push-pull rounds (each wake-up of an idle daemon costs CPU on a small board).
        """
        if self._round_at is None and len(self._broadcasts):
            self._round_at = timeouts.next_round(now, self.config.gossip_interval, self._round_offset)
            self._at(self._round_at, self._gossip_round, self._round_at)
        out, self._out = self._out, []
        return out

    def _at(self, when: float, fn: Callable[[Any, float], None], arg: Any) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, fn, arg))

    def _cluster_size(self) -> int:
        """Estimated N for timeouts and retransmit limits: every member we know, as memberlist."""
        return len(self._members) + 1

    def _broadcast(self, subject: Hashable, message: Message, now: float) -> None:
        """Queue news: ours goes out at once (an extra round now), relayed news from our next round."""
        payload = wire.encode(message)
        if len(payload) > self.config.mtu - self._envelopes.overhead - 3:
            return
        if _ORIGINS[type(message)](message) == self.name:
            self._broadcasts.queue(subject, payload)
            if self._burst_at is None:
                self._burst_at = now
                self._at(now, self._gossip_round, None)
        else:
            ready = timeouts.next_round(now, self.config.gossip_interval, self._round_offset)
            self._broadcasts.queue(subject, payload, ready)

    def _send(self, to: str, messages: list[Message], now: float) -> None:
        """One datagram: the given messages plus as many ready broadcasts as fit in the MTU."""
        encoded = [wire.encode(m) for m in messages]
        budget = self.config.mtu - self._envelopes.overhead - 3 - sum(map(len, encoded))
        limit = timeouts.retransmit_limit(self.config.retransmit_mult, self._cluster_size())
        encoded += self._broadcasts.take(budget, limit, now)
        if encoded:
            self._emit_data(to, self._envelopes.seal(wire.join(encoded)))

    def _seal(self, messages: list[Message]) -> bytes:
        """Messages alone, without piggybacked broadcasts."""
        return self._envelopes.seal(wire.join([wire.encode(m) for m in messages]))

    def _send_frame(self, to: str, messages: list[Message]) -> None:
        """An anti-entropy frame: a datagram if it fits, else a stream."""
        data = self._seal(messages)
        self.metrics.antientropy_bytes_out += len(data)
        self._emit_data(to, data)

    def _emit_data(self, to: str, data: bytes, stream: bool = False) -> None:
        self.metrics.bytes_out += len(data)
        if len(data) <= self.config.mtu and not stream:
            self.metrics.packets_out += 1
            self._out.append(Send(to, data))
        else:
            self.metrics.streams_out += 1
            self._out.append(SendStream(to, data))

    def _receive(self, src: str, data: bytes, now: float, limit: int) -> None:
        self.metrics.bytes_in += len(data)
        try:
            if len(data) > limit:
                raise WireError(DropReason.OVERSIZED, f"{len(data)} bytes exceeds {limit}")
            sender, messages = self._envelopes.open(data)
        except WireError as exc:
            self._drop(src, exc)
            return
        if sender == self.name:
            return
        handlers = self._handlers
        if _EXCHANGE_TYPES.isdisjoint(map(type, messages)) and self._members.get(sender) is not None:
            settled = self._settled
            for message in messages:  # gossip from a known member: most packets, and nothing to hold back
                if settled.get(id(message)) is message:
                    continue
                handlers[type(message)](self, sender, message, now)
                if type(message) in _SETTLING and self._settles(message):
                    if len(settled) >= SETTLED_LIMIT:
                        settled.clear()
                    settled[id(message)] = message
            return
        later: list[Message] = []
        # memberlist's merge rule: a death heard in a state exchange is only a suspicion,
        # so a healed partition does not kill the members of our own side outright
        merging = any(isinstance(m, _EXCHANGES) for m in messages)
        known = self._members.get(sender) is not None
        for message in messages:
            if not known:
                if isinstance(message, Alive) and message.node == sender:
                    self.handle_alive(sender, message, now)
                    known = self._members.get(sender) is not None
                elif isinstance(message, _INTRODUCTIONS):
                    self._handlers[type(message)](self, sender, message, now)
                else:
                    self._drop(src, WireError(DropReason.UNKNOWN_SENDER, f"{type(message).__name__} from unknown {sender}"))
            elif isinstance(message, _EXCHANGES):
                later.append(message)  # answer after merging the state the frame carries
            elif merging and isinstance(message, Dead) and message.accuser != message.node:
                self._suspect(message.node, message.incarnation, message.accuser, now)
            else:
                self._handlers[type(message)](self, sender, message, now)
        for message in later:
            self._handlers[type(message)](self, sender, message, now)

    def _settles(self, message: Message) -> bool:
        """True if handling ``message`` again would change nothing until we forget a member or a
        record (then ``_settled`` is cleared).

        Decoding gives one object per distinct message bytes (``wire.decode``), and every member
        hears each piece of news ~retransmit_limit times: a repeat is then skipped by identity
        instead of handled. What handling depends on only grows: a member's incarnation (and at
        one incarnation its state only moves on: suspect, then dead), a record's version, our own
        incarnation. So news about a member is settled once we hold it at that incarnation or
        later (a member we hold dead at an older one may yet come back below it: not settled),
        a record once we hold it at that version or later (a tombstone for a record we do not
        hold is not stored, and would apply to an older version heard later: not settled), and
        news about ourselves once handled (a refutation outbids it). Our own records are never
        settled (their handling republishes).
        """
        if type(message) is Record:
            if message.owner == self.name:
                return False
            held = self._records.get(message.owner, message.key)
            return held is not None and held[0] >= message.version
        node = message.node  # type: ignore[union-attr]
        if node == self.name:
            return True
        row = self._members.get(node)
        return row is not None and row.incarnation >= message.incarnation  # type: ignore[union-attr]

    def _drop(self, src: str, exc: WireError) -> None:
        self.metrics.dropped[exc.reason] += 1
        level = logging.DEBUG if exc.reason in _QUIET_DROPS else logging.WARNING
        log.log(level, "%s dropped packet from %s: %s", self.name, src, exc)

    # ------------------------------------------------------------------ probing

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _probe_round(self, _: None, now: float) -> None:
        """End the previous probe round (suspecting a silent target) and start the next."""
        done, self._probe = self._probe, None
        if done is not None:
            self._finish_probe(done, now)
        score = self._awareness.score
        self._at(now + timeouts.scaled(self.config.probe_interval, score), self._probe_round, None)
        if self._left:
            return
        target = self._members.next_probe_target(self._rng)
        row = self._members.get(target) if target is not None else None
        if row is None:
            return
        probe = self._probe = _ProbeRound(row.name, row.incarnation, self._next_seq())
        messages: list[Message] = [Ping(probe.seq, row.name)]
        if row.state == _SUSPECT:
            messages.append(Suspect(row.name, row.incarnation, self.name))  # let it refute at once
        self.metrics.probes += 1
        self._send(row.name, messages, now)
        self._at(now + timeouts.scaled(self.config.probe_timeout, score), self._probe_timeout, probe)

    def _probe_settled(self, probe: _ProbeRound) -> bool:
        """Acked, or no longer the current round: its timeout has nothing to do."""
        return probe is not self._probe or probe.acked

    def _probe_timeout(self, probe: _ProbeRound, now: float) -> None:
        """No direct ack in time: ask k others to probe the target for us."""
        if self._probe_settled(probe):
            return
        helpers = self._members.sample(self._rng, self.config.indirect_checks, exclude=probe.target)
        for helper in helpers:
            self._send(helper, [IndirectPing(probe.seq, probe.target)], now)
        probe.expected_nacks = len(helpers)
        if self.config.stream_fallback_ping:
            # memberlist's TCP fallback: a reliable path when datagrams are being lost
            self._emit_data(probe.target, self._seal([Ping(probe.seq, probe.target)]), stream=True)

    def _finish_probe(self, probe: _ProbeRound, now: float) -> None:
        if probe.acked:
            self._awareness.apply(-1)
            return
        self.metrics.probe_failures += 1
        # Lifeguard: if helpers could not even nack, the fault is likely ours, not the target's
        missing = probe.expected_nacks - probe.nacks if probe.expected_nacks else 1
        self._awareness.apply(missing)
        row = self._members.get(probe.target)
        if row is not None and row.state in LIVE_STATES:
            self._suspect(probe.target, probe.incarnation, self.name, now)

    def _relay_timeout(self, seq: int, now: float) -> None:
        relay = self._relays.pop(seq, None)
        if relay is not None:
            self._send(relay[0], [Nack(relay[1])], now)

    def handle_ping(self, sender: str, msg: Ping, now: float) -> None:
        if msg.target != self.name:
            return
        if self._in_stream:  # answer a fallback ping the way it came
            self._emit_data(sender, self._seal([Ack(msg.seq)]), stream=True)
        else:
            self._send(sender, [Ack(msg.seq)], now)

    def handle_indirect_ping(self, sender: str, msg: IndirectPing, now: float) -> None:
        seq = self._next_seq()
        self._relays[seq] = (sender, msg.seq)
        self._send(msg.target, [Ping(seq, msg.target)], now)
        self._at(now + self.config.probe_timeout, self._relay_timeout, seq)

    def handle_ack(self, sender: str, msg: Ack, now: float) -> None:
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.acked = True
            return
        relay = self._relays.pop(msg.seq, None)
        if relay is not None:
            self._send(relay[0], [Ack(relay[1])], now)

    def handle_nack(self, sender: str, msg: Nack, now: float) -> None:
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.nacks += 1

    # ------------------------------------------------------------------ membership

    def _refute(self, accused: int, now: float) -> None:
        """Someone thinks we are not alive: outbid their incarnation and say so."""
        self.incarnation = max(self.incarnation, accused) + 1
        self.metrics.refutations += 1
        self._awareness.apply(1)
        self._broadcast((self.name, None), Alive(self.name, self.incarnation), now)

    def _set_member(self, name: str, incarnation: int, state: MemberState, now: float, message: Message) -> None:
        row = self._members.get(name)
        previous = None if row is None else row.state
        self._members.set(name, incarnation, state, now, self._rng)
        self._broadcast((name, None), message, now)
        if previous != state:
            self._out.append(MemberEvent(name, state, incarnation, previous))

    def handle_alive(self, sender: str, msg: Alive, now: float) -> None:
        if msg.node == self.name:
            if msg.incarnation > self.incarnation and not self._left:
                self._refute(msg.incarnation, now)  # a past life of ours spoke: outbid it
            return
        row = self._members.get(msg.node)
        if row is not None and msg.incarnation <= row.incarnation:
            return
        self._suspicions.pop(msg.node, None)
        self._set_member(msg.node, msg.incarnation, _ALIVE, now, msg)

    def handle_suspect(self, sender: str, msg: Suspect, now: float) -> None:
        self._suspect(msg.node, msg.incarnation, msg.accuser, now)

    def _suspect(self, name: str, incarnation: int, accuser: str, now: float) -> None:
        if name == self.name:
            if incarnation >= self.incarnation and not self._left:
                self._refute(incarnation, now)
            return
        row = self._members.get(name)
        if row is None or incarnation < row.incarnation:
            return
        if row.state == _SUSPECT:
            suspicion = self._suspicions.get(name)
            if suspicion is not None and suspicion.confirm(accuser):
                self._broadcast((name, None), Suspect(name, incarnation, accuser), now)
                self._watch_suspicions(suspicion.deadline())
            return
        if row.state != _ALIVE:
            return
        cfg = self.config
        n = self._cluster_size()
        k = cfg.suspicion_confirmations if n - 2 >= cfg.suspicion_confirmations else 0
        lo = timeouts.suspicion_min(cfg.suspicion_mult, n, cfg.probe_interval)
        suspicion = self._suspicions[name] = Suspicion(accuser, now, k, lo, lo * cfg.suspicion_max_mult)
        self._set_member(name, incarnation, _SUSPECT, now, Suspect(name, incarnation, accuser))
        self._watch_suspicions(suspicion.deadline())

    def _watch_suspicions(self, deadline: float) -> None:
        """Make sure a timer runs by ``deadline``: one timer watches every suspicion we hold.

        A timer per suspicion (and per confirmation) outlived the refutation that ended it,
        up to the longest suspicion timeout: 10,000 simulated nodes under loss held tens of
        millions of them.
        """
        if self._suspicions_at is None or deadline < self._suspicions_at:
            self._suspicions_at = deadline
            self._at(deadline, self._expire_suspicions, deadline)

    def _expire_suspicions(self, at: float, now: float) -> None:
        """Declare dead every suspect whose deadline passed; watch for the next deadline."""
        if at != self._suspicions_at:
            return  # an earlier watch superseded this one
        self._suspicions_at = None
        pending: list[float] = []
        for name, suspicion in list(self._suspicions.items()):
            deadline = suspicion.deadline()
            if now < deadline:
                pending.append(deadline)
                continue
            row = self._members.get(name)
            if row is not None:
                self._declare_dead(name, row.incarnation, self.name, now)
            self._suspicions.pop(name, None)
        if pending:
            self._watch_suspicions(min(pending))

    def handle_dead(self, sender: str, msg: Dead, now: float) -> None:
        if msg.node == self.name:
            if msg.incarnation >= self.incarnation and not self._left:
                self._refute(msg.incarnation, now)
            return
        self._declare_dead(msg.node, msg.incarnation, msg.accuser, now)

    def _declare_dead(self, name: str, incarnation: int, accuser: str, now: float) -> None:
        row = self._members.get(name)
        if row is None or incarnation < row.incarnation or row.state not in LIVE_STATES:
            return
        self._suspicions.pop(name, None)
        state = _LEFT if accuser == name else _DEAD
        self._set_member(name, incarnation, state, now, Dead(name, incarnation, accuser))
        self._at(now + self.config.reap_after, self._reap, (name, now))

    def _reap(self, arg: tuple[str, float], now: float) -> None:
        """Forget a member that stayed dead (or left) for ``reap_after``, with its records."""
        name, since = arg
        row = self._members.get(name)
        if row is None or row.state in LIVE_STATES or self._members.down_since(name) != since:
            return
        self._members.remove(name)
        self._settled.clear()  # news about it, or its records, may apply again
        self._broadcasts.drop((name, None))
        self._out.append(MemberEvent(name, None, row.incarnation, row.state))
        for key, (version, _) in self._records.drop_owner(name).items():
            self._out.append(RecordEvent(name, key, version, None))

    # ------------------------------------------------------------------ records

    def handle_record(self, sender: str, msg: Record, now: float) -> None:
        if msg.owner == self.name:
            if msg.version > self._clock:
                self._reclaim(msg.key, msg.version, now)
            elif msg.value is not None and self._records.get(self.name, msg.key) is None:
                self._publish(msg.key, None, now)  # a version that outlived its reaped tombstone: withdraw it again
            return
        row = self._members.get(msg.owner)
        if row is None or row.state not in LIVE_STATES:
            return  # records live and die with their owner
        if self._records.apply(msg.owner, msg.key, msg.version, msg.value, now):
            self._broadcast((msg.owner, msg.key), msg, now)
            self._out.append(RecordEvent(msg.owner, msg.key, msg.version, msg.value))

    def _reclaim(self, key: str, version: int, now: float) -> None:
        """A past life of ours published newer versions: outbid them with what we hold now."""
        self._clock = version
        held = self._records.get(self.name, key)
        self._publish(key, None if held is None else held[1], now)

    # ------------------------------------------------------------------ gossip and anti-entropy

    def _gossip_round(self, start: float | None, now: float) -> None:
        """Push ready news to ``fanout`` members; the next round follows while news remains.

        ``start`` is the round's scheduled start, or None for the extra round that sends
        news of our own at once.
        """
        if start is None:
            self._burst_at = None
        elif start != self._round_at:
            return
        else:
            self._round_at = None
        for peer in self._members.sample(self._rng, self.config.fanout):
            self._send(peer, [], now)

    def _pushpull_round(self, _: None, now: float) -> None:
        cfg = self.config
        self._pushpull_rounds += 1
        if self._records.reap(now - cfg.tombstone_ttl):
            self._settled.clear()  # a record we held, now forgotten, may be heard anew
        lonely = self._members.live_count() == 0
        # while we know nobody, keep retrying the seeds every few probe intervals
        self._at(now + (min(cfg.pushpull_interval, 5 * cfg.probe_interval) if lonely else cfg.pushpull_interval), self._pushpull_round, None)
        peer = None
        if lonely or self._pushpull_rounds % cfg.rejoin_every == 0:
            lost = [s for s in self._seeds if (row := self._members.get(s)) is None or row.state not in LIVE_STATES]
            peer = self._rng.choice(lost) if lost else None
        if peer is None:
            peer = next(iter(self._members.sample(self._rng, 1)), None)
        if peer is not None:
            self._start_exchange(peer, now)

    def _salt(self, now: float) -> int:
        return int(now / (self.config.pushpull_interval * self.config.digest_salt_exchanges)) & 0xFFFFFFFF

    def _start_exchange(self, peer: str, now: float) -> None:
        me = Alive(self.name, self.incarnation)
        if self.config.full_state_pushpull:
            state = antientropy.full_state(self.name, self.incarnation, self._members, self._records)
            self._send_frame(peer, [me, PushPull(False), *state[1:]])
            return
        salt = self._salt(now)
        self._send_frame(peer, [me, DigestRequest(salt, self._digest(salt))])
        self._count_full_state()

    def _count_full_state(self) -> None:
        if self.config.count_full_state:
            self.metrics.full_state_bytes_counted += self.full_state_frame_size()

    def full_state_frame_size(self) -> int:
        """Bytes of the sealed full-state push-pull frame we would send now (request or reply: the
        same length), computed without building it; benchmarks compare the digest exchange with it."""
        body = antientropy.full_state_body_size(self.name, self.incarnation, self._members, self._records, self._shared)
        return self._envelopes.overhead + body

    def _entries(self, salt: int) -> Iterator[tuple[str, antientropy.Ref]]:
        return antientropy.digest_entries(self.name, self.incarnation, self._members, self._records, salt)

    def _digest(self, salt: int) -> bytes:
        """Our Bloom digest under this salt (hashed a chunk at a time: see :mod:`gossip.digests`)."""
        count = antientropy.entry_count(self._members, self._records)
        rate = self.config.digest_error_rate
        if self._shared is None:
            return digests.build((key for key, _ in self._entries(salt)), count, rate)
        hashed, held, own = self._shared_parts(salt, digests.capacity_for(count), rate)
        return digests.build((key for key, _ in own), count, rate, (hashed, held))

    def _missing_from(self, bloom: bytes, salt: int) -> list[Message]:
        """State messages for every entry the peer's digest does not cover."""
        theirs = digests.parse(bloom, self.config.max_digest_capacity)
        if self._shared is None:
            lacking = digests.missing(theirs, self._entries(salt))
        else:
            hashed, held, own = self._shared_parts(salt, *digests.geometry(theirs))
            lacking = digests.missing(theirs, own, (hashed, held, self._shared.refs))
        return list(antientropy.state_messages(self.name, self.incarnation, self._members, self._records, lacking))

    def _shared_parts(self, salt: int, capacity: int, rate: float) -> tuple[Any, Any, Iterator[tuple[str, antientropy.Ref]]]:
        assert self._shared is not None
        return antientropy.digest_parts(self.name, self.incarnation, self._members, self._records, self._shared, salt, capacity, rate)

    def handle_digest_request(self, sender: str, msg: DigestRequest, now: float) -> None:
        try:
            lacking = self._missing_from(msg.bloom, msg.salt)
        except WireError as exc:
            self._drop(sender, exc)
            return
        reply = DigestReply(msg.salt, self._digest(msg.salt))
        self._send_frame(sender, [Alive(self.name, self.incarnation), reply, *lacking])
        self._count_full_state()

    def handle_digest_reply(self, sender: str, msg: DigestReply, now: float) -> None:
        try:
            lacking = self._missing_from(msg.bloom, msg.salt)
        except WireError as exc:
            self._drop(sender, exc)
            return
        if lacking:
            self._send_frame(sender, [Alive(self.name, self.incarnation), Delta(), *lacking])

    def handle_delta(self, sender: str, msg: Delta, now: float) -> None:
        """Nothing to answer: the frame's state messages were merged already."""

    def handle_push_pull(self, sender: str, msg: PushPull, now: float) -> None:
        if not msg.reply:
            state = antientropy.full_state(self.name, self.incarnation, self._members, self._records)
            self._send_frame(sender, [state[0], PushPull(True), *state[1:]])

    _handlers: dict[type, Callable[[GossipNode, str, Any, float], None]] = {
        Ping: handle_ping,
        IndirectPing: handle_indirect_ping,
        Ack: handle_ack,
        Nack: handle_nack,
        Alive: handle_alive,
        Suspect: handle_suspect,
        Dead: handle_dead,
        Record: handle_record,
        DigestRequest: handle_digest_request,
        DigestReply: handle_digest_reply,
        PushPull: handle_push_pull,
        Delta: handle_delta,
    }
