"""The placement core: a sans-IO state machine that claims, binds, releases and re-places pods.

Rules, in the order a reader needs them:

* Inputs are calls with an injected ``now``: a pod update from the cluster
  (:meth:`Placer.pod_update`), a peer's gossip record (:meth:`Placer.record`), a member
  declared dead or alive, a bind result (:meth:`Placer.bind_done`), a load sample and
  :meth:`Placer.tick`. Each returns effects (:mod:`edgeagent.effects`); the ledger's
  journal operations are taken by the shell first, so effects never outrun durability.
* A pending pod is claimed when our node passes fedcore's hard filters, our escrow
  holds its request, and — to keep gossip quiet — we rank among the best
  ``placement.candidates`` nodes by the heuristic estimate over the peers' gossiped
  states (:mod:`edgeagent.ranking`). Past ``fallback_after`` anyone eligible claims. A
  deferred pod is ranked again when fewer than ``candidates`` of the peers that ranked
  above us are left unchanged (a peer's new state, or its death, may drop it below us; a
  peer that ranked below us cannot lift us by changing), not at every state any peer publishes.
* A claim that still wins ``claim_window`` seconds after the pod's first claim reached
  us (ours or a rival's; at least a quarter window after our own) is bound at the back
  end, at the back end's epoch. Counting from the first claim bounds the wait: a node
  whose room freed up later may still claim while the window runs, and wins if it scores
  better, but it does not restart everyone's window; once the window has passed, a rival
  that is winning is left to bind (until ``fallback_after``, or until it gives the pod up).
* Epochs: we claim at ``max(back end epoch, CRDT epoch)`` and bind at the back end's.

The neighbours: :mod:`edgeagent.pendings` (each pending pod's progress, the queue order),
:mod:`edgeagent.holdings` (binds, losses, epochs, evictions: what follows a claim),
:mod:`edgeagent.peers` (peers' states, quorum, who re-places a dead peer and when),
:mod:`edgeagent.publishing` (when our node state goes out).
"""

from __future__ import annotations

import logging

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.filters import default_filters

from crdt.claims import BOUND, Status, StatusCode
from crdt.errors import InvalidDelta
from edgeagent import records
from edgeagent.classfit import Reclaimed
from edgeagent.clusters import BindResult, PodUpdate
from edgeagent.config import PlacementSection
from edgeagent.effects import Effect, Publish
from edgeagent.holdings import Counters, Holdings
from edgeagent.ledger import Ledger
from edgeagent.pendings import Pending, in_queue_order, kick, rival_changed
from edgeagent.peers import Peer, Peers
from edgeagent.publishing import StatePublication
from edgeagent.ranking import ranked_above, says_it_fits
from edgeagent.scoring import Scorer, device_summary

log = logging.getLogger("edgeagent.placing")

COMPACT_EVERY = 5.0
OWN_WINDOW = 0.25
"""Share of ``claim_window`` a claim waits at least, even when rivals' window has passed."""


class Placer:
    """One agent's placement state machine for its own node."""

    def __init__(self, node: Node, ledger: Ledger, scorer: Scorer, settings: PlacementSection, now: float) -> None:
        self.node = node
        self.scorer = scorer
        self.load = 0.0
        self.publication = StatePublication()
        self.holdings = Holdings(node, ledger, settings, self.publication)
        """Our stake in each pod by stage (pending, binding, running, held), our node's reservations, the outbox."""
        self.peers = Peers(node.name, settings, now)
        self._settings = settings
        self._filters = default_filters()
        self._withdraw: dict[str, float] = {}
        self._compact_at = now + COMPACT_EVERY
        self.reclaimed = Reclaimed()
        """Reclaimed CPU the plane offers our batch pods (online pods never use it): :mod:`edgeagent.classfit`."""

    @property
    def settings(self) -> PlacementSection:
        return self._settings

    @settings.setter
    def settings(self, settings: PlacementSection) -> None:
        self._settings = self.holdings.settings = self.peers.settings = settings

    @property
    def ledger(self) -> Ledger:
        return self.holdings.ledger

    @property
    def counters(self) -> Counters:
        return self.holdings.counters

    @property
    def table(self) -> NodeTable:
        """Our one-row node table, holding a reservation for each unreleased claim of ours."""
        return self.holdings.table

    @property
    def pending(self) -> dict[str, Pending]:
        return self.holdings.pending

    @property
    def running(self) -> dict[str, int]:
        """Pods bound to our node, with the epoch they were bound at."""
        return self.holdings.running

    @property
    def awareness(self) -> int:
        """Our own Lifeguard health score (0 = healthy): high means we, not our peers, are the problem."""
        return self.peers.awareness

    # ---- inputs ----------------------------------------------------------------------------

    def pod_update(self, update: PodUpdate, now: float) -> list[Effect]:
        """The cluster reported a pod (watch event or listing)."""
        self.holdings.pod_update(update, now)
        return self.holdings.flush()

    def record(self, member: str, key: str, value: object, now: float) -> list[Effect]:
        """A peer's gossip record changed (``value`` None: withdrawn or forgotten)."""
        if value is not None:
            self.peers.heard(member, now)  # only the member itself writes its records: it was alive
        if key == records.NODE_KEY:
            self._node_state(member, value, now)
            return self.holdings.flush()
        pod = records.pod_of(key)
        if pod is None or not isinstance(value, bytes):
            return self.holdings.flush()
        try:
            delta, changes = self.ledger.merge(value)
        except InvalidDelta as exc:
            self.counters.bad_records += 1
            log.warning("dropped claims record %s from %s: %s", key, member, exc)
            return self.holdings.flush()
        self.holdings.after_merge(delta, now, bool(changes))
        return self.holdings.flush()

    def member_dead(self, member: str, now: float, graceful: bool = False) -> list[Effect]:
        """Gossip declared a peer dead: once its death is confirmed, the lowest live agent re-places its pods.

        A peer that left gracefully (a restart, an upgrade) gets ``placement.leave_grace``
        seconds to come back before its pods are re-placed.
        """
        peer = self.peers.alive_peer(member)
        if peer is None:
            return self.holdings.flush()
        rival_changed(self.pending.values(), member, now, self.settings.candidates)  # it ranks no more
        if self.peers.dead(peer, now, graceful):
            self._replace(peer, now)
        elif peer.owed_since is not None:
            self.counters.deferred_replacements += 1
        return self.holdings.flush()

    def member_suspect(self, member: str, now: float) -> list[Effect]:
        """Gossip suspects a peer: it no longer counts as alive for quorum."""
        self.peers.suspect(member, now)
        return self.holdings.flush()

    def member_alive(self, member: str, now: float) -> list[Effect]:
        self.peers.alive(member, now)
        return self.holdings.flush()

    def set_awareness(self, score: int, now: float) -> list[Effect]:
        """Our own Lifeguard health score, sampled by the shell."""
        self.peers.set_awareness(score, now)
        return self.holdings.flush()

    def bind_done(self, uid: str, result: BindResult | None, now: float) -> list[Effect]:
        """The back end answered a :class:`~edgeagent.effects.Bind` (``None``: it could not be reached; retry later)."""
        self.holdings.bind_done(uid, result, now)
        return self.holdings.flush()

    def set_load(self, load: float, now: float) -> list[Effect]:
        """A new load sample; republished only when its published (rounded) value moves, so an idle node stays quiet."""
        if records.published_load(load) != records.published_load(self.load):
            self.publication.dirty = True
        self.load = load
        return self.holdings.flush()

    def set_scorer(self, scorer: Scorer) -> list[Effect]:
        """Score with a new model version from now on, and tell the peers which version this node runs."""
        self.scorer = scorer
        self.publication.dirty = True
        return self.holdings.flush()

    def offer_reclaimed(self, milli: int, now: float) -> list[Effect]:
        """The plane's reclaimed CPU for our batch pods (:mod:`edgeagent.classfit`); a larger offer looks again at waiting pods."""
        if milli > self.reclaimed.offered_milli:
            kick(self.pending.values(), now, self.settings.claim_window)
        self.reclaimed.offered_milli = max(0, milli)
        return self.holdings.flush()

    def tick(self, now: float) -> list[Effect]:
        """Run what is due: claims, binds, node-state publication, compaction, record withdrawal."""
        self.reclaimed.keep(self.holdings.placements)
        for uid, p in in_queue_order(list(self.pending.items()), self.scorer.queue, self.table, now):
            if p.binding or p.due > now:
                continue
            if p.claimed_at is None:
                self._consider(uid, p, now)
            else:
                self.holdings.bind_if_winning(uid, p, now)
        if now >= self._compact_at:
            self._compact_at = now + COMPACT_EVERY
            for uid in self.ledger.compact():
                self._withdraw[uid] = now + self.settings.compact_after
        for uid, when in list(self._withdraw.items()):
            if when <= now:
                del self._withdraw[uid]
                self.holdings.out.append(Publish(records.claim_key(uid), None))
        if self.publication.due(now):
            self._publish_state(now)
        for peer in self.peers.graceless(now):
            self._replace(peer, now)
        for peer in self.peers.confirmed(now):
            self._replace(peer, now)
        for peer in self.peers.settled(now):
            self._replace(peer, now)
        return self.holdings.flush()

    def next_deadline(self) -> float:
        """When :meth:`tick` must next run."""
        times = [p.due for p in self.pending.values() if not p.binding]
        times.append(self._compact_at)
        times.extend(self._withdraw.values())
        state_due = self.publication.deadline()
        if state_due is not None:
            times.append(state_due)
        times.extend(self.peers.deadlines())
        return min(times)

    def announce(self, now: float) -> list[Effect]:
        """Republish everything we own (after a restart, the gossip layer starts empty)."""
        for uid in list(self.ledger.own_pods()):
            self.holdings.publish_claims(uid)
        self._publish_state(now)
        return self.holdings.flush()

    # ---- queries -------------------------------------------------------------------------------

    def has_quorum(self) -> bool:
        """Whether we see a majority of the members we believe in (see :mod:`edgeagent.peers`)."""
        return self.peers.has_quorum()

    def peer_nodes(self) -> dict[str, str]:
        """Gossip member name -> node name, for every peer whose node state has reached us."""
        return self.peers.nodes()

    def cluster_view(self) -> tuple[int, int]:
        """(agents we see alive, counting us; agents of the cluster we know of, counting us)."""
        return self.peers.cluster_view()

    def node_state(self) -> records.NodeState:
        return records.NodeState(
            self.node.name, self.node.capacity, self.ledger.replica.free(), self.load, self.scorer.version,
            self.node.arch.value, *device_summary(self.table),
        )

    # ---- claiming -------------------------------------------------------------------------------

    def _consider(self, uid: str, p: Pending, now: float) -> None:
        replica = self.ledger.replica
        p.due = max(now + self.settings.retry_interval, p.refused_until)
        if p.elsewhere or now < p.refused_until or replica.is_finished(uid):
            return
        epoch = max(p.epoch, replica.epoch(uid))
        winner = replica.winner(uid)
        if winner is not None and winner.epoch == epoch and winner.flags & BOUND:
            return
        fallback = p.seen + self.settings.fallback_after
        closed = p.first_claim is not None and now >= p.first_claim + self.settings.claim_window
        if winner is not None and winner.epoch == epoch and winner.node != self.node.name and closed and now < fallback:
            return  # the race is over and its winner is binding: a claim now would only be refused at the fence
        pod = self.reclaimed.fitted(p.pod, replica.free())  # batch may borrow reclaimed CPU; the cheap test first
        if pod is None or not self._fits(pod):
            p.waiting_for_room = True
            self._unmislead(p.pod, now)
            return
        p.deferred = False
        if winner is None and now < fallback:
            ahead = self._ranked_above_us(p.pod)
            if len(ahead) >= self.settings.candidates > 0:
                p.due, p.deferred, p.ahead = fallback, True, ahead
                return
        request = pod.request
        assessment = self.scorer.assess(pod, self.table)
        score = assessment.score
        if not np.isfinite(score):
            log.warning("scorer %s gave %r for %s: skipping the pod", self.scorer.version, score, uid)
            return
        placement = self.table.allocate(pod, 0, self.scorer.devices(pod, self.table))
        out = self.ledger.claim(uid, epoch, score, request)
        if isinstance(out, Status):
            self.table.release(pod, placement)
            if out.code is StatusCode.ALREADY_CLAIMED and uid in self.holdings.placements:  # ours from before (restart)
                p.claimed_at, p.claim_epoch, p.due = now, replica.epoch(uid), now + self.settings.claim_window
            return
        self.counters.claims += 1
        self.holdings.placements[uid] = (pod, placement)
        self.reclaimed.take(uid, p.pod.cpu_milli - pod.cpu_milli)
        p.claimed_at, p.claim_epoch, p.score, p.assessment, p.model = now, epoch, score, assessment, self.scorer.version
        gpus = int(self.table.gpu_count[0]) * MILLI
        p.gpu_alloc_after = 1.0 - float(self.table.gpu_free_total()[0]) / gpus if gpus else 0.0
        p.frag_after = self.scorer.fragmentation(self.table) if assessment.node_x is not None else 0.0
        window = self.settings.claim_window
        p.first_claim = now if p.first_claim is None else p.first_claim
        p.due = max(p.first_claim + window, now + window * OWN_WINDOW)
        self.holdings.publish_claims(uid)
        self.publication.dirty = True

    def _fits(self, pod: Pod) -> bool:
        if not self.table.alive[0]:
            return False
        return all(bool(f.filter(pod, self.table)[0]) for f in self._filters)

    def _ranked_above_us(self, pod: Pod) -> set[str]:
        """The live peers that rank above our node for ``pod`` (:func:`edgeagent.ranking.ranked_above`), by the
        state we last published; none when every agent claims at once (``candidates`` 0)."""
        k = self.settings.candidates
        if k == 0:
            return set()
        return ranked_above(self.peers.view(), self.publication.last or self.node_state(), pod, k)

    def _unmislead(self, pod: Pod, now: float) -> None:
        """We cannot take ``pod`` but the state peers hold of us says we can: they may be deferring
        to us, so publish the true state now rather than at the next ``STATE_EVERY`` tick."""
        last = self.publication.last
        if not self.publication.dirty or last is None or self.settings.candidates == 0:
            return
        if says_it_fits(last, pod):
            self._publish_state(now)

    # ---- peers and our state ---------------------------------------------------------------------

    def _node_state(self, member: str, value: object, now: float) -> None:
        if value is None:
            return
        try:
            state = records.decode_node_state(value)
        except ValueError as exc:
            self.counters.bad_records += 1
            log.warning("dropped node state from %s: %s", member, exc)
            return
        self.peers.take_state(member, state)
        rival_changed(self.pending.values(), member, now, self.settings.candidates)

    def _replace(self, peer: Peer, now: float) -> None:
        if self.peers.replacing(peer, now):
            self.holdings.replace_pods(peer.node, now)

    def _publish_state(self, now: float) -> None:
        self.holdings.out.append(self.publication.publish(self.node_state(), now))
