"""The agent's peers: their gossiped node states, their liveness, quorum, and when a dead peer is re-placed.

Rules (the placement core, :mod:`edgeagent.placing`, asks; :mod:`edgeagent.holdings` does the
re-placement's ledger work):

* A peer declared dead is re-placed by the lowest-named live agent: it bumps the
  CRDT epoch of the peer's pods (so the peer, should it return, is told to evict)
  and reports the node not-ready (so the back end unbinds and bumps them too).
  Every agent then claims at the new epoch and the usual winner rule decides.
  A peer that left gracefully (a restart, an upgrade) gets ``placement.leave_grace``.
* Quorum: an agent acts for dead peers only while it sees a majority of its cluster's
  agents alive (suspects count against it; an even split goes to the half holding the
  lowest-named agent, Corosync's tie-breaker) and its own Lifeguard health score is
  below ``placement.max_awareness``. An agent cut off from its peers sees them all die
  but holds no quorum, so it re-places nothing and reports nothing. A death seen
  without quorum is not trusted: it is acted on only after quorum has held for
  ``placement.quorum_settle`` seconds and the peer is still dead, so the order of
  "alive" news after a heal never gets a healthy node's pods evicted.

The live peers' states are also kept as a :class:`edgeagent.ranking.PeerView` for ranking.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from edgeagent import records
from edgeagent.config import PlacementSection
from edgeagent.ranking import PeerView


@dataclass(slots=True)
class Peer:
    node: str
    state: records.NodeState | None = None
    alive: bool = True
    grace_until: float | None = None
    """Set when the peer left gracefully: re-place its pods only if it is not back by then."""
    suspect: bool = False
    """Gossip suspects it: not counted alive for quorum, not yet dead."""
    owed_since: float | None = None
    """Dead, and its pods not re-placed by us yet (we lacked quorum or health when it died)."""


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
        """Whether we may act for dead peers now (see the module docstring)."""
        if self.awareness > self.settings.max_awareness:
            return False
        alive, total = self.cluster_view()
        if 2 * alive != total:
            return 2 * alive > total
        lowest = min([self.us, *(p.node for p in self.by_member.values())])
        return lowest == self.us or any(p.node == lowest and p.alive and not p.suspect for p in self.by_member.values())

    def cluster_view(self) -> tuple[int, int]:
        """(agents we see alive, counting us; agents of the cluster we know of, counting us)."""
        alive = 1 + sum(1 for p in self.by_member.values() if p.alive and not p.suspect)
        return alive, 1 + len(self.by_member)

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
        """When a graceful leaver's time is up, and when owed re-placements settle."""
        yield from (p.grace_until for p in self.by_member.values() if p.grace_until is not None)
        if self._owing is None:  # a scan of the peers only after a member changed, not at every call
            self._owing = any(p.owed_since is not None and not p.alive for p in self.by_member.values())
        if self._quorum_since is not None and self._owing:
            yield self._quorum_since + self.settings.quorum_settle

    def graceless(self, now: float) -> list[Peer]:
        """Peers that left gracefully and are not back in time."""
        return [peer for peer in self.by_member.values() if peer.grace_until is not None and peer.grace_until <= now]

    def settled(self, now: float) -> list[Peer]:
        """Peers that died while we lacked quorum, once quorum has held long enough and they are still dead."""
        if self._quorum_since is None or now < self._quorum_since + self.settings.quorum_settle:
            return []
        return [peer for peer in self.by_member.values() if peer.owed_since is not None and not peer.alive]

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

    def alive_peer(self, member: str) -> Peer | None:
        """``member``'s peer if we know it and it is not dead."""
        peer = self.by_member.get(member)
        return peer if peer is not None and peer.alive else None

    def dead(self, peer: Peer, now: float, graceful: bool) -> bool:
        """Gossip declared a live peer dead: whether to re-place its pods now (:meth:`replacing`).

        Not when it left gracefully (it has ``leave_grace`` to return), nor when we lacked quorum
        when it died or lack it now (the re-placement is owed until :meth:`settled` says so)."""
        self._owing = None
        trusted = self.has_quorum()  # judged before this death counts: suspects already count against us
        peer.alive, peer.suspect = False, False
        self._view = None
        self._quorum_changed(now)
        if graceful:
            peer.grace_until = now + self.settings.leave_grace
            return False
        if trusted and self.has_quorum():
            return True
        peer.owed_since = now
        return False

    def suspect(self, member: str, now: float) -> None:
        """Gossip suspects a peer: it no longer counts as alive for quorum."""
        peer = self.by_member.get(member)
        if peer is not None and peer.alive:
            peer.suspect = True
            self._quorum_changed(now)

    def alive(self, member: str, now: float) -> None:
        """Gossip says a peer is alive: whatever was owed for it is forgotten."""
        peer = self.by_member.get(member)
        if peer is not None:
            self._owing = None
            peer.alive, peer.suspect, peer.grace_until, peer.owed_since = True, False, None, None
            self._view = None
            self._quorum_changed(now)

    def set_awareness(self, score: int, now: float) -> None:
        self.awareness = score
        self._quorum_changed(now)

    def replacing(self, peer: Peer, now: float) -> bool:
        """A dead peer's pods are due for re-placement: whether we are the one to do it, now.

        Without quorum it stays owed; with it, the lowest-named live agent (counting us) re-places."""
        self._owing = None
        peer.grace_until = peer.owed_since = None
        if not self.has_quorum():
            peer.owed_since = now
            return False
        live = [p.node for p in self.by_member.values() if p.alive]
        return min([self.us, *live]) == self.us

    def _quorum_changed(self, now: float) -> None:
        if not self.has_quorum():
            self._quorum_since = None
        elif self._quorum_since is None:
            self._quorum_since = now
