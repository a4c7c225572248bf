"""Failure detection: SWIM probe rounds with indirect probes and Lifeguard's local health.

The failure detector of :class:`gossip.node.GossipNode` (memberlist's ``probe`` and
``probeNode`` in state.go). One probe round per (awareness-scaled) probe interval: a ping
unanswered within the (scaled) probe timeout is retried through k members, and over a
stream when ``stream_fallback_ping`` is on; a target still silent when the round ends is
suspected (:mod:`gossip.membership`); one whose host refused the stream is suspected at once
and declared dead soon after (``GossipConfig.refused_suspicion``). A suspect others accused is
probed first when membership asks us to vouch for it (``Membership.to_vouch``); the round-robin
order resumes after.
Lifeguard: a failed probe that the helpers could not even nack raises our awareness score
(:mod:`gossip.awareness`), which stretches our own timeouts; an acked one lowers it. It also
runs the indirect probes other members ask of us.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from gossip import timeouts
from gossip.awareness import Awareness
from gossip.config import GossipConfig
from gossip.members import LIVE_STATES, MemberState, Members
from gossip.membership import Membership
from gossip.messages import Ack, IndirectPing, Message, Nack, Ping, Suspect
from gossip.metrics import Counters
from gossip.sending import Outbox
from gossip.timers import Callback, Timers

_SUSPECT = MemberState.SUSPECT
NACK_SHARE = 0.8
"""A helper nacks an indirect probe this share of the probe timeout after it relayed it (Lifeguard's 80%):
the prober asks at one probe timeout into its round and closes the round one more in, so a nack sent a full
probe timeout after the relay arrived as the round closed and counted as missing. Every prober of a dead
member then read three missing nacks as its own fault (awareness 0 -> 3 on a 5-member LAN, 6-9 s to decay)."""


@dataclass(slots=True)
class _ProbeRound:
    target: str
    incarnation: int
    seq: int
    acked: bool = False
    nacks: int = 0
    expected_nacks: int = 0


class Prober:
    """Our probe rounds, and the indirect probes we run for others."""

    __slots__ = (
        "_name", "_config", "_rng", "_members", "_membership", "_outbox", "_timers", "_awareness", "_metrics",
        "_seq", "_probe", "_relays", "_heard",
    )

    def __init__(
        self,
        name: str,
        *,
        config: GossipConfig,
        rng: random.Random,
        members: Members,
        membership: Membership,
        outbox: Outbox,
        timers: Timers,
        awareness: Awareness,
        metrics: Counters,
        heard: dict[str, float] | None = None,
    ) -> None:
        """``heard`` (``GossipConfig.hearing``): a target's ack relayed by a helper is heard from the target too."""
        self._name = name
        self._config = config
        self._rng = rng
        self._members = members
        self._membership = membership
        self._outbox = outbox
        self._timers = timers
        self._awareness = awareness
        self._metrics = metrics
        self._seq = 0
        self._probe: _ProbeRound | None = None
        self._relays: dict[int, tuple[str, int]] = {}
        """Indirect probes we run for others: our ping seq -> (requester, its seq)."""
        self._heard = heard

    def start(self, now: float) -> None:
        """Schedule the first probe round at a random point of the first interval."""
        self._timers.at(now + self._rng.uniform(0, self._config.probe_interval), self._probe_round, None)

    def is_idle_timer(self, fn: Callback, arg: Any) -> bool:
        """True for the timeout of a probe that was answered or whose round ended: it would do nothing."""
        return fn == self._probe_timeout and self._probe_settled(arg)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _probe_round(self, _: None, now: float) -> None:
        """End the previous probe round (suspecting a silent target) and start the next."""
        done, self._probe = self._probe, None
        if done is not None:
            self._finish_probe(done, now)
        score = self._awareness.score
        self._timers.at(now + timeouts.scaled(self._config.probe_interval, score), self._probe_round, None)
        if self._membership.left:
            return
        target = self._vouch_target() or self._members.next_probe_target(self._rng)
        row = self._members.get(target) if target is not None else None
        if row is None:
            return
        probe = self._probe = _ProbeRound(row.name, row.incarnation, self._next_seq())
        messages: list[Message] = [Ping(probe.seq, row.name)]
        if row.state == _SUSPECT:
            messages.append(Suspect(row.name, row.incarnation, self._name))  # let it refute at once
        self._metrics.probes += 1
        self._outbox.send(row.name, messages, now)
        self._timers.at(now + timeouts.scaled(self._config.probe_timeout, score), self._probe_timeout, probe)

    def _vouch_target(self) -> str | None:
        """A suspect others accused that still wants our confirmation (or refutation), ahead of the round-robin order."""
        vouch = self._membership.to_vouch
        while vouch:
            name, incarnation = vouch.pop(0)
            if self._membership.needs_vouch(name, incarnation):
                return name
        return None

    def _probe_settled(self, probe: _ProbeRound) -> bool:
        """Acked, or no longer the current round: its timeout has nothing to do."""
        return probe is not self._probe or probe.acked

    def _probe_timeout(self, probe: _ProbeRound, now: float) -> None:
        """No direct ack in time: ask k others to probe the target for us."""
        if self._probe_settled(probe):
            return
        helpers = self._members.sample(self._rng, self._config.indirect_checks, exclude=probe.target)
        for helper in helpers:
            self._outbox.send(helper, [IndirectPing(probe.seq, probe.target)], now)
        probe.expected_nacks = len(helpers)
        if self._config.stream_fallback_ping:
            # memberlist's TCP fallback: a reliable path when datagrams are being lost
            self._outbox.send_stream(probe.target, [Ping(probe.seq, probe.target)])

    def _finish_probe(self, probe: _ProbeRound, now: float) -> None:
        if probe.acked:
            self._awareness.apply(-1)
            return
        # Lifeguard: if helpers could not even nack, the fault is likely ours, not the target's
        missing = probe.expected_nacks - probe.nacks if probe.expected_nacks else 1
        self._awareness.apply(missing)
        self._failed(probe, now, refused=False)

    def _failed(self, probe: _ProbeRound, now: float, refused: bool) -> None:
        """Count a failed probe and suspect its target if it still reads live."""
        self._metrics.probe_failures += 1
        row = self._members.get(probe.target)
        if row is not None and row.state in LIVE_STATES:
            self._membership.suspect(probe.target, probe.incarnation, self._name, now, refused=refused)

    def _relay_timeout(self, seq: int, now: float) -> None:
        relay = self._relays.pop(seq, None)
        if relay is not None:
            self._outbox.send(relay[0], [Nack(relay[1])], now)

    def handle_ping(self, sender: str, msg: Ping, now: float) -> None:
        if msg.target != self._name:
            return
        if self._outbox.over_stream:  # answer a fallback ping the way it came
            self._outbox.send_stream(sender, [Ack(msg.seq)])
        else:
            self._outbox.send(sender, [Ack(msg.seq)], now)

    def handle_indirect_ping(self, sender: str, msg: IndirectPing, now: float) -> None:
        seq = self._next_seq()
        self._relays[seq] = (sender, msg.seq)
        self._outbox.send(msg.target, [Ping(seq, msg.target)], now)
        self._timers.at(now + NACK_SHARE * self._config.probe_timeout, self._relay_timeout, seq)

    def handle_ack(self, sender: str, msg: Ack, now: float) -> None:
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.acked = True
            if self._heard is not None:
                self._heard[probe.target] = now
            return
        relay = self._relays.pop(msg.seq, None)
        if relay is not None:
            self._outbox.send(relay[0], [Ack(relay[1])], now)

    def handle_refused(self, target: str, now: float) -> None:
        """The driver's fallback stream to ``target`` was refused while that probe is unanswered: the round ends now.

        The target's host said no process listens there, so no helper's ack is coming: waiting for the round's
        end would only delay the suspicion. Not our fault either, so our awareness is left alone; nacks that
        arrive later find no round and are ignored."""
        probe = self._probe
        if probe is None or probe.target != target or probe.acked:
            return
        self._probe = None
        self._failed(probe, now, refused=True)

    def handle_nack(self, sender: str, msg: Nack, now: float) -> None:
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.nacks += 1
