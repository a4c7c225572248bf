"""The claims CRDT proper: a join of grow-only claim and epoch records, indexed for speed.

This module holds the lattice and nothing about agents' intentions: what the
state is, how deltas join into it, what a peer lacks, and what can be
forgotten. :mod:`crdt.claims_replica` adds the agent's side (escrow, its own
reservations, statuses). The interface mirrors :class:`crdt.lattices.DeltaCRDT`
with :class:`ClaimDelta` as the delta type.

The winner of a pod is kept incrementally: adding a claim or a flag can only
raise the maximum, and an epoch mark resets it, so each merge is O(1) in the
number of pods and claims.
"""

from __future__ import annotations

from bisect import bisect_right, insort

from crdt.claims import COMPLETED, RELEASED, Claim, ClaimDelta, EpochMark, rank
from crdt.dots import Dot, VersionVector
from crdt.errors import InvalidDelta

NOTHING: tuple[str, ...] = ()
FINISHED_KEEP = 8192
"""Compacted pods remembered. A daemon compacts pods for months: an unbounded set grows by
one string per pod (~100 B with its slot), so only the newest are kept — at 10 pods/s, the
last ~14 minutes. A record of an older compacted pod arriving later (a peer back from a long
partition with an old version) recreates that pod's entry: inert, since the back end holds
the pod finished and nobody binds it; it goes again at a compaction if it reads completed and
released, else it stays (one entry per such straggler, not one per pod)."""


class PodClaims:
    """Everything one replica knows about one pod."""

    __slots__ = ("epoch", "mark", "claims", "leader", "done")

    def __init__(self) -> None:
        self.epoch = 0
        """The pod's fencing epoch: the highest of its claims' epochs and its mark."""
        self.mark: EpochMark | None = None
        self.claims: dict[tuple[int, str], Claim] = {}
        """Current version of every claim, by ``(epoch, node)``."""
        self.leader: Claim | None = None
        """Highest-ranked claim at ``epoch``."""
        self.done: Claim | None = None
        """Highest-ranked completed claim at any epoch: once set, the pod is over."""

    @property
    def winner(self) -> Claim | None:
        """The completing claim once there is one (completion is terminal), else the leader."""
        return self.done or self.leader


class ClaimsState:
    """Claim and epoch records joined from every replica; owned by one agent and its node.

    ``owner``/``node`` only sharpen validation: nobody else may write records
    for our node, and nobody may hand us records of ours we never wrote.
    """

    def __init__(self, owner: str, node: str) -> None:
        self.owner = owner
        self.node = node
        self.pods: dict[str, PodClaims] = {}
        self.context = VersionVector()
        self.lamport = 0
        """Highest Lamport time seen in any claim, compacted ones included (deltas carry it for that)."""
        self.watched: set[str] = set()
        """Pods whose changes :meth:`join` reports back (the owner's winning claims)."""
        self.finished: dict[str, None] = {}
        """Uids of pods dropped by :meth:`compact`, oldest first: a 1-string tombstone each, so late
        records stay out. Only the newest :data:`FINISHED_KEEP` are kept (:meth:`add_finished`)."""
        self._completed: dict[str, None] = {}
        """Pods that completed, in the order they did: the only candidates for :meth:`compact` (a dict, not a
        set, so what compaction drops and tombstones first follows the records, not the process's hash seed)."""
        self._live: dict[Dot, Claim | EpochMark] = {}
        """Dot of every current record version (superseded and pruned versions are gone)."""
        self._seqs: dict[str, list[int]] = {}
        """Sorted seqs per writer, so :meth:`delta_since` skips what a peer has seen in O(log n)."""

    # ---- the lattice -----------------------------------------------------------

    def validate(self, delta: ClaimDelta) -> None:
        """Reject a delta that contradicts what we hold; fields are checked by :mod:`crdt.wire`."""
        for record in delta.claims:
            pod = self.pods.get(record.pod)
            current = None if pod is None else pod.claims.get((record.epoch, record.node))
            self._validate_claim(record, (record.agent, record.seq), current)
        for mark in delta.marks:
            self._validate_dot(mark, (mark.agent, mark.seq))

    def join(self, delta: ClaimDelta) -> tuple[str, ...]:
        """Validate, then merge ``delta``; returns the watched pods it touched.

        Raises :class:`InvalidDelta` with the state untouched. A one-claim delta,
        what gossip carries almost always, takes a path with one lookup per index.
        """
        if len(delta.claims) == 1 and not delta.marks and delta.context is None and not delta.lamport:
            record = delta.claims[0]
            key, dot = (record.epoch, record.node), (record.agent, record.seq)
            pod = self.pods.get(record.pod)
            current = None if pod is None else pod.claims.get(key)
            self._validate_claim(record, dot, current)
            if self._merge_claim(record, dot, key, pod, current) and record.pod in self.watched:
                return (record.pod,)
            return NOTHING
        self.validate(delta)
        touched: list[str] = []
        for record in delta.claims:
            key, dot = (record.epoch, record.node), (record.agent, record.seq)
            pod = self.pods.get(record.pod)
            current = None if pod is None else pod.claims.get(key)
            if self._merge_claim(record, dot, key, pod, current) and record.pod in self.watched:
                touched.append(record.pod)
        for mark in delta.marks:
            if self._merge_mark(mark) and mark.pod in self.watched:
                touched.append(mark.pod)
        if delta.context is not None:
            self.context.merge(delta.context)
        self.lamport = max(self.lamport, delta.lamport)
        return tuple(touched)

    def merge(self, delta: ClaimDelta) -> None:
        self.join(delta)

    def version(self) -> VersionVector:
        return self.context.copy()

    def delta_since(self, seen: VersionVector) -> ClaimDelta:
        """Every current record whose dot ``seen`` lacks, with our context and Lamport time: a peer's catch-up."""
        claims: list[Claim] = []
        marks: list[EpochMark] = []
        for agent, seqs in self._seqs.items():
            for seq in seqs[bisect_right(seqs, seen.base(agent)):]:
                record = self._live.get((agent, seq))
                if record is None or (agent, seq) in seen:
                    continue
                if isinstance(record, Claim):
                    claims.append(record)
                else:
                    marks.append(record)
        return ClaimDelta(tuple(claims), tuple(marks), self.context.copy(), self.lamport)

    def compact(self, stable: VersionVector) -> int:
        """Forget completed pods whose records every replica has seen (``stable``: the meet of all versions).

        A pod goes once it completed, every claim we know is released and all
        their dots are in ``stable``. Completion is terminal, so a record made
        concurrently with it and still in flight cannot change the outcome; the
        pod's uid stays in :attr:`finished` so such a record cannot resurrect it.
        The context's gaps below ``stable`` fold away with them
        (:meth:`VersionVector.fold_stable`). Returns how many pods were dropped.
        """
        dropped = 0
        touched: set[str] = set()
        for uid in list(self._completed):
            pod = self.pods[uid]
            records: list[Claim | EpochMark] = [*pod.claims.values(), *([pod.mark] if pod.mark else [])]
            if not all(r.seq <= stable.base(r.agent) for r in records):
                continue
            if not all(c.flags & RELEASED for c in pod.claims.values()):
                continue
            del self.pods[uid]
            del self._completed[uid]
            self.add_finished(uid)
            dropped += 1
            for record in records:
                del self._live[(record.agent, record.seq)]
                touched.add(record.agent)
        for agent in touched:
            self._seqs[agent] = [s for s in self._seqs[agent] if (agent, s) in self._live]
        if dropped:
            self.context.fold_stable(stable)
        return dropped

    def add_finished(self, uid: str) -> None:
        """Tombstone a compacted pod, forgetting the oldest tombstone beyond :data:`FINISHED_KEEP`."""
        self.finished[uid] = None
        if len(self.finished) > FINISHED_KEEP:
            del self.finished[next(iter(self.finished))]

    # ---- local writes (the owner's own new records) -------------------------------

    def next_seq(self) -> int:
        return self.context.base(self.owner) + 1

    def write_claim(self, record: Claim) -> PodClaims:
        """Store a record the owner just made (already checked by the caller)."""
        pod = self.pods.get(record.pod)
        if pod is None:
            pod = self.pods[record.pod] = PodClaims()
        self.lamport = max(self.lamport, record.lamport)
        key = (record.epoch, record.node)
        self._store_claim(record, (record.agent, record.seq), key, pod, pod.claims.get(key))
        return pod

    def write_mark(self, mark: EpochMark) -> PodClaims:
        self._merge_mark(mark)
        return self.pods[mark.pod]

    # ---- internals -------------------------------------------------------------

    def _validate_claim(self, record: Claim, dot: Dot, current: Claim | None) -> None:
        if record.node == self.node and record.agent != self.owner:
            raise InvalidDelta(f"a claim for our node {self.node!r} by another agent {record.agent!r}")
        self._validate_dot(record, dot)
        if current is not None and current is not record:
            _check_versions(current, record)

    def _validate_dot(self, record: Claim | EpochMark, dot: Dot) -> None:
        known = self._live.get(dot)
        if known is not None and known != record:
            raise InvalidDelta(f"dot {dot} names two different records")
        if record.agent == self.owner and dot not in self.context:
            raise InvalidDelta(f"record {dot} claims to be ours but we never wrote it")

    def _merge_claim(
        self, record: Claim, dot: Dot, key: tuple[int, str], pod: PodClaims | None, current: Claim | None
    ) -> bool:
        """Join one validated claim (``dot`` and ``key`` precomputed: no tuple is built twice); True if it changed."""
        if pod is None:
            if record.pod in self.finished:
                self.context.add(dot)
                return False
            pod = self.pods[record.pod] = PodClaims()
        elif current is not None and record.seq <= current.seq:
            self.context.add(dot)  # an older version: seen (superseded), so no gap lingers in the context
            return False
        if record.lamport > self.lamport:
            self.lamport = record.lamport
        self._store_claim(record, dot, key, pod, current)
        return True

    def _merge_mark(self, mark: EpochMark) -> bool:
        pod = self.pods.get(mark.pod)
        if pod is None:
            if mark.pod in self.finished:
                self.context.add((mark.agent, mark.seq))
                return False
            pod = self.pods[mark.pod] = PodClaims()
        current = pod.mark
        if current is not None and (mark.epoch, mark.agent, mark.seq) <= (current.epoch, current.agent, current.seq):
            self.context.add((mark.agent, mark.seq))  # superseded on arrival: seen, not kept
            return False
        if current is not None:
            del self._live[(current.agent, current.seq)]
        pod.mark = mark
        self._index((mark.agent, mark.seq), mark)
        if mark.epoch > pod.epoch:
            pod.epoch, pod.leader = mark.epoch, None
        return True

    def _store_claim(
        self, record: Claim, dot: Dot, key: tuple[int, str], pod: PodClaims, current: Claim | None
    ) -> None:
        if current is not None:
            del self._live[(current.agent, current.seq)]
        pod.claims[key] = record
        self._index(dot, record)
        if record.epoch > pod.epoch:
            pod.epoch, pod.leader = record.epoch, record
        elif record.epoch == pod.epoch:
            best = pod.leader
            if best is None or best.node == record.node or rank(record) > rank(best):
                pod.leader = record
        if record.flags & COMPLETED:
            if pod.done is None or rank(record) > rank(pod.done):
                pod.done = record
            self._completed[record.pod] = None

    def _index(self, dot: Dot, record: Claim | EpochMark) -> None:
        self._live[dot] = record
        agent, seq = dot
        seqs = self._seqs.get(agent)
        if not seqs:
            self._seqs[agent] = [seq]
        elif seq > seqs[-1]:
            seqs.append(seq)
        else:
            insort(seqs, seq)
        self.context.add(dot)


def _check_versions(current: Claim, other: Claim) -> None:
    """Two versions of one claim must agree on its bid, and the later must hold every earlier flag."""
    if (current.agent, current.score, current.lamport, current.request) != (
        other.agent, other.score, other.lamport, other.request
    ):
        raise InvalidDelta(f"conflicting versions of the claim of {other.node!r} on {other.pod!r}")
    newer, older = (other, current) if other.seq > current.seq else (current, other)
    if older.flags & ~newer.flags or (newer.seq == older.seq and newer.flags != older.flags):
        raise InvalidDelta(f"claim of {other.node!r} on {other.pod!r} loses flags between versions")
