"""Inbound: open a datagram or stream frame and hand each message to its ``handle_<msg>``.

The receive path of :class:`gossip.node.GossipNode` (memberlist's ``handleCommand``). The
node builds the table of handlers from its collaborators (``probing``, ``membership``,
``publishing``, ``exchanging``); this module decides which messages reach them and in which
order:

* Unknown senders: a sender that is not in our table may only probe (Ping, Ack, Nack)
  and introduce itself (an Alive about itself, which opens every push-pull frame, i.e.
  a join). Everything else it sends is dropped and counted until it is known.
* A push-pull frame is merged before it is answered, and a death it carries is only a
  suspicion (memberlist's merge rule).
* Repeated news is skipped: every member hears each piece of news ~retransmit_limit times,
  and a repeat that cannot change anything is recognised by identity (``settled``).

Malformed, forged, replayed or oversized packets are logged with the peer and dropped (``drop``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gossip.envelopes import Envelopes
from gossip.members import Members
from gossip.membership import Membership
from gossip.messages import Ack, Alive, Dead, Delta, DigestReply, DigestRequest, Message, Nack, Ping, PushPull, Record, Suspect
from gossip.metrics import Counters
from gossip.records import RecordStore
from gossip.wire import DropReason, WireError

log = logging.getLogger("gossip")

Handler = Callable[[str, Any, float], None]
"""``handle_<msg>(sender, message, now)``: what a message type does to the node."""

_QUIET_DROPS = (DropReason.REPLAYED, DropReason.UNKNOWN_SENDER)
"""Expected in normal operation (duplicated datagrams, gossip racing a join): logged at debug."""
_INTRODUCTIONS = (Ping, Ack, Nack)
_EXCHANGES = (DigestRequest, DigestReply, PushPull, Delta)
_EXCHANGE_TYPES = frozenset(_EXCHANGES)
_SETTLING = frozenset((Alive, Suspect, Dead, Record))
"""News whose repeats ``Dispatcher._settles`` can recognise."""
SETTLED_LIMIT = 1024
"""Settled messages a node remembers before starting over (~100 KiB): a piece of news is heard
again within about a second of the first time, so this covers several seconds of news."""


def drop(node: str, metrics: Counters, src: str, exc: WireError) -> None:
    """Count and log a refused packet (or part of one): it never escapes the receive path."""
    metrics.dropped[exc.reason] += 1
    level = logging.DEBUG if exc.reason in _QUIET_DROPS else logging.WARNING
    log.log(level, "%s dropped packet from %s: %s", node, src, exc)


class Dispatcher:
    """Opens what arrives and runs each message's handler, under the rules above."""

    __slots__ = ("handlers", "_name", "_members", "_records", "_envelopes", "_membership", "_metrics", "_settled", "_heard")

    def __init__(
        self,
        name: str,
        *,
        handlers: dict[type, Handler],
        members: Members,
        records: RecordStore,
        envelopes: Envelopes,
        membership: Membership,
        metrics: Counters,
        settled: dict[int, Message],
        heard: dict[str, float] | None = None,
    ) -> None:
        """``settled`` holds the news heard that hearing again cannot change anything, by identity;
        whoever forgets a member or a record clears it (``membership``'s reap, expired tombstones).
        ``heard`` (``GossipConfig.hearing``): member -> when a packet it sealed last arrived."""
        self.handlers = handlers
        self._name = name
        self._members = members
        self._records = records
        self._envelopes = envelopes
        self._membership = membership
        self._metrics = metrics
        self._settled = settled
        self._heard = heard

    def receive(self, src: str, data: bytes, now: float, limit: int) -> None:
        """Handle one datagram or stream frame of at most ``limit`` bytes from transport address ``src``."""
        self._metrics.bytes_in += len(data)
        try:
            if len(data) > limit:
                raise WireError(DropReason.OVERSIZED, f"{len(data)} bytes exceeds {limit}")
            sender, messages = self._envelopes.open(data)
        except WireError as exc:
            drop(self._name, self._metrics, src, exc)
            return
        if sender == self._name:
            return
        handlers = self.handlers
        known = self._members.get(sender) is not None
        if known and self._heard is not None:
            self._heard[sender] = now
        if known and _EXCHANGE_TYPES.isdisjoint(map(type, messages)):
            settled = self._settled
            for message in messages:  # gossip from a known member: most packets, and nothing to hold back
                if settled.get(id(message)) is message:
                    continue
                handlers[type(message)](sender, message, now)
                if type(message) in _SETTLING and self._settles(message):
                    if len(settled) >= SETTLED_LIMIT:
                        settled.clear()
                    settled[id(message)] = message
            return
        later: list[Message] = []
        # memberlist's merge rule: a death heard in a state exchange is only a suspicion,
        # so a healed partition does not kill the members of our own side outright
        merging = any(isinstance(m, _EXCHANGES) for m in messages)
        for message in messages:
            if not known:
                if isinstance(message, Alive) and message.node == sender:
                    self._membership.handle_alive(sender, message, now)
                    known = self._members.get(sender) is not None
                elif isinstance(message, _INTRODUCTIONS):
                    handlers[type(message)](sender, message, now)
                else:
                    drop(self._name, self._metrics, src, WireError(DropReason.UNKNOWN_SENDER, f"{type(message).__name__} from unknown {sender}"))
            elif isinstance(message, _EXCHANGES):
                later.append(message)  # answer after merging the state the frame carries
            elif merging and isinstance(message, Dead) and message.accuser != message.node:
                self._membership.suspect(message.node, message.incarnation, message.accuser, now)
            else:
                handlers[type(message)](sender, message, now)
        for message in later:
            handlers[type(message)](sender, message, now)

    def _settles(self, message: Message) -> bool:
        """True if handling ``message`` again would change nothing until we forget a member or a
        record (then ``settled`` is cleared).

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
            if message.owner == self._name:
                return False
            held = self._records.get(message.owner, message.key)
            return held is not None and held[0] >= message.version
        node = message.node  # type: ignore[union-attr]
        if node == self._name:
            return True
        row = self._members.get(node)
        return row is not None and row.incarnation >= message.incarnation  # type: ignore[union-attr]
