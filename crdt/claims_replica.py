"""One agent's replica of the placement-claim CRDT: claim, bind, complete, merge.

Safety argument, in three lines:

* *One winner per pod.* The winner is the maximum of the current-epoch claims
  under :func:`crdt.claims.rank` — or, once the pod has completed anywhere, the
  completing claim (completion is terminal: a pod re-placed while it was in
  fact finishing is not run again once the completion is seen). The state is a
  join of grow-only records, so replicas that merged the same records agree,
  whatever the order.
* *No over-commit.* Only a node's owner claims for that node (merges of claims
  for our node by anyone else are rejected), and it reserves the request in its
  own :class:`crdt.escrow.Escrow` rights first. Rights return only on release or
  completion, so the owner's unreleased claims — a superset of the pods that
  win on its node — always fit its capacity.
* *No stale run.* A claim below the pod's epoch never wins; the re-placer raises
  the epoch (:meth:`ClaimsReplica.bump_epoch`) so a returning node's binding is
  superseded and its agent is told to evict.

The replica is pure: no clocks, no I/O, no randomness. Lamport time advances on
local claims and on merges. The lattice itself lives in :mod:`crdt.claims_state`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from fedcore.resources import Resources

from crdt.claims import (
    BOUND,
    COMPLETED,
    RELEASED,
    Change,
    ChangeKind,
    Claim,
    ClaimDelta,
    EpochMark,
    Status,
    StatusCode,
    rank,
)
from crdt.claims_state import ClaimsState, PodClaims
from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from crdt.escrow import Escrow

NO_CHANGES: tuple[Change, ...] = ()


class ClaimsReplica:
    """The claims CRDT as one edge agent holds it; the agent claims only for its own node."""

    def __init__(self, agent_id: str, node: str, capacity: Resources) -> None:
        self.agent_id = agent_id
        self.node = node
        self.capacity = capacity
        self._state = ClaimsState(agent_id, node)
        self._escrow = Escrow()
        self._escrow.add(agent_id, capacity)
        self._reserved: dict[str, Claim] = {}
        """Our unreleased claim per pod (at most one)."""
        self._winning = self._state.watched
        """Pods where our reserved claim is the winner; the rest of ``_reserved`` must be released.
        Shared with the state, which reports merges that touch them."""

    @classmethod
    def restore(
        cls, agent_id: str, node: str, capacity: Resources, state: ClaimDelta, finished: Iterable[str] = ()
    ) -> ClaimsReplica:
        """Rebuild a replica from what :meth:`full_state` and :meth:`finished_pods` returned (e.g. after a restart).

        Our reservations and escrow are recomputed from our own unreleased claims;
        raises :class:`crdt.errors.InvalidDelta` if they no longer fit ``capacity``.
        """
        replica = cls(agent_id, node, capacity)
        for uid in finished:
            replica._state.add_finished(uid)
        if state.context is not None:  # first, so our own records count as written by us
            replica._state.context.merge(state.context)
        replica._state.join(ClaimDelta(state.claims, state.marks, lamport=state.lamport))
        for record in state.claims:
            if record.agent != agent_id or record.flags & RELEASED:
                continue
            if replica._escrow.consume(agent_id, record.resources) is None:
                raise InvalidDelta(f"our unreleased claims exceed the capacity {capacity}")
            replica._reserved[record.pod] = record
            pod = replica._state.pods[record.pod]
            if pod.winner is record:
                replica._winning.add(record.pod)
        return replica

    # ---- queries ---------------------------------------------------------------

    def winner(self, pod_uid: str) -> Claim | None:
        """The pod's winning claim: its completing claim, else the best at its current epoch, else ``None``."""
        pod = self._state.pods.get(pod_uid)
        return None if pod is None else pod.winner

    def epoch(self, pod_uid: str) -> int:
        pod = self._state.pods.get(pod_uid)
        return 0 if pod is None else pod.epoch

    def claims(self, pod_uid: str) -> list[Claim]:
        pod = self._state.pods.get(pod_uid)
        return [] if pod is None else list(pod.claims.values())

    def pods(self) -> Iterator[str]:
        """Uids of the pods held in full (not yet compacted away)."""
        return iter(self._state.pods)

    def finished_pods(self) -> tuple[str, ...]:
        """Uids compacted away after completing, oldest first (the newest ``FINISHED_KEEP``); persist
        them with :meth:`full_state` for :meth:`restore`."""
        return tuple(self._state.finished)

    def is_finished(self, pod_uid: str) -> bool:
        """True once the pod completed and :meth:`compact` dropped its records."""
        return pod_uid in self._state.finished

    def pods_on(self, node: str) -> list[str]:
        """Pods whose winner is ``node`` and not completed: what to re-place if ``node`` dies."""
        return [
            uid
            for uid, pod in self._state.pods.items()
            if pod.done is None and pod.leader is not None and pod.leader.node == node
        ]

    def pending_releases(self) -> list[str]:
        """Pods whose claim of ours lost (or was evicted) and still holds escrow: call :meth:`release`.

        Sorted, so the answer depends on the state, not on the order it was reached in."""
        return sorted(uid for uid in self._reserved if uid not in self._winning)

    def free(self) -> Resources:
        """Our node's capacity not reserved by an unreleased claim of ours."""
        return self._escrow.rights(self.agent_id)

    def version(self) -> VersionVector:
        """What this replica has seen; a peer answers it with :meth:`state_delta_since`."""
        return self._state.version()

    def has_news_for(self, seen: VersionVector) -> bool:
        """True when :meth:`state_delta_since` ``(seen)`` would carry something: a cheap pre-check."""
        return not seen.dominates(self._state.context)

    @property
    def lamport(self) -> int:
        return self._state.lamport

    # ---- local operations ------------------------------------------------------

    def claim(self, pod_uid: str, epoch: int, score: float, request: Resources) -> ClaimDelta | Status:
        """Bid for ``pod_uid`` on our node, reserving ``request`` in our escrow first."""
        if not math.isfinite(score):
            return Status(StatusCode.BAD_SCORE, f"score {score!r} is not finite")
        if pod_uid in self._state.finished:
            return Status(StatusCode.COMPLETED, "pod completed and was compacted")
        pod = self._state.pods.get(pod_uid)
        lamport = self._state.lamport + 1
        if pod is not None:
            if epoch < pod.epoch:
                return Status(StatusCode.STALE_EPOCH, f"pod is at epoch {pod.epoch}, not {epoch}")
            if pod_uid in self._reserved or (epoch, self.node) in pod.claims:
                return Status(StatusCode.ALREADY_CLAIMED, "this node already claimed the pod")
            if pod.done is not None:
                return Status(StatusCode.COMPLETED, f"pod completed on {pod.done.node}")
            best = pod.leader
            if best is not None and best.epoch == epoch:
                if best.flags & BOUND:
                    return Status(StatusCode.ALREADY_BOUND, f"pod is bound to {best.node}")
                if (epoch, 0, float(score), -lamport, self.node) < rank(best):
                    return Status(StatusCode.OUTRANKED, f"{best.node} holds a better claim")
        if self._escrow.consume(self.agent_id, request) is None:
            return Status(StatusCode.INSUFFICIENT_ESCROW, f"{request} does not fit in {self.free()}")
        record = Claim(pod_uid, epoch, self.node, self.agent_id, float(score), lamport,
                       request.as_tuple(), 0, self._state.next_seq())
        self._state.write_claim(record)
        self._reserved[pod_uid] = record
        self._winning.add(pod_uid)
        return ClaimDelta(claims=(record,))

    def bind(self, pod_uid: str) -> ClaimDelta | Status:
        """Mark our winning claim bound: the pod runs here, and no same-epoch claim can displace it."""
        mine = self._winning_claim(pod_uid)
        if isinstance(mine, Status):
            return mine
        if mine.flags & BOUND:
            return Status(StatusCode.ALREADY_BOUND, "already bound here")
        return self._update_own(mine, BOUND)

    def complete(self, pod_uid: str) -> ClaimDelta | Status:
        """The pod finished here: mark it completed and give its resources back to our escrow."""
        mine = self._winning_claim(pod_uid)
        if isinstance(mine, Status):
            return mine
        if not mine.flags & BOUND:
            return Status(StatusCode.NOT_BOUND, "only a bound pod can complete")
        return self._update_own(mine, COMPLETED | RELEASED)

    def release(self, pod_uid: str) -> ClaimDelta | Status:
        """Give back the reservation of a claim of ours that lost (after stopping the pod if it ran)."""
        mine = self._reserved.get(pod_uid)
        if mine is None:
            return Status(StatusCode.NOTHING_TO_RELEASE, "no reservation of ours for this pod")
        if pod_uid in self._winning:
            return Status(StatusCode.NOT_WINNING, "our claim still wins; a winner ends by complete()")
        return self._update_own(mine, RELEASED)

    def bump_epoch(self, pod_uid: str) -> tuple[int, ClaimDelta] | Status:
        """Re-place the pod (its node was declared dead): every claim below the new epoch is stale."""
        if pod_uid in self._state.finished:
            return Status(StatusCode.COMPLETED, "pod completed and was compacted")
        pod = self._state.pods.get(pod_uid)
        if pod is not None and pod.done is not None:
            return Status(StatusCode.COMPLETED, f"pod completed on {pod.done.node}")
        mark = EpochMark(pod_uid, (pod.epoch if pod else 0) + 1, self.agent_id, self._state.next_seq())
        pod = self._state.write_mark(mark)
        if pod_uid in self._winning:  # we re-placed a pod of our own: it shows in pending_releases()
            self._check_own(pod_uid, pod, [])
        return mark.epoch, ClaimDelta(marks=(mark,))

    # ---- merging, anti-entropy, compaction -------------------------------------

    def validate(self, delta: ClaimDelta) -> None:
        """Raise :class:`crdt.errors.InvalidDelta` if ``delta`` contradicts this replica; never mutates."""
        self._state.validate(delta)

    def merge(self, delta: ClaimDelta) -> tuple[Change, ...]:
        """Validate, then join ``delta``; returns what happened to our own reservations.

        Raises :class:`crdt.errors.InvalidDelta` (state untouched) if the delta contradicts this replica.
        """
        touched = self._state.join(delta)
        if not touched:
            return NO_CHANGES
        changes: list[Change] = []
        for uid in touched:
            self._check_own(uid, self._state.pods[uid], changes)
        return tuple(changes)

    def state_delta_since(self, seen: VersionVector) -> ClaimDelta:
        """Every current record whose dot ``seen`` lacks, with our context and Lamport time: a peer's catch-up."""
        return self._state.delta_since(seen)

    def full_state(self) -> ClaimDelta:
        return self._state.delta_since(VersionVector())

    def compact(self, stable: VersionVector) -> int:
        """Forget completed, released pods every replica has fully seen; see :meth:`ClaimsState.compact`."""
        return self._state.compact(stable)

    # ---- internals -------------------------------------------------------------

    def _check_own(self, pod_uid: str, pod: PodClaims, changes: list[Change]) -> None:
        """After ``pod`` changed: if our winning claim stopped winning, say so (it never wins again)."""
        if pod_uid not in self._winning:
            return
        mine = self._reserved[pod_uid]
        best = pod.winner
        if best is None or best.node != self.node or best.epoch != mine.epoch:
            self._winning.discard(pod_uid)
            changes.append(Change(pod_uid, ChangeKind.EVICT if mine.flags & BOUND else ChangeKind.LOST))

    def _winning_claim(self, pod_uid: str) -> Claim | Status:
        if pod_uid not in self._winning:
            if pod_uid in self._reserved:
                return Status(StatusCode.NOT_WINNING, "our claim no longer wins")
            return Status(StatusCode.UNKNOWN_POD, "we hold no claim for this pod")
        return self._reserved[pod_uid]

    def _update_own(self, mine: Claim, flags: int) -> ClaimDelta:
        record = mine._replace(flags=mine.flags | flags, seq=self._state.next_seq())
        self._state.write_claim(record)
        if flags & RELEASED:
            self._escrow.add(self.agent_id, mine.resources)
            del self._reserved[record.pod]
            self._winning.discard(record.pod)
        else:
            self._reserved[record.pod] = record
        return ClaimDelta(claims=(record,))
