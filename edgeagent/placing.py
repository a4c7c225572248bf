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
  states. Past ``fallback_after`` anyone eligible claims. A deferred pod is ranked again
  when fewer than ``candidates`` of the peers that ranked above us are left unchanged
  (a peer's new state, or its death, may drop it below us; a peer that ranked below us
  cannot lift us by changing), not at every state any peer publishes.
* A claim that still wins ``claim_window`` seconds after the pod's first claim reached
  us (ours or a rival's; at least a quarter window after our own) is bound at the back
  end, at the back end's epoch. Counting from the first claim bounds the wait: a node
  whose room freed up later may still claim while the window runs, and wins if it scores
  better, but it does not restart everyone's window; once the window has passed, a rival
  that is winning is left to bind (until ``fallback_after``, or until it gives the pod up). The back end is the fence: a refused bind
  (another node won in the meantime) just waits for the winner's record to arrive.
* Epochs: we claim at ``max(back end epoch, CRDT epoch)`` and bind at the back end's.
  When the back end is ahead of a claim of ours (our node was re-placed), we raise
  the CRDT epoch to match, which turns our claim into a loser we release.
* A peer declared dead is re-placed by the lowest-named live agent: it bumps the
  CRDT epoch of the peer's pods (so the peer, should it return, is told to evict)
  and reports the node not-ready (so the back end unbinds and bumps them too).
  Every agent then claims at the new epoch and the usual winner rule decides.
* Quorum: an agent acts for dead peers only while it sees a majority of its cluster's
  agents alive (suspects count against it; an even split goes to the half holding the
  lowest-named agent, Corosync's tie-breaker) and its own Lifeguard health score is
  below ``placement.max_awareness``. An agent cut off from its peers sees them all die
  but holds no quorum, so it re-places nothing and reports nothing. A death seen
  without quorum is not trusted: it is acted on only after quorum has held for
  ``placement.quorum_settle`` seconds and the peer is still dead, so the order of
  "alive" news after a heal never gets a healthy node's pods evicted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable, Placement
from fedcore.pods import Pod
from fedcore.resources import MILLI, GpuRequest, Resources
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.framework import OldestFirst, Waiting

from crdt import wire
from crdt.claims import BOUND, ClaimDelta, Status, StatusCode
from crdt.errors import InvalidDelta
from edgeagent import records
from edgeagent.clusters import BindOutcome, BindResult, Phase, PodUpdate
from edgeagent.config import PlacementSection
from edgeagent.effects import Bind, Effect, Evict, Experience, Publish, ReportNode
from edgeagent.ledger import Ledger
from edgeagent.scoring import Assessment, Scorer, device_summary, estimate

log = logging.getLogger("edgeagent.placing")

STATE_EVERY = 0.5
"""Seconds between publications of our node state (it changes with every claim; peers only rank by it)."""
COMPACT_EVERY = 5.0
OWN_WINDOW = 0.25
"""Share of ``claim_window`` a claim waits at least, even when rivals' window has passed."""
REFUSED_BACKOFF = 5.0
"""Retry intervals a pod is left alone after the back end refused our bind for lack of room."""


@dataclass(slots=True)
class _Pending:
    """A pod the back end says is pending, and our progress on it."""

    pod: Pod
    epoch: int
    """The back end's fencing epoch for the pod: what a bind must name."""
    seen: float
    due: float
    claimed_at: float | None = None
    claim_epoch: int = 0
    assessment: Assessment | None = None
    """How our claim was scored (and the model's inputs): the experience row's state and action."""
    model: str = ""
    """The scorer version that made the claim: a model swapped in later does not re-attribute it."""
    gpu_alloc_after: float = 0.0
    frag_after: float = 0.0
    score: float = 0.0
    binding: bool = False
    elsewhere: bool = False
    """The back end refused our bind because another node holds the pod."""
    refused_until: float = 0.0
    """The back end had no room for it here: leave it to others until then (no kick shortens this)."""
    first_claim: float | None = None
    """When the first claim on the pod at its current epoch reached us (ours or a rival's)."""
    deferred: bool = False
    """Held back for better-ranked peers until ``fallback_after``, or until too few of them are sure to rank above us."""
    ahead: set[str] = field(default_factory=set)
    """Deferred: the peers that ranked above us and have not changed since (they still do)."""
    waiting_for_room: bool = False
    """It did not fit our node when we last considered it: it waits for room, in the queue order."""

    def new_epoch(self, epoch: int, now: float) -> None:
        """The back end fences the pod at another epoch now: a new race, due at once."""
        self.epoch, self.elsewhere, self.refused_until, self.first_claim = epoch, False, 0.0, None
        self.due = min(self.due, now)


@dataclass(slots=True)
class _Peer:
    node: str
    state: records.NodeState | None = None
    alive: bool = True
    grace_until: float | None = None
    """Set when the peer left gracefully: re-place its pods only if it is not back by then."""
    suspect: bool = False
    """Gossip suspects it: not counted alive for quorum, not yet dead."""
    owed_since: float | None = None
    """Dead, and its pods not re-placed by us yet (we lacked quorum or health when it died)."""


@dataclass(frozen=True, slots=True)
class _PeerView:
    free: np.ndarray
    capacity: np.ndarray
    load: np.ndarray
    devices: np.ndarray
    """(wholly free GPUs, most milli free on one GPU) per peer, -1 where the peer did not say."""
    before_us: np.ndarray
    """Peers whose node name sorts before ours: they win score ties."""
    members: tuple[str, ...]
    """Each row's gossip member name."""
    rows: dict[str, int] = field(default_factory=dict)
    """Member name -> row."""

    def __post_init__(self) -> None:
        self.rows.update((member, row) for row, member in enumerate(self.members))

    def set_row(self, row: int, state: records.NodeState, us: str) -> None:
        """A peer's new state, written in place (peers publish twice a second: a rebuild each time costs)."""
        self.free[row] = state.free.as_tuple()
        self.capacity[row] = state.capacity.as_tuple()
        self.load[row] = state.load
        self.devices[row] = (state.gpus_whole, state.gpu_share)
        self.before_us[row] = state.node < us


@dataclass(slots=True)
class Counters:
    """Monotonic counts the shell exports as metrics."""

    claims: int = 0
    binds: int = 0
    lost: int = 0
    evictions: int = 0
    evictions_done: int = 0
    """Evictions the back end confirmed (the shell counts them; ``evictions`` counts those asked for)."""
    refused_binds: int = 0
    replaced: int = 0
    deferred_replacements: int = 0
    """Dead peers whose re-placement waited because we lacked quorum or health."""
    completed: int = 0
    bad_records: int = 0
    decisions: list[float] = field(default_factory=list)
    """Seconds from seeing a pod pending to its successful bind; the shell drains it."""


class Placer:
    """One agent's placement state machine for its own node."""

    def __init__(self, node: Node, ledger: Ledger, scorer: Scorer, settings: PlacementSection, now: float) -> None:
        self.node = node
        self.ledger = ledger
        self.scorer = scorer
        self.settings = settings
        self.counters = Counters()
        self.load = 0.0
        self.table = NodeTable([node])
        self.pending: dict[str, _Pending] = {}
        self.running: dict[str, int] = {}
        """Pods bound to our node, with the epoch they were bound at."""
        self._filters = default_filters()
        self._placements: dict[str, tuple[Pod, Placement]] = {}
        self._known: dict[str, tuple[Pod, int, str]] = {}
        """Every unfinished pod the back end told us of: spec, epoch and node (for offline re-placement)."""
        self._binding: dict[str, _Pending] = {}
        self._scored: dict[str, _Pending] = {}
        """Running pods' claims, kept for the experience row should the pod be evicted."""
        self._evicted: set[str] = set()
        """Pods we asked the back end to stop (each once) until it reports them gone."""
        self._held: set[str] = set()
        """Released claims whose pod the back end still shows on our node: their room stays taken."""
        self._peers: dict[str, _Peer] = {}
        """Gossip member name -> what we know of its node."""
        self._withdraw: dict[str, float] = {}
        self._view: _PeerView | None = None
        """Live peers' gossiped states as arrays, rebuilt when one changes (ranking runs per pod)."""
        self._state_at = -STATE_EVERY
        self._state_dirty = True
        self._published: records.NodeState | None = None
        """The node state peers last heard from us: they rank us by it."""
        self._compact_at = now + COMPACT_EVERY
        self.awareness = 0
        """Our own Lifeguard health score (0 = healthy): high means we, not our peers, are the problem."""
        self._quorum_since: float | None = now
        """Since when we have held quorum and health without a break (None: not now)."""
        self._owing: bool | None = False
        """Whether a dead peer's pods are owed a re-placement (None: not known since a member changed)."""
        self._out: list[Effect] = []
        self._restore_reservations()

    # ---- inputs ----------------------------------------------------------------------------

    def pod_update(self, update: PodUpdate, now: float) -> list[Effect]:
        """The cluster reported a pod (watch event or listing)."""
        uid = update.pod.uid
        if update.phase.finished:
            self._pod_finished(uid, now)
            return self._flush()
        self._known[uid] = (update.pod, update.epoch, update.node)
        if update.node == self.node.name and uid not in self.running and uid not in self._binding:
            self._evict_superseded(uid, update.epoch)
        if uid in self._held and update.node != self.node.name:
            self._held.discard(uid)
            self._free(uid)
        if update.phase is Phase.PENDING and not update.node:
            held = self.pending.get(uid)
            if held is None:
                self.pending[uid] = _Pending(update.pod, update.epoch, now, now)
            elif held.epoch != update.epoch:  # re-placed at the back end: a new chance for everyone
                held.new_epoch(update.epoch, now)
            self._follow_epoch(uid, update.epoch, now)
        else:
            self.pending.pop(uid, None)
        return self._flush()

    def record(self, member: str, key: str, value: object, now: float) -> list[Effect]:
        """A peer's gossip record changed (``value`` None: withdrawn or forgotten)."""
        if key == records.NODE_KEY:
            self._node_state(member, value, now)
            return self._flush()
        pod = records.pod_of(key)
        if pod is None or not isinstance(value, bytes):
            return self._flush()
        try:
            delta, changes = self.ledger.merge(value)
        except InvalidDelta as exc:
            self.counters.bad_records += 1
            log.warning("dropped claims record %s from %s: %s", key, member, exc)
            return self._flush()
        self._after_merge(delta, now, bool(changes))
        return self._flush()

    def member_dead(self, member: str, now: float, graceful: bool = False) -> list[Effect]:
        """Gossip declared a peer dead: the lowest live agent re-places its pods.

        A peer that left gracefully (a restart, an upgrade) gets ``placement.leave_grace``
        seconds to come back before its pods are re-placed.
        """
        peer = self._peers.get(member)
        if peer is None or not peer.alive:
            return self._flush()
        self._owing = None
        trusted = self._has_quorum()  # judged before this death counts: suspects already count against us
        peer.alive, peer.suspect = False, False
        self._view = None
        self._rival_changed(member, now)  # it ranks no more
        self._quorum_changed(now)
        if graceful:
            peer.grace_until = now + self.settings.leave_grace
            return self._flush()
        if trusted and self._has_quorum():
            self._replace(peer, now)
        else:
            self.counters.deferred_replacements += 1
            peer.owed_since = now
        return self._flush()

    def member_suspect(self, member: str, now: float) -> list[Effect]:
        """Gossip suspects a peer: it no longer counts as alive for quorum."""
        peer = self._peers.get(member)
        if peer is not None and peer.alive:
            peer.suspect = True
            self._quorum_changed(now)
        return self._flush()

    def set_awareness(self, score: int, now: float) -> list[Effect]:
        """Our own Lifeguard health score, sampled by the shell."""
        self.awareness = score
        self._quorum_changed(now)
        return self._flush()

    def has_quorum(self) -> bool:
        """Whether we may act for dead peers now (see the module docstring)."""
        return self._has_quorum()

    def peer_nodes(self) -> dict[str, str]:
        """Gossip member name -> node name, for every peer whose node state has reached us."""
        return {member: peer.node for member, peer in self._peers.items()}

    def cluster_view(self) -> tuple[int, int]:
        """(agents we see alive, counting us; agents of the cluster we know of, counting us)."""
        alive = 1 + sum(1 for p in self._peers.values() if p.alive and not p.suspect)
        return alive, 1 + len(self._peers)

    def _has_quorum(self) -> bool:
        if self.awareness > self.settings.max_awareness:
            return False
        alive, total = self.cluster_view()
        if 2 * alive != total:
            return 2 * alive > total
        lowest = min([self.node.name, *(p.node for p in self._peers.values())])
        return lowest == self.node.name or any(p.node == lowest and p.alive and not p.suspect for p in self._peers.values())

    def _quorum_changed(self, now: float) -> None:
        if not self._has_quorum():
            self._quorum_since = None
        elif self._quorum_since is None:
            self._quorum_since = now

    def _settle_owed(self, now: float) -> None:
        """Re-place peers that died while we lacked quorum, once quorum has held long enough and they are still dead."""
        if self._quorum_since is None or now < self._quorum_since + self.settings.quorum_settle:
            return
        for peer in self._peers.values():
            if peer.owed_since is not None and not peer.alive:
                self._replace(peer, now)

    def _replace(self, peer: _Peer, now: float) -> None:
        self._owing = None
        peer.grace_until = peer.owed_since = None
        if not self._has_quorum():
            peer.owed_since = now
            return
        if self._replacer() != self.node.name:
            return
        self._out.append(ReportNode(peer.node, False))
        for uid in self.ledger.replica.pods_on(peer.node):
            out = self.ledger.bump_epoch(uid)
            if isinstance(out, ClaimDelta):
                self.counters.replaced += 1
                self._publish_claims(uid)
                self._reopen(uid, now)
        self._release_losers(now)

    def member_alive(self, member: str, now: float) -> list[Effect]:
        peer = self._peers.get(member)
        if peer is not None:
            self._owing = None
            peer.alive, peer.suspect, peer.grace_until, peer.owed_since = True, False, None, None
            self._view = None
            self._quorum_changed(now)
        return self._flush()

    def bind_done(self, uid: str, result: BindResult | None, now: float) -> list[Effect]:
        """The back end answered a :class:`Bind` (``None``: it could not be reached; retry later)."""
        p = self._binding.pop(uid, None)
        if p is None:
            return self._flush()
        p.binding = False
        p.due = now + self.settings.retry_interval
        if result is None:
            self._requeue(uid, p)
        elif result.ok:
            self._bound(uid, p, now)
        elif result.outcome is BindOutcome.DUPLICATE:
            self.counters.refused_binds += 1
            p.elsewhere = True
            self._requeue(uid, p)
        elif result.outcome is BindOutcome.STALE_EPOCH:  # its answer names the epoch: no need to wait for the watch
            if result.epoch != p.epoch:
                p.new_epoch(result.epoch, now)
            self._follow_epoch(uid, result.epoch, now)
            self._requeue(uid, p)
        else:  # REJECTED: the back end has no room for it here after all; let others try
            self.counters.refused_binds += 1
            self._experience(uid, p, "refused", now)
            self.ledger.bump_epoch(uid)
            self._publish_claims(uid)
            p.refused_until = now + REFUSED_BACKOFF * self.settings.retry_interval
            p.claimed_at, p.due = None, p.refused_until
            self._requeue(uid, p)
        self._release_losers(now)
        return self._flush()

    def set_load(self, load: float, now: float) -> list[Effect]:
        """A new load sample; republished only when its published (rounded) value moves, so an idle node stays quiet."""
        if records.published_load(load) != records.published_load(self.load):
            self._state_dirty = True
        self.load = load
        return self._flush()

    def set_scorer(self, scorer: Scorer) -> list[Effect]:
        """Score with a new model version from now on, and tell the peers which version this node runs."""
        self.scorer = scorer
        self._state_dirty = True
        return self._flush()

    def tick(self, now: float) -> list[Effect]:
        """Run what is due: claims, binds, node-state publication, compaction, record withdrawal."""
        for uid, p in self._in_queue_order(list(self.pending.items()), now):
            if p.binding or p.due > now:
                continue
            if p.claimed_at is None:
                self._consider(uid, p, now)
            else:
                self._bind_if_winning(uid, p, now)
        if now >= self._compact_at:
            self._compact_at = now + COMPACT_EVERY
            for uid in self.ledger.compact():
                self._withdraw[uid] = now + self.settings.compact_after
        for uid, when in list(self._withdraw.items()):
            if when <= now:
                del self._withdraw[uid]
                self._out.append(Publish(records.claim_key(uid), None))
        if self._state_dirty and now >= self._state_at + STATE_EVERY:
            self._publish_state(now)
        for peer in self._peers.values():
            if peer.grace_until is not None and peer.grace_until <= now:
                self._replace(peer, now)
        self._settle_owed(now)
        return self._flush()

    def _in_queue_order(self, due: list[tuple[str, _Pending]], now: float) -> list[tuple[str, _Pending]]:
        """``due`` with the pods we may claim now (unclaimed, due) in the scorer's queue order against our node as it is.

        The twin's learned profile gives a freed node to the waiting pods in this order; an agent
        claims for its own node in the same order, from the same features of its own row, among the
        pods that once found no room here (as the twin retries only pods waiting for room). Every
        other pod keeps its place, and a new arrival is tried in arrival order as on the twin: applied
        to every due pod, the order decided no placement where all fit, only who waited (``bench
        agent``'s decision p99 read 410-435 ms against 210 ms in arrival order); equal priorities keep
        arrival order. A learned order ranks only pods that waited ``LEARNED_AFTER_S`` (the queue's
        rule, the twin's too): younger ones wait on claims, not on departures.
        """
        queue = self.scorer.queue
        slots = [k for k, (_, p) in enumerate(due)
                 if p.waiting_for_room and p.claimed_at is None and not p.binding and p.due <= now]
        if isinstance(queue, OldestFirst) or len(slots) < 2:
            return due
        pods = [due[k][1] for k in slots]
        waiting = Waiting(
            np.array([p.pod.cpu_milli for p in pods], dtype=np.int64), np.array([p.pod.memory_mib for p in pods], dtype=np.int64),
            np.array([p.pod.gpu.count for p in pods], dtype=np.int64), np.array([p.pod.gpu.milli_each for p in pods], dtype=np.int64),
            np.array([now - p.seen for p in pods], dtype=np.float64),
        )
        order = np.argsort(-queue.priority(waiting, self.table, 0), kind="stable")
        out = list(due)
        for slot, k in zip(slots, order, strict=True):
            out[slot] = due[slots[int(k)]]
        return out

    def next_deadline(self) -> float:
        """When :meth:`tick` must next run."""
        times = [p.due for p in self.pending.values() if not p.binding]
        times.append(self._compact_at)
        times.extend(self._withdraw.values())
        if self._state_dirty:
            times.append(self._state_at + STATE_EVERY)
        times.extend(p.grace_until for p in self._peers.values() if p.grace_until is not None)
        if self._owing is None:  # a scan of the peers only after a member changed, not at every call
            self._owing = any(p.owed_since is not None and not p.alive for p in self._peers.values())
        if self._quorum_since is not None and self._owing:
            times.append(self._quorum_since + self.settings.quorum_settle)
        return min(times)

    def announce(self, now: float) -> list[Effect]:
        """Republish everything we own (after a restart, the gossip layer starts empty)."""
        for uid in list(self.ledger.own_pods()):
            self._publish_claims(uid)
        self._publish_state(now)
        return self._flush()

    # ---- queries -------------------------------------------------------------------------------

    def node_state(self) -> records.NodeState:
        return records.NodeState(
            self.node.name, self.node.capacity, self.ledger.replica.free(), self.load, self.scorer.version,
            self.node.arch.value, *device_summary(self.table),
        )

    # ---- claiming and binding -------------------------------------------------------------------

    def _consider(self, uid: str, p: _Pending, now: float) -> None:
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
        if not p.pod.request.fits_in(replica.free()) or not self._fits(p.pod):  # the cheap test first
            p.waiting_for_room = True
            self._unmislead(p.pod, now)
            return
        p.deferred = False
        if winner is None and now < fallback:
            ahead = self._ranked_above_us(p.pod)
            if len(ahead) >= self.settings.candidates > 0:
                p.due, p.deferred, p.ahead = fallback, True, ahead
                return
        request = p.pod.request
        assessment = self.scorer.assess(p.pod, self.table)
        score = assessment.score
        if not np.isfinite(score):
            log.warning("scorer %s gave %r for %s: skipping the pod", self.scorer.version, score, uid)
            return
        placement = self.table.allocate(p.pod, 0, self.scorer.devices(p.pod, self.table))
        out = self.ledger.claim(uid, epoch, score, request)
        if isinstance(out, Status):
            self.table.release(p.pod, placement)
            if out.code is StatusCode.ALREADY_CLAIMED and uid in self._placements:  # ours from before (restart)
                p.claimed_at, p.claim_epoch, p.due = now, replica.epoch(uid), now + self.settings.claim_window
            return
        self.counters.claims += 1
        self._placements[uid] = (p.pod, placement)
        p.claimed_at, p.claim_epoch, p.score, p.assessment, p.model = now, epoch, score, assessment, self.scorer.version
        gpus = int(self.table.gpu_count[0]) * MILLI
        p.gpu_alloc_after = 1.0 - float(self.table.gpu_free_total()[0]) / gpus if gpus else 0.0
        p.frag_after = self.scorer.fragmentation(self.table) if assessment.node_x is not None else 0.0
        window = self.settings.claim_window
        p.first_claim = now if p.first_claim is None else p.first_claim
        p.due = max(p.first_claim + window, now + window * OWN_WINDOW)
        self._publish_claims(uid)
        self._state_dirty = True

    def _bind_if_winning(self, uid: str, p: _Pending, now: float) -> None:
        if p.elsewhere:  # the back end says another node holds it: wait for that node's record or a new epoch
            p.due = now + self.settings.retry_interval
            return
        winner = self.ledger.replica.winner(uid)
        if winner is None or winner.node != self.node.name or winner.epoch != p.claim_epoch:
            p.claimed_at, p.due = None, now + self.settings.retry_interval
            return
        p.binding = True
        self._binding[uid] = p
        held = self._placements.get(uid)
        self._out.append(Bind(uid, self.node.name, p.epoch, held[1].gpus if held else ()))

    def _bound(self, uid: str, p: _Pending, now: float) -> None:
        out = self.ledger.bind(uid, p.epoch)
        if isinstance(out, Status):  # we lost in the CRDT while the back end bound us: adopt at a new epoch
            self.ledger.bump_epoch(uid)
            self.ledger.release(uid)
            self.ledger.claim(uid, self.ledger.replica.epoch(uid), p.score, p.pod.request)
            self.ledger.bind(uid, p.epoch)  # the CRDT's epoch is now above the back end's, which still fences the pod
        self.pending.pop(uid, None)
        self.running[uid] = p.epoch
        self.counters.binds += 1
        self.counters.decisions.append(now - p.seen)
        self._publish_claims(uid)
        self._experience(uid, p, "bound", now)
        if p.assessment is not None and p.assessment.node_x is not None:
            self._scored[uid] = p

    def _requeue(self, uid: str, p: _Pending) -> None:
        """Put a pod whose bind came back unfinished back among the pending, if the cluster still says pending."""
        known = self._known.get(uid)
        if known is not None and not known[2] and uid not in self.running:
            self.pending.setdefault(uid, p)

    # ---- losing, epochs and re-placement ---------------------------------------------------------

    def _after_merge(self, delta: ClaimDelta, now: float, ours_changed: bool) -> None:
        """``ours_changed``: the merge made a claim of ours lose (else nothing of ours is left to release)."""
        replica = self.ledger.replica
        for claim in delta.claims:
            p = self.pending.get(claim.pod)
            if p is not None and p.first_claim is None and claim.epoch >= replica.epoch(claim.pod):
                p.first_claim = now
        one = len(delta.claims) == 1 and not delta.marks  # what gossip carries almost always
        # in record order (not a set's): pods reopen in an order that does not depend on the hash seed
        pods = (delta.claims[0].pod,) if one else tuple(dict.fromkeys(r.pod for r in (*delta.claims, *delta.marks)))
        for uid in pods:
            if replica.winner(uid) is not None:
                continue
            p = self.pending.get(uid)
            if p is None and uid in self._known:
                self._reopen(uid, now)
            elif p is not None and p.claimed_at is None and not p.binding:  # its winner withdrew: race again now
                p.due = min(p.due, max(now, p.refused_until))
        if ours_changed:
            self._release_losers(now)

    def _release_losers(self, now: float) -> None:
        """Release every reservation of ours that lost, stopping the pod first if it ran here."""
        for uid in self.ledger.replica.pending_releases():
            if uid in self._binding:
                continue  # bind_done decides: the back end may have bound it here
            if uid in self.running:
                self._out.append(Evict(uid, self.running.pop(uid)))
                self._evicted.add(uid)
                self.counters.evictions += 1
                scored = self._scored.pop(uid, None)
                if scored is not None:
                    self._experience(uid, scored, "evicted", now)
            self.ledger.release(uid)
            self.counters.lost += 1
            self._publish_claims(uid)
            known = self._known.get(uid)
            if known is not None and known[2] == self.node.name:
                self._held.add(uid)  # the back end still has it here: keep the room until it says otherwise
            else:
                self._free(uid)
            p = self.pending.get(uid)
            if p is not None:
                self._experience(uid, p, "lost", now)
                p.claimed_at, p.due = None, max(now + self.settings.retry_interval, p.refused_until)
            self._kick(now)

    def _follow_epoch(self, uid: str, epoch: int, now: float) -> None:
        """The back end is at ``epoch``: a claim of ours below it must lose, so raise the CRDT epoch."""
        replica = self.ledger.replica
        mine = self.ledger.reservations_of(uid)
        if not mine or min(c.epoch for c in mine) >= epoch:
            return
        while replica.epoch(uid) < epoch:
            if isinstance(self.ledger.bump_epoch(uid), Status):
                return
        self._publish_claims(uid)
        self._release_losers(now)

    def _reopen(self, uid: str, now: float) -> None:
        """A pod with no live winner (re-placed): pending again, from what the back end last said of it."""
        known = self._known.get(uid)
        if known is not None and uid not in self.pending and uid not in self._binding and uid not in self.running:
            self.pending[uid] = _Pending(known[0], known[1], now, now)

    def _replacer(self) -> str:
        live = [p.node for p in self._peers.values() if p.alive]
        return min([self.node.name, *live])

    def _evict_superseded(self, uid: str, epoch: int) -> None:
        """The back end runs ``uid`` on our node, but our claim on it lost to another node's: stop it.

        This is how an eviction survives a crash between the journal commit of the release and
        the call that stops the pod: after the restart the watch shows the pod still here, the
        replayed ledger holds no claim of ours and the winner is elsewhere. With no record of
        a winner (a wiped journal, a compacted pod) nothing is stopped.
        """
        if uid in self._evicted or self.ledger.reservations_of(uid):
            return
        winner = self.ledger.replica.winner(uid)
        if winner is None or winner.node == self.node.name:
            return
        self._evicted.add(uid)
        self._out.append(Evict(uid, epoch))
        self.counters.evictions += 1

    def _pod_finished(self, uid: str, now: float) -> None:
        self._evicted.discard(uid)
        self.pending.pop(uid, None)
        known = self._known.pop(uid, None)
        if uid in self._held:
            self._held.discard(uid)
            self._free(uid)
        self._scored.pop(uid, None)
        if uid in self.running:
            del self.running[uid]
            if isinstance(self.ledger.complete(uid), ClaimDelta):
                self.counters.completed += 1
                self._publish_claims(uid)
                self._free(uid)
                self._kick(now)
        elif uid not in self._binding and self.ledger.reservations_of(uid):
            if known is not None and known[2] and known[2] != self.node.name:
                # it ran on another node, whose agent marks it completed: raising the epoch now would displace
                # that agent's bound claim and refuse its completion, and the pod's records would never compact
                # (a claim still winning in our view is released once the runner's completion reaches us)
                if isinstance(self.ledger.release(uid), ClaimDelta):
                    self._publish_claims(uid)
                    self._free(uid)
            else:
                self.ledger.bump_epoch(uid)  # gone before it ran anywhere: our claim has nothing left to win
                self._publish_claims(uid)
        self._release_losers(now)

    # ---- capacity -------------------------------------------------------------------------------

    def _fits(self, pod: Pod) -> bool:
        if not self.table.alive[0]:
            return False
        return all(bool(f.filter(pod, self.table)[0]) for f in self._filters)

    def _ranked_above_us(self, pod: Pod) -> set[str]:
        """The live peers that rank above our node for ``pod`` by the heuristic over gossiped states, ours
        included: the state we last published, not our live one, so that every agent holding the same
        gossip ranks the same way (ranked by our live state, a node whose pods just left thought itself
        below peers that thought themselves below it, and all deferred until the next publication).
        None when fewer than ``candidates`` peers are known, or when our published state says we cannot
        take the pod (our live filters say we can: the claim decides)."""
        k = self.settings.candidates
        if k == 0:
            return set()
        if self._view is None:
            live = [(member, p.state) for member, p in self._peers.items() if p.alive and p.state is not None]
            states = [state for _, state in live]
            self._view = _PeerView(
                np.array([s.free.as_tuple() for s in states], dtype=np.float64).reshape(-1, 4),
                np.array([s.capacity.as_tuple() for s in states], dtype=np.float64).reshape(-1, 4),
                np.array([s.load for s in states], dtype=np.float64),
                np.array([(s.gpus_whole, s.gpu_share) for s in states], dtype=np.int64).reshape(-1, 2),
                np.array([s.node < self.node.name for s in states], dtype=bool),
                tuple(member for member, _ in live),
            )
        view = self._view
        if len(view.load) < k:
            return set()
        request = pod.request
        said = self._published or self.node_state()
        mine = estimate(request, np.array([said.free.as_tuple()], dtype=np.float64),
                        np.array([said.capacity.as_tuple()], dtype=np.float64),
                        np.array([records.published_load(said.load)]), pod.gpu,
                        np.array([(said.gpus_whole, said.gpu_share)], dtype=np.int64))[0]
        if not np.isfinite(mine):
            return set()  # what we told the peers says we cannot take it, our filters say we can: claim
        theirs = estimate(request, view.free, view.capacity, view.load, pod.gpu, view.devices)
        above = (theirs > mine) | ((theirs == mine) & view.before_us)
        return {view.members[i] for i in np.flatnonzero(above)}

    def _rival_changed(self, member: str, now: float) -> None:
        """``member``'s standing changed (new state, suspected, dead): it may no longer rank above us. A pod
        deferred to it is ranked again once fewer than ``candidates`` peers are left that surely still do,
        not at every state change of every peer (each peer publishes twice a second: a re-rank storm)."""
        k = self.settings.candidates
        for p in self.pending.values():
            if p.deferred and member in p.ahead:
                p.ahead.discard(member)
                if len(p.ahead) < k:
                    p.deferred, p.due = False, min(p.due, now)

    def _unmislead(self, pod: Pod, now: float) -> None:
        """We cannot take ``pod`` but the state peers hold of us says we can: they may be deferring
        to us, so publish the true state now rather than at the next ``STATE_EVERY`` tick."""
        last = self._published
        if not self._state_dirty or last is None or self.settings.candidates == 0:
            return
        said = estimate(pod.request, np.array([last.free.as_tuple()], dtype=np.float64),
                        np.array([last.capacity.as_tuple()], dtype=np.float64), np.array([last.load]), pod.gpu,
                        np.array([[last.gpus_whole, last.gpu_share]], dtype=np.int64))
        if np.isfinite(said[0]):
            self._publish_state(now)

    def _free(self, uid: str) -> None:
        held = self._placements.pop(uid, None)
        if held is not None:
            self.table.release(*held)
        self._state_dirty = True

    def _kick(self, now: float) -> None:
        """Capacity came back: look again at pods we could not take."""
        for p in self.pending.values():
            if p.claimed_at is None and not p.binding and p.due > now + self.settings.claim_window \
                    and p.refused_until <= now:
                p.due = now

    def _restore_reservations(self) -> None:
        """After a replay: reserve our node table for our unreleased claims, note the pods we run."""
        for claim in self.ledger.reservations():
            pod = _pod_for(claim.pod, claim.resources)
            self._placements[claim.pod] = (pod, self.table.allocate(pod, 0))
            if claim.flags & BOUND:
                self.running[claim.pod] = self.ledger.bound_epoch(claim)

    # ---- outputs --------------------------------------------------------------------------------

    def _publish_claims(self, uid: str) -> None:
        delta = self.ledger.own_delta(uid)
        if delta is not None:
            self._out.append(Publish(records.claim_key(uid), wire.encode_delta(delta)))

    def _publish_state(self, now: float) -> None:
        self._state_at, self._state_dirty = now, False
        self._published = self.node_state()
        self._out.append(Publish(records.NODE_KEY, records.encode_node_state(self._published)))

    def _node_state(self, member: str, value: object, now: float) -> None:
        if value is None:
            return
        try:
            state = records.decode_node_state(value)
        except ValueError as exc:
            self.counters.bad_records += 1
            log.warning("dropped node state from %s: %s", member, exc)
            return
        peer = self._peers.setdefault(member, _Peer(state.node))
        peer.node, peer.state = state.node, state
        row = None if self._view is None or not peer.alive else self._view.rows.get(member)
        if row is None:
            self._view = None
        else:
            self._view.set_row(row, state, self.node.name)
        self._rival_changed(member, now)

    def _experience(self, uid: str, p: _Pending, outcome: str, now: float) -> None:
        """Record a decision's outcome, with the inputs and version that scored it (only model-scored
        decisions: the heuristic's have no features in the training spec)."""
        a = p.assessment
        if a is None or a.pod_x is None or a.node_x is None:
            return
        from federated.runtime.experience import Row  # loaded already with the model that scored it

        self._out.append(Experience(Row(now, uid, p.model, a.score, a.pod_x, a.node_x, outcome, now - p.seen,
                                        p.gpu_alloc_after, a.frag_before, p.frag_after)))

    def _flush(self) -> list[Effect]:
        out, self._out = self._out, []
        return out


def _pod_for(uid: str, request: Resources) -> Pod:
    """A pod spec rebuilt from a claim's reserved resources (restart: the back end's spec is not yet known)."""
    gpu = request.gpu_milli
    shape = GpuRequest(1, gpu) if 0 < gpu < MILLI else GpuRequest(gpu // MILLI, MILLI if gpu else 0)
    return Pod(uid, request.cpu_milli, request.memory_mib, request.disk_mib, gpu=shape)
