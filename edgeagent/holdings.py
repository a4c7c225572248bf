"""Our stake in each pod, by stage, and the moves between stages: binds, losses, epochs, evictions, finished pods.

A pod the back end tells us of is *known*; a pending one is in :attr:`Holdings.pending`
(:mod:`edgeagent.pendings`); once our claim wins it is *binding*, then *running* here, or
released when it loses. The placement core (:mod:`edgeagent.placing`) decides when to claim;
this module does what follows, in the ledger (:mod:`edgeagent.ledger`), on our node table and
as effects (:mod:`edgeagent.effects`):

* A claim still winning when its window closes is bound at the back end, at the back end's
  epoch. The back end is the fence: a refused bind (another node won in the meantime) just
  waits for the winner's record to arrive; a refusal for lack of room bumps our claim away.
* Epochs: when the back end is ahead of a claim of ours (our node was re-placed), we raise
  the CRDT epoch to match, which turns our claim into a loser we release.
* A claim of ours that loses is released; if the pod ran here it is evicted first. A pod the
  back end still shows here keeps its room (*held*) until the back end says otherwise.
* Re-placing a dead peer (when :mod:`edgeagent.peers` says we are the one) bumps the epoch of
  each of its pods and reports its node not ready.
* Adoption: a pod we run at epoch e that the back end shows pending, on no node, at that same
  epoch lost its binding there (a restarted plane rebuilt its twin), not here: nobody else will
  claim it (the CRDT says we bound it at e), so we bind it again to our node at e. A higher epoch
  instead means it was re-placed: the epoch rule above releases ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable, Placement
from fedcore.pods import Pod
from fedcore.resources import MILLI, GpuRequest, Resources

from crdt import wire
from crdt.claims import BOUND, ClaimDelta, Status
from edgeagent import records
from edgeagent.clusters import BindOutcome, BindResult, Phase, PodUpdate
from edgeagent.config import PlacementSection
from edgeagent.effects import Bind, Effect, Evict, Experience, Publish, ReportNode
from edgeagent.ledger import Ledger
from edgeagent.pendings import Pending, kick
from edgeagent.publishing import StatePublication

REFUSED_BACKOFF = 5.0
"""Retry intervals a pod is left alone after the back end refused our bind for lack of room."""


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


class Holdings:
    """The pods one agent has a stake in, for its own node, and the effects their moves ask for."""

    def __init__(self, node: Node, ledger: Ledger, settings: PlacementSection, publication: StatePublication) -> None:
        self.node = node
        self.ledger = ledger
        self.settings = settings
        self.publication = publication
        self.counters = Counters()
        self.table = NodeTable([node])
        self.pending: dict[str, Pending] = {}
        self.running: dict[str, int] = {}
        """Pods bound to our node, with the epoch they were bound at."""
        self.placements: dict[str, tuple[Pod, Placement]] = {}
        """Our node table's reservation for each unreleased claim of ours."""
        self.known: dict[str, tuple[Pod, int, str]] = {}
        """Every unfinished pod the back end told us of: spec, epoch and node (for offline re-placement)."""
        self.binding: dict[str, Pending] = {}
        self.scored: dict[str, Pending] = {}
        """Running pods' claims, kept for the experience row should the pod be evicted."""
        self.evicted: set[str] = set()
        """Pods we asked the back end to stop (each once) until it reports them gone."""
        self.held: set[str] = set()
        """Released claims whose pod the back end still shows on our node: their room stays taken."""
        self.out: list[Effect] = []
        self._restore_reservations()

    def pod_update(self, update: PodUpdate, now: float) -> None:
        """The back end's word on a pod (watch event or listing): what it says moves our stages."""
        uid = update.pod.uid
        if update.phase.finished:
            self._pod_finished(uid, now)
            return
        self.known[uid] = (update.pod, update.epoch, update.node)
        if update.node == self.node.name and uid not in self.running and uid not in self.binding:
            self._evict_superseded(uid, update.epoch)
        if uid in self.held and update.node != self.node.name:
            self.held.discard(uid)
            self._free(uid)
        if update.phase is Phase.PENDING and not update.node:
            if self.running.get(uid) == update.epoch:
                self._adopt(uid, update, now)
                return
            held = self.pending.get(uid)
            if held is None:
                self.pending[uid] = Pending(update.pod, update.epoch, now, now)
            elif held.epoch != update.epoch:  # re-placed at the back end: a new chance for everyone
                held.new_epoch(update.epoch, now)
            self._follow_epoch(uid, update.epoch, now)
        else:
            self.pending.pop(uid, None)
            if update.node != self.node.name and self.running.get(uid, update.epoch) < update.epoch:
                self._follow_epoch(uid, update.epoch, now)  # re-placed and bound elsewhere while we were away: ours lost

    # ---- binding --------------------------------------------------------------------------------

    def bind_if_winning(self, uid: str, p: Pending, now: float) -> None:
        """Our claim's window closed: bind it if it still wins, else it is ours no more."""
        if p.elsewhere:  # the back end says another node holds it: wait for that node's record or a new epoch
            p.due = now + self.settings.retry_interval
            return
        winner = self.ledger.replica.winner(uid)
        if winner is None or winner.node != self.node.name or winner.epoch != p.claim_epoch:
            p.claimed_at, p.due = None, now + self.settings.retry_interval
            return
        p.binding = True
        self.binding[uid] = p
        held = self.placements.get(uid)
        self.out.append(Bind(uid, self.node.name, p.epoch, held[1].gpus if held else (), _reclaimed(p.pod, held)))

    def bind_done(self, uid: str, result: BindResult | None, now: float) -> None:
        """The back end answered a :class:`Bind` (``None``: it could not be reached; retry later)."""
        p = self.binding.pop(uid, None)
        if p is None:
            return
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
            self.publish_claims(uid)
            p.refused_until = now + REFUSED_BACKOFF * self.settings.retry_interval
            p.claimed_at, p.due = None, p.refused_until
            self._requeue(uid, p)
        self._release_losers(now)

    def _adopt(self, uid: str, update: PodUpdate, now: float) -> None:
        """Bind a pod we run here again, at the epoch we run it at (see the module docstring)."""
        if uid in self.binding:
            return
        p = Pending(update.pod, update.epoch, now, now)
        p.binding = True
        self.binding[uid] = p
        held = self.placements.get(uid)
        self.out.append(Bind(uid, self.node.name, update.epoch, held[1].gpus if held else (), _reclaimed(update.pod, held)))

    def _bound(self, uid: str, p: Pending, now: float) -> None:
        if self.running.get(uid) == p.epoch:  # adopted: the ledger has it bound here already
            self.pending.pop(uid, None)
            return
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
        self.publish_claims(uid)
        self._experience(uid, p, "bound", now)
        if p.assessment is not None and p.assessment.node_x is not None:
            self.scored[uid] = p

    def _requeue(self, uid: str, p: Pending) -> None:
        """Put a pod whose bind came back unfinished back among the pending, if the cluster still says pending."""
        known = self.known.get(uid)
        if known is not None and not known[2] and uid not in self.running:
            self.pending.setdefault(uid, p)

    # ---- losing, epochs and re-placement ---------------------------------------------------------

    def after_merge(self, delta: ClaimDelta, now: float, ours_changed: bool) -> None:
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
            if p is None and uid in self.known:
                self._reopen(uid, now)
            elif p is not None and p.claimed_at is None and not p.binding:  # its winner withdrew: race again now
                p.due = min(p.due, max(now, p.refused_until))
        if ours_changed:
            self._release_losers(now)

    def _release_losers(self, now: float) -> None:
        """Release every reservation of ours that lost, stopping the pod first if it ran here."""
        for uid in self.ledger.replica.pending_releases():
            if uid in self.binding:
                continue  # bind_done decides: the back end may have bound it here
            if uid in self.running:
                self.out.append(Evict(uid, self.running.pop(uid)))
                self.evicted.add(uid)
                self.counters.evictions += 1
                scored = self.scored.pop(uid, None)
                if scored is not None:
                    self._experience(uid, scored, "evicted", now)
            self.ledger.release(uid)
            self.counters.lost += 1
            self.publish_claims(uid)
            known = self.known.get(uid)
            if known is not None and known[2] == self.node.name:
                self.held.add(uid)  # the back end still has it here: keep the room until it says otherwise
            else:
                self._free(uid)
            p = self.pending.get(uid)
            if p is not None:
                self._experience(uid, p, "lost", now)
                p.claimed_at, p.due = None, max(now + self.settings.retry_interval, p.refused_until)
            kick(self.pending.values(), now, self.settings.claim_window)

    def _follow_epoch(self, uid: str, epoch: int, now: float) -> None:
        """The back end is at ``epoch``: a claim of ours below it must lose, so raise the CRDT epoch."""
        replica = self.ledger.replica
        mine = self.ledger.reservations_of(uid)
        if not mine or min(c.epoch for c in mine) >= epoch:
            return
        while replica.epoch(uid) < epoch:
            if isinstance(self.ledger.bump_epoch(uid), Status):
                return
        self.publish_claims(uid)
        self._release_losers(now)

    def _reopen(self, uid: str, now: float) -> None:
        """A pod with no live winner (re-placed): pending again, from what the back end last said of it."""
        known = self.known.get(uid)
        if known is not None and uid not in self.pending and uid not in self.binding and uid not in self.running:
            self.pending[uid] = Pending(known[0], known[1], now, now)

    def replace_pods(self, node: str, now: float) -> None:
        """Re-place a dead peer's node: report it not ready, and raise the epoch of each of its pods."""
        self.out.append(ReportNode(node, False))
        for uid in self.ledger.replica.pods_on(node):
            out = self.ledger.bump_epoch(uid)
            if isinstance(out, ClaimDelta):
                self.counters.replaced += 1
                self.publish_claims(uid)
                self._reopen(uid, now)
        self._release_losers(now)

    def _evict_superseded(self, uid: str, epoch: int) -> None:
        """The back end runs ``uid`` on our node, but our claim on it lost to another node's: stop it.

        This is how an eviction survives a crash between the journal commit of the release and
        the call that stops the pod: after the restart the watch shows the pod still here, the
        replayed ledger holds no claim of ours and the winner is elsewhere. With no record of
        a winner (a wiped journal, a compacted pod) nothing is stopped.
        """
        if uid in self.evicted or self.ledger.reservations_of(uid):
            return
        winner = self.ledger.replica.winner(uid)
        if winner is None or winner.node == self.node.name:
            return
        self.evicted.add(uid)
        self.out.append(Evict(uid, epoch))
        self.counters.evictions += 1

    def _pod_finished(self, uid: str, now: float) -> None:
        self.evicted.discard(uid)
        self.pending.pop(uid, None)
        known = self.known.pop(uid, None)
        if uid in self.held:
            self.held.discard(uid)
            self._free(uid)
        self.scored.pop(uid, None)
        if uid in self.running:
            del self.running[uid]
            if isinstance(self.ledger.complete(uid), ClaimDelta):
                self.counters.completed += 1
                self.publish_claims(uid)
                self._free(uid)
                kick(self.pending.values(), now, self.settings.claim_window)
        elif uid not in self.binding and self.ledger.reservations_of(uid):
            if known is not None and known[2] and known[2] != self.node.name:
                # it ran on another node, whose agent marks it completed: raising the epoch now would displace
                # that agent's bound claim and refuse its completion, and the pod's records would never compact
                # (a claim still winning in our view is released once the runner's completion reaches us)
                if isinstance(self.ledger.release(uid), ClaimDelta):
                    self.publish_claims(uid)
                    self._free(uid)
            else:
                self.ledger.bump_epoch(uid)  # gone before it ran anywhere: our claim has nothing left to win
                self.publish_claims(uid)
        self._release_losers(now)

    # ---- room -----------------------------------------------------------------------------------

    def _free(self, uid: str) -> None:
        """Give back our node table's reservation for ``uid``: our node state changed."""
        held = self.placements.pop(uid, None)
        if held is not None:
            self.table.release(*held)
        self.publication.dirty = True

    def _restore_reservations(self) -> None:
        """After a replay: reserve our node table for our unreleased claims, note the pods we run."""
        for claim in self.ledger.reservations():
            pod = _pod_for(claim.pod, claim.resources)
            self.placements[claim.pod] = (pod, self.table.allocate(pod, 0))
            if claim.flags & BOUND:
                self.running[claim.pod] = self.ledger.bound_epoch(claim)

    # ---- outputs --------------------------------------------------------------------------------

    def publish_claims(self, uid: str) -> None:
        delta = self.ledger.own_delta(uid)
        if delta is not None:
            self.out.append(Publish(records.claim_key(uid), wire.encode_delta(delta)))

    def _experience(self, uid: str, p: Pending, outcome: str, now: float) -> None:
        """Record a decision's outcome, with the inputs and version that scored it (only model-scored
        decisions: the heuristic's have no features in the training spec)."""
        a = p.assessment
        if a is None or a.pod_x is None or a.node_x is None:
            return
        from federated.runtime.experience import Row  # loaded already with the model that scored it

        self.out.append(Experience(Row(now, uid, p.model, a.score, a.pod_x, a.node_x, outcome, now - p.seen,
                                       p.gpu_alloc_after, a.frag_before, p.frag_after)))

    def flush(self) -> list[Effect]:
        """The effects asked for since the last flush, in order."""
        out, self.out = self.out, []
        return out


def _pod_for(uid: str, request: Resources) -> Pod:
    """A pod spec rebuilt from a claim's reserved resources (restart: the back end's spec is not yet known)."""
    gpu = request.gpu_milli
    shape = GpuRequest(1, gpu) if 0 < gpu < MILLI else GpuRequest(gpu // MILLI, MILLI if gpu else 0)
    return Pod(uid, request.cpu_milli, request.memory_mib, request.disk_mib, gpu=shape)


def _reclaimed(pod: Pod, held: tuple[Pod, Placement] | None) -> int:
    """The CPU of ``pod`` our claim took from reclaimed capacity: its request less what our escrow holds of it."""
    return max(0, pod.cpu_milli - held[0].cpu_milli) if held else 0
