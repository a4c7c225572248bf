"""Membership changes: who is alive, suspected, dead or gone, and our own refutations.

The SWIM state machine of :class:`gossip.node.GossipNode` (memberlist's ``aliveNode``,
``suspectNode`` and ``deadNode`` in state.go, with suspicion.go's timers). It owns our
incarnation and whether we left; the rows live in :class:`gossip.members.Members`, each
suspicion's shrinking timeout in :class:`gossip.suspicion.Suspicion`.

* A member is suspected by ``probing`` (a silent target) or by news; its suspicion expires
  after a timeout that scales with log N and shrinks with independent confirmations, and it
  is declared dead then. One timer watches every suspicion.
* Confirmations are sought, not only waited for: a member that learns of someone else's
  suspicion probes the suspect in its next round (:attr:`Membership.to_vouch`) with a chance
  that gives the suspicion about ``2k`` such probers in any cluster size (all of them in a
  small one). Waiting for the usual round-robin to reach the suspect, a 5-member cluster's
  three confirmations took up to 4 s more, so a crashed member's suspicion ran up to 8.75 s
  instead of its 2.5 s minimum; a live suspect answers the probe and is told to refute.
* A suspected node refutes by raising its incarnation; each refutation raises our
  Lifeguard awareness score (:mod:`gossip.awareness`), which stretches our own timeouts.
* A dead or departed member is reaped ``reap_after`` later, with its records.

Every change is broadcast through :mod:`gossip.sending` and reported as a ``MemberEvent``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from gossip import timeouts
from gossip.awareness import Awareness
from gossip.config import GossipConfig
from gossip.effects import MemberEvent, RecordEvent
from gossip.members import LIVE_STATES, MemberState, Members, SharedRows
from gossip.messages import Alive, Dead, Message, Suspect
from gossip.metrics import Counters
from gossip.records import RecordStore
from gossip.sending import Outbox
from gossip.suspicion import Suspicion
from gossip.timers import Timers

_ALIVE, _SUSPECT, _DEAD, _LEFT = MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD, MemberState.LEFT
"""Module constants: reading ``MemberState.X`` costs ~170 ns (a lookup on the enum class), and
the handlers compare states for every message a node hears."""


class Membership:
    """Member state transitions, suspicion timers, refutation and reaping."""

    __slots__ = (
        "incarnation", "left", "suspicions", "_suspicions_at", "_name", "_config", "_rng", "_members", "_records",
        "_outbox", "_timers", "_awareness", "_metrics", "_settled", "_heard", "to_vouch",
    )

    def __init__(
        self,
        name: str,
        *,
        config: GossipConfig,
        rng: random.Random,
        members: Members,
        records: RecordStore,
        outbox: Outbox,
        timers: Timers,
        awareness: Awareness,
        metrics: Counters,
        settled: dict[int, Message],
        heard: dict[str, float] | None = None,
    ) -> None:
        """``settled`` is the inbound skip of repeated news (:mod:`gossip.dispatching`), cleared on a reap;
        ``heard`` (``GossipConfig.hearing``) loses a reaped member's entry."""
        self.incarnation = 0
        self.left = False
        self.suspicions: dict[str, Suspicion] = {}
        self._suspicions_at: float | None = None
        """When the timer watching the suspicions runs next (None: no suspicion is watched)."""
        self._name = name
        self._config = config
        self._rng = rng
        self._members = members
        self._records = records
        self._outbox = outbox
        self._timers = timers
        self._awareness = awareness
        self._metrics = metrics
        self._settled = settled
        self._heard = heard
        self.to_vouch: list[tuple[str, int]] = []
        """Suspects (name, incarnation) others accused that our next probe round checks first (:mod:`gossip.probing`)."""

    def restore(self, members: Iterable[tuple[str, int, MemberState]], now: float) -> None:
        """Take members from a snapshot without gossiping them; reap the dead and departed later."""
        for name, incarnation, state in members:
            if name != self._name:
                self._members.set(name, incarnation, state, now, self._rng)
                self._outbox.emit(MemberEvent(name, state, incarnation, None))
                if state not in LIVE_STATES:
                    self._timers.at(now + self._config.reap_after, self._reap, (name, now))

    def adopt(self, rows: SharedRows) -> None:
        """Read the members through to rows shared with other in-process nodes; reap their dead later."""
        self._members.adopt(rows, exclude=self._name)
        for name in rows.down:
            if name != self._name:
                self._timers.at(rows.at + self._config.reap_after, self._reap, (name, rows.at))

    def leave(self, now: float) -> None:
        """Say goodbye: broadcast our departure and tell ``fanout`` members at once."""
        self.left = True
        goodbye = Dead(self._name, self.incarnation, self._name)
        self._outbox.broadcast((self._name, None), goodbye, now)
        for peer in self._members.sample(self._rng, self._config.fanout):
            self._outbox.send(peer, [goodbye], now)

    def _refute(self, accused: int, now: float) -> None:
        """Someone thinks we are not alive: outbid their incarnation and say so."""
        self.incarnation = max(self.incarnation, accused) + 1
        self._metrics.refutations += 1
        self._awareness.apply(1)
        self._outbox.broadcast((self._name, None), Alive(self._name, self.incarnation), now)

    def _set_member(self, name: str, incarnation: int, state: MemberState, now: float, message: Message) -> None:
        row = self._members.get(name)
        previous = None if row is None else row.state
        self._members.set(name, incarnation, state, now, self._rng)
        self._outbox.broadcast((name, None), message, now)
        if previous != state:
            self._outbox.emit(MemberEvent(name, state, incarnation, previous))

    def handle_alive(self, sender: str, msg: Alive, now: float) -> None:
        if msg.node == self._name:
            if msg.incarnation > self.incarnation and not self.left:
                self._refute(msg.incarnation, now)  # a past life of ours spoke: outbid it
            return
        row = self._members.get(msg.node)
        if row is not None and msg.incarnation <= row.incarnation:
            return
        self.suspicions.pop(msg.node, None)
        self._set_member(msg.node, msg.incarnation, _ALIVE, now, msg)

    def handle_suspect(self, sender: str, msg: Suspect, now: float) -> None:
        self.suspect(msg.node, msg.incarnation, msg.accuser, now)

    def suspect(self, name: str, incarnation: int, accuser: str, now: float, refused: bool = False) -> None:
        """``accuser`` suspects ``name`` at ``incarnation``: start a suspicion, or confirm one. ``refused``: our own
        probe found no process at its address, so it is dead ``refused_suspicion`` from now at the latest."""
        if name == self._name:
            if incarnation >= self.incarnation and not self.left:
                self._refute(incarnation, now)
            return
        row = self._members.get(name)
        if row is None or incarnation < row.incarnation:
            return
        if row.state == _SUSPECT:
            suspicion = self.suspicions.get(name)
            if suspicion is None:
                return
            if suspicion.confirm(accuser):
                self._outbox.broadcast((name, None), Suspect(name, incarnation, accuser), now)
            if refused:
                suspicion.refused(now + self._config.refused_suspicion)
            self._watch_suspicions(suspicion.deadline())
            return
        if row.state != _ALIVE:
            return
        cfg = self._config
        n = self._members.cluster_size()
        k = cfg.suspicion_confirmations if n - 2 >= cfg.suspicion_confirmations else 0
        lo = timeouts.suspicion_min(cfg.suspicion_mult, n, cfg.probe_interval)
        suspicion = self.suspicions[name] = Suspicion(accuser, now, k, lo, lo * cfg.suspicion_max_mult)
        if refused:
            suspicion.refused(now + cfg.refused_suspicion)
        self._set_member(name, incarnation, _SUSPECT, now, Suspect(name, incarnation, accuser))
        self._watch_suspicions(suspicion.deadline())
        if k and accuser != self._name and self._rng.random() < 2 * k / (n - 2):
            self.to_vouch.append((name, incarnation))

    def needs_vouch(self, name: str, incarnation: int) -> bool:
        """Whether a suspicion we were told of still wants our probe: it stands, at that incarnation, short of
        confirmations, and we have not accused it ourselves."""
        suspicion = self.suspicions.get(name)
        row = self._members.get(name)
        return (suspicion is not None and row is not None and row.state == _SUSPECT and row.incarnation == incarnation
                and suspicion.confirmations < suspicion.k and self._name not in suspicion.accusers)

    def _watch_suspicions(self, deadline: float) -> None:
        """Make sure a timer runs by ``deadline``: one timer watches every suspicion we hold.

        A timer per suspicion (and per confirmation) outlived the refutation that ended it,
        up to the longest suspicion timeout: 10,000 simulated nodes under loss held tens of
        millions of them.
        """
        if self._suspicions_at is None or deadline < self._suspicions_at:
            self._suspicions_at = deadline
            self._timers.at(deadline, self._expire_suspicions, deadline)

    def _expire_suspicions(self, at: float, now: float) -> None:
        """Declare dead every suspect whose deadline passed; watch for the next deadline."""
        if at != self._suspicions_at:
            return  # an earlier watch superseded this one
        self._suspicions_at = None
        pending: list[float] = []
        for name, suspicion in list(self.suspicions.items()):
            deadline = suspicion.deadline()
            if now < deadline:
                pending.append(deadline)
                continue
            row = self._members.get(name)
            if row is not None:
                self._declare_dead(name, row.incarnation, self._name, now)
            self.suspicions.pop(name, None)
        if pending:
            self._watch_suspicions(min(pending))

    def handle_dead(self, sender: str, msg: Dead, now: float) -> None:
        if msg.node == self._name:
            if msg.incarnation >= self.incarnation and not self.left:
                self._refute(msg.incarnation, now)
            return
        self._declare_dead(msg.node, msg.incarnation, msg.accuser, now)

    def _declare_dead(self, name: str, incarnation: int, accuser: str, now: float) -> None:
        row = self._members.get(name)
        if row is None or incarnation < row.incarnation or row.state not in LIVE_STATES:
            return
        self.suspicions.pop(name, None)
        state = _LEFT if accuser == name else _DEAD
        self._set_member(name, incarnation, state, now, Dead(name, incarnation, accuser))
        self._timers.at(now + self._config.reap_after, self._reap, (name, now))

    def _reap(self, arg: tuple[str, float], now: float) -> None:
        """Forget a member that stayed dead (or left) for ``reap_after``, with its records."""
        name, since = arg
        row = self._members.get(name)
        if row is None or row.state in LIVE_STATES or self._members.down_since(name) != since:
            return
        self._members.remove(name)
        if self._heard is not None:
            self._heard.pop(name, None)
        self._settled.clear()  # news about it, or its records, may apply again
        self._outbox.forget((name, None))
        self._outbox.emit(MemberEvent(name, None, row.incarnation, row.state))
        for key, (version, _) in self._records.drop_owner(name).items():
            self._outbox.emit(RecordEvent(name, key, version, None))
