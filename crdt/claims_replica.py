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
local claims and on merges.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Iterator

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
from crdt.dots import Dot, VersionVector
from crdt.errors import InvalidDelta
from crdt.escrow import Escrow

NO_CHANGES: tuple[Change, ...] = ()


class _Pod:
    """Everything one replica knows about one pod."""

    __slots__ = ("epoch", "mark", "claims", "leader", "done")

    def __init__(self) -> None:
        self.epoch = 0
        """The pod's fencing epoch: the highest of its claims' epochs and its mark."""
        self.mark: EpochMark | None = None
        self.claims: dict[tuple[int, str], Claim] = {}
        """Current version of every claim, by ``(epoch, node)``."""
        self.leader: Claim | None = None
        """Highest-ranked claim at ``epoch``, kept incrementally."""
        self.done: Claim | None = None
        """Highest-ranked completed claim at any epoch: once set, the pod is over."""

    @property
    def winner(self) -> Claim | None:
        return self.done or self.leader


class ClaimsReplica:
    """The claims CRDT as one edge agent holds it; the agent claims only for its own node."""

    def __init__(self, agent_id: str, node: str, capacity: Resources) -> None:
        self.agent_id = agent_id
        self.node = node
        self.capacity = capacity
        self._pods: dict[str, _Pod] = {}
        self._context = VersionVector()
        self._live: dict[Dot, Claim | EpochMark] = {}
        """Dot of every current record version (superseded and pruned versions are gone)."""
        self._seqs: dict[str, list[int]] = {}
        """Sorted seqs per writer, so ``state_delta_since`` skips what a peer has seen in O(log n)."""
        self._lamport = 0
        self._escrow = Escrow()
        self._escrow.add(agent_id, capacity)
        self._reserved: dict[str, Claim] = {}
        """Our unreleased claim per pod (at most one)."""
        self._finished: set[str] = set()
        """Uids of pods dropped by :meth:`compact`: a 1-string tombstone each, so late records stay out."""
        self._completed: set[str] = set()
        """Pods that completed: the only candidates for :meth:`compact`."""
        self._winning: set[str] = set()
        """Pods where our reserved claim is the winner; the rest of ``_reserved`` must be released."""

    # ---- queries ---------------------------------------------------------------

    def winner(self, pod_uid: str) -> Claim | None:
        """The winning claim at the pod's current epoch, or ``None`` if it has none yet."""
        pod = self._pods.get(pod_uid)
        return None if pod is None else pod.winner

    def epoch(self, pod_uid: str) -> int:
        pod = self._pods.get(pod_uid)
        return 0 if pod is None else pod.epoch

    def claims(self, pod_uid: str) -> list[Claim]:
        pod = self._pods.get(pod_uid)
        return [] if pod is None else list(pod.claims.values())

    def pods(self) -> Iterator[str]:
        """Uids of the pods held in full (not yet compacted away)."""
        return iter(self._pods)

    def is_finished(self, pod_uid: str) -> bool:
        """True once the pod completed and :meth:`compact` dropped its records."""
        return pod_uid in self._finished

    def pods_on(self, node: str) -> list[str]:
        """Pods whose winner is ``node`` and not completed: what to re-place if ``node`` dies."""
        return [
            uid
            for uid, pod in self._pods.items()
            if pod.done is None and pod.leader is not None and pod.leader.node == node
        ]

    def pending_releases(self) -> list[str]:
        """Pods whose claim of ours lost (or was evicted) and still holds escrow: call :meth:`release`."""
        return [uid for uid in self._reserved if uid not in self._winning]

    def free(self) -> Resources:
        """Our node's capacity not reserved by an unreleased claim of ours."""
        return self._escrow.rights(self.agent_id)

    def version(self) -> VersionVector:
        """What this replica has seen; a peer answers it with :meth:`state_delta_since`."""
        return self._context.copy()

    def has_news_for(self, seen: VersionVector) -> bool:
        """True when :meth:`state_delta_since` ``(seen)`` would carry something: a cheap pre-check."""
        return not seen.dominates(self._context)

    @property
    def lamport(self) -> int:
        return self._lamport

    # ---- local operations ------------------------------------------------------

    def claim(self, pod_uid: str, epoch: int, score: float, request: Resources) -> ClaimDelta | Status:
        """Bid for ``pod_uid`` on our node, reserving ``request`` in our escrow first."""
        if not math.isfinite(score):
            return Status(StatusCode.BAD_SCORE, f"score {score!r} is not finite")
        if pod_uid in self._finished:
            return Status(StatusCode.COMPLETED, "pod completed and was compacted")
        pod = self._pods.get(pod_uid)
        lamport = self._lamport + 1
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
        spent = self._escrow.consume(self.agent_id, request)
        if spent is None:
            return Status(StatusCode.INSUFFICIENT_ESCROW, f"{request} does not fit in {self.free()}")
        self._lamport = lamport
        record = Claim(pod_uid, epoch, self.node, self.agent_id, float(score), lamport,
                       request.as_tuple(), 0, self._next_seq())
        self._store_claim(record, self._pods.setdefault(pod_uid, _Pod()))
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
        if pod_uid in self._finished:
            return Status(StatusCode.COMPLETED, "pod completed and was compacted")
        pod = self._pods.setdefault(pod_uid, _Pod())
        if pod.done is not None:
            return Status(StatusCode.COMPLETED, f"pod completed on {pod.done.node}")
        mark = EpochMark(pod_uid, pod.epoch + 1, self.agent_id, self._next_seq())
        self._store_mark(mark, pod)
        if pod_uid in self._winning:  # we re-placed a pod of our own: it shows in pending_releases()
            self._check_own(pod_uid, pod, [])
        return mark.epoch, ClaimDelta(marks=(mark,))

    # ---- merging ---------------------------------------------------------------

    def validate(self, delta: ClaimDelta) -> None:
        """Reject a delta that contradicts what we hold; fields are checked by :mod:`crdt.wire`."""
        pods, live, me = self._pods, self._live, self.agent_id
        for record in delta.claims:
            dot = (record.agent, record.seq)
            if record.agent == me or record.node == self.node:
                self._check_own_record(record, dot)
            known = live.get(dot)
            if known is not None and known != record:
                raise InvalidDelta(f"dot {dot} names two different records")
            pod = pods.get(record.pod)
            current = None if pod is None else pod.claims.get((record.epoch, record.node))
            if current is not None and current is not record:
                _check_versions(current, record)
        for mark in delta.marks:
            dot = (mark.agent, mark.seq)
            if mark.agent == me:
                self._check_own_record(mark, dot)
            known = live.get(dot)
            if known is not None and known != mark:
                raise InvalidDelta(f"dot {dot} names two different records")

    def merge(self, delta: ClaimDelta) -> tuple[Change, ...]:
        """Validate, then join ``delta``; returns what happened to our own reservations.

        Raises :class:`InvalidDelta` (state untouched) if the delta contradicts this replica.
        """
        self.validate(delta)
        changes: list[Change] | None = None
        pods, context, watched = self._pods, self._context, self._winning
        finished = self._finished
        for record in delta.claims:
            pod = pods.get(record.pod)
            if pod is None:
                if record.pod in finished:
                    context.add((record.agent, record.seq))
                    continue
                pod = pods[record.pod] = _Pod()
            current = pod.claims.get((record.epoch, record.node))
            if current is not None and record.seq <= current.seq:
                continue
            if record.lamport > self._lamport:
                self._lamport = record.lamport
            self._store_claim(record, pod)
            if record.pod in watched:
                changes = self._check_own(record.pod, pod, changes or [])
        for mark in delta.marks:
            pod = pods.get(mark.pod)
            if pod is None:
                if mark.pod in finished:
                    context.add((mark.agent, mark.seq))
                    continue
                pod = pods[mark.pod] = _Pod()
            self._store_mark(mark, pod)
            if mark.pod in watched:
                changes = self._check_own(mark.pod, pod, changes or [])
        if delta.context is not None:
            context.merge(delta.context)
        return tuple(changes) if changes else NO_CHANGES

    # ---- anti-entropy and compaction --------------------------------------------

    def state_delta_since(self, seen: VersionVector) -> ClaimDelta:
        """Every current record whose dot ``seen`` lacks, with our context: a peer's catch-up."""
        claims: list[Claim] = []
        marks: list[EpochMark] = []
        for agent, seqs in self._seqs.items():
            for seq in seqs[bisect_right(seqs, seen.base(agent)):]:
                record = self._live.get((agent, seq))
                if record is None or (agent, seq) in seen:
                    continue
                (claims if isinstance(record, Claim) else marks).append(record)  # type: ignore[arg-type]
        return ClaimDelta(tuple(claims), tuple(marks), self._context.copy())

    def full_state(self) -> ClaimDelta:
        return self.state_delta_since(VersionVector())

    def compact(self, stable: VersionVector) -> int:
        """Forget completed pods whose records every replica has seen (``stable``: the meet of all versions).

        A pod goes once it completed, every claim we know is released and
        all their dots are in ``stable``. Only its uid stays (in a finished set),
        because a claim made concurrently with the completion may still be in
        flight and must not resurrect it. Returns how many pods were dropped.
        """
        dropped = 0
        touched: set[str] = set()
        for uid in list(self._completed):
            pod = self._pods[uid]
            records: list[Claim | EpochMark] = [*pod.claims.values(), *([pod.mark] if pod.mark else [])]
            if not all(r.seq <= stable.base(r.agent) for r in records):
                continue
            if not all(c.flags & RELEASED for c in pod.claims.values()):
                continue
            del self._pods[uid]
            self._completed.discard(uid)
            self._finished.add(uid)
            dropped += 1
            for record in records:
                del self._live[(record.agent, record.seq)]
                touched.add(record.agent)
        for agent in touched:
            self._seqs[agent] = [s for s in self._seqs[agent] if (agent, s) in self._live]
        return dropped

    # ---- internals -------------------------------------------------------------

    def _next_seq(self) -> int:
        return self._context.base(self.agent_id) + 1

    def _index(self, agent: str, seq: int, record: Claim | EpochMark) -> None:
        self._live[(agent, seq)] = record
        seqs = self._seqs.get(agent)
        if not seqs:
            self._seqs[agent] = [seq]
        elif seq > seqs[-1]:
            seqs.append(seq)
        else:
            insort(seqs, seq)
        self._context.add((agent, seq))

    def _store_claim(self, record: Claim, pod: _Pod) -> None:
        key = (record.epoch, record.node)
        current = pod.claims.get(key)
        if current is not None:
            del self._live[(current.agent, current.seq)]
        pod.claims[key] = record
        self._index(record.agent, record.seq, record)
        if record.epoch > pod.epoch:
            pod.epoch, pod.leader = record.epoch, record
        elif record.epoch == pod.epoch:
            best = pod.leader
            if best is None or best.node == record.node or rank(record) > rank(best):
                pod.leader = record
        if record.flags & COMPLETED:
            if pod.done is None or rank(record) > rank(pod.done):
                pod.done = record
            self._completed.add(record.pod)

    def _store_mark(self, mark: EpochMark, pod: _Pod) -> None:
        current = pod.mark
        if current is not None and (mark.epoch, mark.agent, mark.seq) <= (current.epoch, current.agent, current.seq):
            self._context.add((mark.agent, mark.seq))  # superseded on arrival: seen, not kept
            return
        if current is not None:
            del self._live[(current.agent, current.seq)]
        pod.mark = mark
        self._index(mark.agent, mark.seq, mark)
        if mark.epoch > pod.epoch:
            pod.epoch, pod.leader = mark.epoch, None

    def _check_own(self, pod_uid: str, pod: _Pod, changes: list[Change]) -> list[Change]:
        """After ``pod`` changed: if our winning claim stopped winning, say so (it never wins again)."""
        mine = self._reserved[pod_uid]
        best = pod.winner
        if pod_uid in self._winning and (best is None or best.node != self.node or best.epoch != mine.epoch):
            self._winning.discard(pod_uid)
            changes.append(Change(pod_uid, ChangeKind.EVICT if mine.flags & BOUND else ChangeKind.LOST))
        return changes

    def _winning_claim(self, pod_uid: str) -> Claim | Status:
        if pod_uid not in self._winning:
            if pod_uid in self._reserved:
                return Status(StatusCode.NOT_WINNING, "our claim no longer wins")
            return Status(StatusCode.UNKNOWN_POD, "we hold no claim for this pod")
        return self._reserved[pod_uid]

    def _update_own(self, mine: Claim, flags: int) -> ClaimDelta:
        record = mine._replace(flags=mine.flags | flags, seq=self._next_seq())
        self._store_claim(record, self._pods[record.pod])
        if flags & RELEASED:
            self._escrow.add(self.agent_id, mine.resources)
            del self._reserved[record.pod]
            self._winning.discard(record.pod)
        else:
            self._reserved[record.pod] = record
        return ClaimDelta(claims=(record,))

    def _check_own_record(self, record: Claim | EpochMark, dot: Dot) -> None:
        if record.agent != self.agent_id:
            raise InvalidDelta(f"a claim for our node {self.node!r} by another agent {record.agent!r}")
        if dot not in self._context:
            raise InvalidDelta(f"record {dot} claims to be ours but we never wrote it")


def _check_versions(current: Claim, other: Claim) -> None:
    """Two versions of one claim must agree on its bid, and the later must hold every earlier flag."""
    if (current.agent, current.score, current.lamport, current.request) != (
        other.agent, other.score, other.lamport, other.request
    ):
        raise InvalidDelta(f"conflicting versions of the claim of {other.node!r} on {other.pod!r}")
    newer, older = (other, current) if other.seq > current.seq else (current, other)
    if older.flags & ~newer.flags or (newer.seq == older.seq and newer.flags != older.flags):
        raise InvalidDelta(f"claim of {other.node!r} on {other.pod!r} loses flags between versions")
