"""The sans-IO gossip node: SWIM + Lifeguard membership and versioned-record anti-entropy.

Rules, in the order a reader needs them:

* Time and chance come in from outside: every entry point takes ``now`` and the node
  draws only from its own ``random.Random``. It never touches a socket or a clock.
* Every entry point returns a list of effects (``effects``): datagrams and stream frames
  to send, member and record events to deliver. ``next_deadline()`` says when ``tick``
  must be called next.

``GossipNode`` is the face drivers see (``udp.UdpGossip``, the lab's in-memory network);
it composes collaborators with one concern each, as memberlist's files do, and they share
the member table (:mod:`gossip.members`), the record store (:mod:`gossip.records`) and the
timer heap (:mod:`gossip.timers`):

* :mod:`gossip.probing`: failure detection (probe rounds, indirect probes, Lifeguard).
* :mod:`gossip.membership`: member state changes, suspicions, refutation, reaping.
* :mod:`gossip.publishing`: our records and the records we hear.
* :mod:`gossip.exchanging`: push-pull anti-entropy with Bloom digests, and joining.
* :mod:`gossip.dispatching`: what arrives, to which ``handle_<msg>``, and what is dropped.
* :mod:`gossip.sending`: what leaves: datagrams with piggybacked news, frames, gossip rounds.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from gossip.awareness import Awareness
from gossip.config import GossipConfig
from gossip.dispatching import Dispatcher, Handler
from gossip.effects import Effect
from gossip.envelopes import Envelopes
from gossip.exchanging import Exchanger
from gossip.keyring import Keyring
from gossip.members import MemberState, MemberView, Members
from gossip.membership import Membership
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
from gossip.probing import Prober
from gossip.publishing import Publisher
from gossip.records import RecordStore, RecordValue
from gossip.sending import Outbox
from gossip.shared import SharedState
from gossip.timers import Timers


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
        self.config = cfg = config or GossipConfig()
        self.metrics = metrics = Counters()
        self._members = members = Members()
        self._records = records = RecordStore()
        self._timers = timers = Timers()
        self._awareness = awareness = Awareness(cfg.awareness_max)
        settled: dict[int, Message] = {}
        self._settled = settled
        """Messages heard that hearing again cannot change anything, by identity (see :mod:`gossip.dispatching`)."""
        self._heard: dict[str, float] | None = {} if cfg.hearing else None
        """Member -> when we last heard from it (``GossipConfig.hearing``)."""
        heard = self._heard
        self._envelopes = envelopes = Envelopes(name, epoch, keyring)
        self._outbox = outbox = Outbox(
            name, config=cfg, envelopes=envelopes, members=members, rng=rng, timers=timers, metrics=metrics,
            round_offset=round_offset,
        )
        self._membership = membership = Membership(
            name, config=cfg, rng=rng, members=members, records=records, outbox=outbox, timers=timers,
            awareness=awareness, metrics=metrics, settled=settled, heard=heard,
        )
        self._prober = prober = Prober(
            name, config=cfg, rng=rng, members=members, membership=membership, outbox=outbox, timers=timers,
            awareness=awareness, metrics=metrics, heard=heard,
        )
        self._publisher = publisher = Publisher(name, members=members, records=records, outbox=outbox)
        self._exchanger = exchanger = Exchanger(
            name, config=cfg, rng=rng, members=members, records=records, membership=membership, outbox=outbox,
            timers=timers, metrics=metrics, settled=settled,
        )
        handlers: dict[type, Handler] = {
            Ping: prober.handle_ping,
            IndirectPing: prober.handle_indirect_ping,
            Ack: prober.handle_ack,
            Nack: prober.handle_nack,
            Alive: membership.handle_alive,
            Suspect: membership.handle_suspect,
            Dead: membership.handle_dead,
            Record: publisher.handle_record,
            DigestRequest: exchanger.handle_digest_request,
            DigestReply: exchanger.handle_digest_reply,
            PushPull: exchanger.handle_push_pull,
            Delta: exchanger.handle_delta,
        }
        self._dispatcher = Dispatcher(
            name, handlers=handlers, members=members, records=records, envelopes=envelopes, membership=membership,
            metrics=metrics, settled=settled, heard=heard,
        )
        prober.start(now)
        exchanger.start(now)

    def join(self, seeds: Sequence[str], now: float) -> list[Effect]:
        """Start an anti-entropy exchange with every seed; retried while we see no majority alive."""
        self._exchanger.join(seeds, now)
        return self._outbox.flush(now)

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
        self._membership.restore(members, now)
        self._publisher.restore(records, now)
        return self._outbox.flush(now)

    def adopt(self, state: SharedState, now: float) -> list[Effect]:
        """Start from a state shared with other in-process nodes, as ``restore`` would, without copying it.

        For simulated clusters that all start from one snapshot: the node reads through to
        ``state`` and copies only what changes. No events are emitted for what the state
        holds (the caller built it). Raises ValueError unless the node is still empty.
        """
        if len(self._members) or len(self._records):
            raise ValueError("adopt needs a node that holds nothing yet")
        self._membership.adopt(state.members)
        self._publisher.adopt(state)
        self._exchanger.shared = state
        return self._outbox.flush(now)

    def publish(self, key: str, value: RecordValue, now: float) -> list[Effect]:
        """Publish (or, with None, withdraw) one of our records; raises ValueError if unencodable."""
        self._publisher.publish(key, value, now)
        return self._outbox.flush(now)

    def leave(self, now: float) -> list[Effect]:
        """Announce a graceful departure; keep ticking a few gossip rounds so it spreads."""
        self._membership.leave(now)
        return self._outbox.flush(now)

    def on_packet(self, src: str, data: bytes, now: float) -> list[Effect]:
        """A datagram arrived; ``src`` is the transport address, used only for logging."""
        self.metrics.packets_in += 1
        self._dispatcher.receive(src, data, now, self.config.mtu)
        return self._outbox.flush(now)

    def on_stream(self, src: str, data: bytes, now: float) -> list[Effect]:
        """A whole stream frame arrived (the driver strips its length prefix)."""
        self.metrics.streams_in += 1
        self._outbox.over_stream = True
        try:
            self._dispatcher.receive(src, data, now, self.config.max_stream_bytes)
        finally:
            self._outbox.over_stream = False
        return self._outbox.flush(now)

    def on_refused(self, addr: str, now: float) -> list[Effect]:
        """The driver's stream to ``addr`` was refused by its host (no process listens): evidence for a probe round."""
        self._prober.handle_refused(addr, now)
        return self._outbox.flush(now)

    def tick(self, now: float) -> list[Effect]:
        """Run every timer due at ``now``."""
        self._timers.run_due(now)
        return self._outbox.flush(now)

    def next_deadline(self) -> float:
        """When ``tick`` must next be called (an answered probe's timeout is dropped, not woken for)."""
        return self._timers.next_deadline(self._prober.is_idle_timer)

    @property
    def incarnation(self) -> int:
        """Ours: raised by each refutation."""
        return self._membership.incarnation

    def members(self) -> dict[str, MemberView]:
        """Every member we know, ourselves included."""
        views = {v.name: v for v in self._members.views()}
        me = self._membership
        views[self.name] = MemberView(self.name, me.incarnation, MemberState.LEFT if me.left else MemberState.ALIVE)
        return views

    def heard(self) -> dict[str, float]:
        """Member -> when we last heard from it (a packet it sealed, or its ack relayed by a helper), on our clock;
        empty unless ``config.hearing``. An ALIVE row is sticky until a probe fails; this is not."""
        return dict(self._heard) if self._heard is not None else {}

    def records(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """owner -> key -> (version, value) of every record we hold (tombstones have value None)."""
        return self._records.snapshot()

    def record(self, owner: str, key: str) -> tuple[int, RecordValue] | None:
        """(version, value) of one record we hold (value None: a tombstone), or None."""
        return self._records.get(owner, key)

    def full_state_frame_size(self) -> int:
        """Bytes of the sealed full-state push-pull frame we would send now (request or reply: the
        same length), computed without building it; benchmarks compare the digest exchange with it."""
        return self._exchanger.full_state_frame_size()

    @property
    def awareness(self) -> int:
        """Lifeguard local-health score: 0 is healthy."""
        return self._awareness.score

    @property
    def keyring(self) -> Keyring | None:
        return self._envelopes.keyring
