"""The agent's peers: their gossiped node states, their liveness, quorum, and when a dead peer is re-placed.

Rules (the placement core, :mod:`edgeagent.placing`, asks; :mod:`edgeagent.holdings` does the
re-placement's ledger work):

* A verdict is acted on only with a majority of fresh views. Quorum is a majority of the
  members we still believe in, counting us: a peer counts alive while gossip neither suspects
  nor declared it dead, and a peer leaves the denominator only once its death was confirmed
  with quorum (so a lone agent, cut off, never shrinks its way to a majority; the majority,
  after one death, keeps quorum through the next). An even split goes to the half holding the
  lowest-named member, Corosync's tie-breaker. Our own Lifeguard health score says nothing of
  quorum (a returning agent's score decays for half a minute after it hears everyone again);
  it only stops us *acting* for the dead while it is above ``placement.max_awareness``.
* A death is confirmed, while we may act, at once if we watched the peer suspected for
  :data:`WATCHED_S` with no news in its own name (its records) before it was declared: a real
  death is suspected for the suspicion timeout first. A death we did not watch — how a
  returning agent's stale views arrive, suspicion and death together, about peers that never
  left — is confirmed only after :data:`UNWATCHED_S` without a refutation or news from the
  peer. A peer alive now (refuted, heard from) is never re-placed.
* A confirmed death is acted on by the lowest-named live agent: it bumps the CRDT epoch of
  the peer's pods (so the peer, should it return, is told to evict) and reports the node
  not-ready (so the back end unbinds and bumps them too). Every agent then claims at the new
  epoch and the usual winner rule decides. A peer that left gracefully (a restart, an
  upgrade) gets ``placement.leave_grace``.
* A death seen without quorum is not trusted: it is acted on only after quorum has held for
  ``placement.quorum_settle`` seconds and the peer is still dead, so the order of "alive" news
  after a heal never gets a healthy node's pods evicted.

The live peers' states are also kept as a :class:`edgeagent.ranking.PeerView` for ranking.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from edgeagent import records
from edgeagent.config import PlacementSection
from edgeagent.ranking import PeerView

WATCHED_S = 0.25
"""A death we saw suspected at least this long before it was declared is confirmed at once: gossip declares
a real death only after the suspicion timeout (>= 2.5 s with the shipped 1 s probe interval, 0.5 s at a
0.2 s one; ``refused_suspicion``, 0.5 s, for a process gone from a live host), while a returning agent's
stale suspicions and deaths arrive together (0 s apart in all 96 stale deaths of 40 partitions on the
deterministic network)."""
UNWATCHED_S = 15.0
"""A death we did not watch is confirmed only this long after it reached us, unheard and unrefuted: a live peer
declared dead refutes once the news reaches it, which gossip (sending to live members only) may leave to the
next push-pull (10 s shipped; on the deterministic network refutations took up to 9 s)."""


@dataclass(slots=True)
class Peer:
    node: str
    state: records.NodeState | None = None
    alive: bool = True
    grace_until: float | None = None
    """Set when the peer left gracefully: re-place its pods only if it is not back by then."""
    suspect: bool = False
    """Gossip suspects it: not counted alive for quorum, not yet dead."""
    down_since: float | None = None
    """Since when it has been out of our view (suspected or dead) with no news in its name; None while in it."""
    due_at: float | None = None
    """Dead: when its death is confirmed, if it is still dead and unheard by then (:meth:`Peers.confirmed`)."""
    owed_since: float | None = None
    """Dead, and its pods not re-placed by us yet (we lacked quorum or health when it died)."""
    gone: bool = False
    """Its death was confirmed with quorum: it no longer counts towards the majority."""


class Peers:
    """What the agent of node ``us`` knows of its cluster's other agents, by gossip member name."""

    def __init__(self, us: str, settings: PlacementSection, now: float) -> None:
        self.us = us
        self.settings = settings
        self.by_member: dict[str, Peer] = {}
        self.awareness = 0
        """Our own Lifeguard health score (0 = healthy): high means we, not our peers, are the problem."""
        self._view: PeerView | None = None
        """Live peers' gossiped states as arrays, rebuilt when one joins or leaves (ranking runs per pod)."""
        self._quorum_since: float | None = now
        """Since when we have held quorum and health without a break (None: not now)."""
        self._owing: bool | None = False
        """Whether a dead peer's pods are owed a re-placement (None: not known since a member changed)."""

    # ---- queries ---------------------------------------------------------------------------------

    def has_quorum(self) -> bool:
        """Whether we see a majority of the members we believe in (see the module docstring)."""
        alive, total = self.cluster_view()
        if 2 * alive != total:
            return 2 * alive > total
        lowest = min([self.us, *(p.node for p in self.by_member.values() if not p.gone)])
        return lowest == self.us or any(p.node == lowest and p.alive and not p.suspect for p in self.by_member.values())

    def may_act(self) -> bool:
        """Whether we may act for dead peers now: quorum, and our own health score no higher than allowed."""
        return self.awareness <= self.settings.max_awareness and self.has_quorum()

    def cluster_view(self) -> tuple[int, int]:
        """(agents we see alive, counting us; agents we believe in — known and not confirmed dead —, counting us)."""
        alive = 1 + sum(1 for p in self.by_member.values() if p.alive and not p.suspect)
        return alive, 1 + sum(1 for p in self.by_member.values() if not p.gone)

    def nodes(self) -> dict[str, str]:
        """Gossip member name -> node name, for every peer whose node state has reached us."""
        return {member: peer.node for member, peer in self.by_member.items()}

    def view(self) -> PeerView:
        """The live peers' states as arrays (built at the first ranking after a peer joined or left)."""
        if self._view is None:
            live = [(member, p.state) for member, p in self.by_member.items() if p.alive and p.state is not None]
            self._view = PeerView.of(live, self.us)
        return self._view

    def deadlines(self) -> Iterator[float]:
        """When a graceful leaver's time is up, when a death is confirmed, and when owed re-placements settle."""
        yield from (p.grace_until for p in self.by_member.values() if p.grace_until is not None)
        if self._owing is None:  # a scan of the peers only after a member changed, not at every call
            self._owing = any(p.owed_since is not None and not p.alive for p in self.by_member.values())
        if self._quorum_since is not None:  # while we may act (a change of health or view re-arms the timer)
            yield from (p.due_at for p in self.by_member.values() if p.due_at is not None)
            if self._owing:
                yield self._quorum_since + self.settings.quorum_settle

    def graceless(self, now: float) -> list[Peer]:
        """Peers that left gracefully and are not back in time."""
        return [peer for peer in self.by_member.values() if peer.grace_until is not None and peer.grace_until <= now]

    def confirmed(self, now: float) -> list[Peer]:
        """Dead peers whose death is confirmed now (unrefuted and unheard since it reached us) while we may act;
        each leaves the majority's denominator."""
        if self._quorum_since is None:
            return []
        due = [p for p in self.by_member.values() if p.due_at is not None and p.due_at <= now and not p.alive]
        for peer in due:
            peer.due_at, peer.gone = None, True
        if due:
            self._quorum_changed(now)
        return due

    def settled(self, now: float) -> list[Peer]:
        """Peers that died while we lacked quorum, once quorum has held long enough and they are still dead."""
        if self._quorum_since is None or now < self._quorum_since + self.settings.quorum_settle:
            return []
        return [peer for peer in self.by_member.values() if peer.owed_since is not None and not peer.alive
                and (peer.down_since is None or peer.down_since + WATCHED_S <= now)]

    # ---- changes ---------------------------------------------------------------------------------

    def take_state(self, member: str, state: records.NodeState) -> None:
        """A peer's new node state (a first one makes it known)."""
        peer = self.by_member.setdefault(member, Peer(state.node))
        peer.node, peer.state = state.node, state
        row = None if self._view is None or not peer.alive else self._view.rows.get(member)
        if row is None:
            self._view = None
        else:
            self._view.set_row(row, state, self.us)

    def heard(self, member: str, now: float) -> None:
        """News in ``member``'s own name reached us (a record it published): whatever we think of its
        liveness, it was alive just now, so a pending verdict on it starts over."""
        peer = self.by_member.get(member)
        if peer is not None and peer.down_since is not None:
            peer.down_since = now
            if peer.due_at is not None:
                peer.due_at = now + UNWATCHED_S

    def alive_peer(self, member: str) -> Peer | None:
        """``member``'s peer if we know it and it is not dead."""
        peer = self.by_member.get(member)
        return peer if peer is not None and peer.alive else None

    def dead(self, peer: Peer, now: float, graceful: bool) -> bool:
        """Gossip declared a live peer dead: whether to re-place its pods now (:meth:`replacing`).

        Not when it left gracefully (it has ``leave_grace`` to return), nor when we lacked quorum
        when it died (the re-placement is owed until :meth:`settled` says so); otherwise once its
        death is confirmed and we may act: now if we watched its suspicion, else at :meth:`confirmed`."""
        self._owing = None
        trusted = self.has_quorum()  # judged before this death counts: suspects already count against us
        watched = peer.down_since is not None and now - peer.down_since >= WATCHED_S
        peer.alive, peer.suspect = False, False
        peer.down_since = now if peer.down_since is None else peer.down_since
        self._view = None
        self._quorum_changed(now)
        if graceful:
            peer.grace_until = now + self.settings.leave_grace
            return False
        if not trusted:
            peer.owed_since = now
            return False
        peer.due_at = now if watched else now + UNWATCHED_S
        if peer.due_at > now or not self.may_act():
            return False
        peer.due_at, peer.gone = None, True
        self._quorum_changed(now)
        return True

    def suspect(self, member: str, now: float) -> None:
        """Gossip suspects a peer: it no longer counts as alive for quorum."""
        peer = self.by_member.get(member)
        if peer is not None and peer.alive:
            peer.suspect = True
            peer.down_since = now if peer.down_since is None else peer.down_since
            self._quorum_changed(now)

    def alive(self, member: str, now: float) -> None:
        """Gossip says a peer is alive: whatever was pending or owed for it is forgotten."""
        peer = self.by_member.get(member)
        if peer is not None:
            self._owing = None
            peer.alive, peer.suspect, peer.gone = True, False, False
            peer.grace_until = peer.owed_since = peer.due_at = peer.down_since = None
            self._view = None
            self._quorum_changed(now)

    def set_awareness(self, score: int, now: float) -> None:
        self.awareness = score
        self._quorum_changed(now)

    def replacing(self, peer: Peer, now: float) -> bool:
        """A dead peer's pods are due for re-placement: whether we are the one to do it, now.

        Without quorum it stays owed; with it, the lowest-named live agent (counting us) re-places."""
        self._owing = None
        peer.grace_until = peer.owed_since = peer.due_at = None
        if not self.may_act():
            peer.owed_since = now
            return False
        peer.gone = True
        self._quorum_changed(now)
        live = [p.node for p in self.by_member.values() if p.alive]
        return min([self.us, *live]) == self.us

    def _quorum_changed(self, now: float) -> None:
        if not self.may_act():
            self._quorum_since = None
        elif self._quorum_since is None:
            self._quorum_since = now
