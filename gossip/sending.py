"""What a node sends: sealed datagrams carrying piggybacked news, anti-entropy frames, events.

The outbox of :class:`gossip.node.GossipNode`. Its collaborators (``probing``,
``membership``, ``publishing``, ``exchanging``) queue news with ``broadcast``, send with
``send``, ``send_frame`` or ``send_stream`` and hand events to ``emit``; ``flush`` gives
the driver the effects (:mod:`gossip.effects`). Sealing is :mod:`gossip.envelopes`'.

Dissemination runs here too (memberlist's ``gossip()``): news waits in a
:class:`gossip.broadcasts.BroadcastQueue`, rides on every datagram and is pushed to
``fanout`` members each gossip round, each piece sent a bounded number of times. Rounds are
synchronous, as in the epidemic model behind Serf's convergence figures: they start on a
grid of the (shared) clock, and news we relay waits for our next round, so it travels one
hop per round. News of our own (a record we publish, a refutation, a suspicion we raise)
goes out at once, in an extra round.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from operator import attrgetter
from typing import Any

from gossip import timeouts, wire
from gossip.broadcasts import BroadcastQueue
from gossip.config import GossipConfig
from gossip.effects import Effect, Send, SendStream
from gossip.envelopes import Envelopes
from gossip.members import Members
from gossip.messages import Alive, Dead, Message, Record, Suspect
from gossip.metrics import Counters
from gossip.timers import Timers

_ORIGINS: dict[type, Callable[[Any], str]] = {
    Alive: attrgetter("node"), Suspect: attrgetter("accuser"), Dead: attrgetter("accuser"), Record: attrgetter("owner")
}
"""Who raised a piece of news: the member it vouches for, its accuser or its record's owner."""


class Outbox:
    """Effects on their way to the driver, and the gossip rounds that push queued news."""

    __slots__ = (
        "over_stream", "_effects", "_name", "_config", "_envelopes", "_members", "_rng", "_timers", "_metrics",
        "_broadcasts", "_round_offset", "_round_at", "_burst_at",
    )

    def __init__(
        self,
        name: str,
        *,
        config: GossipConfig,
        envelopes: Envelopes,
        members: Members,
        rng: random.Random,
        timers: Timers,
        metrics: Counters,
        round_offset: float,
    ) -> None:
        self.over_stream = False
        """True while the node handles a stream frame: a fallback ping is answered over a stream."""
        self._effects: list[Effect] = []
        self._name = name
        self._config = config
        self._envelopes = envelopes
        self._members = members
        self._rng = rng
        self._timers = timers
        self._metrics = metrics
        self._broadcasts = BroadcastQueue()
        self._round_offset = round_offset
        self._round_at: float | None = None
        """When the next gossip round starts (one is scheduled only while broadcasts are queued)."""
        self._burst_at: float | None = None
        """When the extra round sending news of our own at once runs (None if none is scheduled)."""

    @property
    def overhead(self) -> int:
        """Bytes sealing adds to a body."""
        return self._envelopes.overhead

    def flush(self, now: float) -> list[Effect]:
        """Hand over the effects, making sure a gossip round is scheduled while news is queued.

        Rounds run only while there is news to push, so an idle node's only timers are its
        probe and push-pull rounds (each wake-up of an idle daemon costs CPU on a small board).
        """
        if self._round_at is None and len(self._broadcasts):
            self._round_at = timeouts.next_round(now, self._config.gossip_interval, self._round_offset)
            self._timers.at(self._round_at, self._gossip_round, self._round_at)
        out, self._effects = self._effects, []
        return out

    def emit(self, effect: Effect) -> None:
        """An effect for the driver that is not a send: a member or record event."""
        self._effects.append(effect)

    def broadcast(self, subject: Hashable, message: Message, now: float) -> None:
        """Queue news: ours goes out at once (an extra round now), relayed news from our next round."""
        payload = wire.encode(message)
        if len(payload) > self._config.mtu - self._envelopes.overhead - 3:
            return
        if _ORIGINS[type(message)](message) == self._name:
            self._broadcasts.queue(subject, payload)
            if self._burst_at is None:
                self._burst_at = now
                self._timers.at(now, self._gossip_round, None)
        else:
            ready = timeouts.next_round(now, self._config.gossip_interval, self._round_offset)
            self._broadcasts.queue(subject, payload, ready)

    def forget(self, subject: Hashable) -> None:
        """Stop sending the news queued about ``subject`` (a reaped member)."""
        self._broadcasts.drop(subject)

    def send(self, to: str, messages: list[Message], now: float) -> None:
        """One datagram: the given messages plus as many ready broadcasts as fit in the MTU."""
        encoded = [wire.encode(m) for m in messages]
        budget = self._config.mtu - self._envelopes.overhead - 3 - sum(map(len, encoded))
        limit = timeouts.retransmit_limit(self._config.retransmit_mult, self._members.cluster_size())
        encoded += self._broadcasts.take(budget, limit, now)
        if encoded:
            self._emit_data(to, self._envelopes.seal(wire.join(encoded)))

    def seal(self, messages: list[Message]) -> bytes:
        """Messages alone, without piggybacked broadcasts."""
        return self._envelopes.seal(wire.join([wire.encode(m) for m in messages]))

    def send_stream(self, to: str, messages: list[Message]) -> None:
        """Messages alone over a stream: the reliable path when datagrams are being lost."""
        self._emit_data(to, self.seal(messages), stream=True)

    def send_frame(self, to: str, messages: list[Message]) -> None:
        """An anti-entropy frame: a datagram if it fits, else a stream."""
        data = self.seal(messages)
        self._metrics.antientropy_bytes_out += len(data)
        self._emit_data(to, data)

    def _emit_data(self, to: str, data: bytes, stream: bool = False) -> None:
        self._metrics.bytes_out += len(data)
        if len(data) <= self._config.mtu and not stream:
            self._metrics.packets_out += 1
            self._effects.append(Send(to, data))
        else:
            self._metrics.streams_out += 1
            self._effects.append(SendStream(to, data))

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
        for peer in self._members.sample(self._rng, self._config.fanout):
            self.send(peer, [], now)
