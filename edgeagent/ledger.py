"""The agent's claims replica with a write-ahead record of every change, and an index of its own records.

:class:`crdt.claims_replica.ClaimsReplica` is pure and deterministic, so replaying the
same inputs in the same order rebuilds the same state — same Lamport times, same
sequence numbers, same reservations. That is how the agent survives a restart: every
state-changing call is appended to :attr:`Ledger.ops`, the daemon writes them to the
journal (fsync) *before* any effect of the call leaves the process, and on start
:meth:`Ledger.replay` feeds the journal back in. To keep the journal from growing
for ever, :meth:`Ledger.snapshot` is one operation that stands for all before it (the
replica's full state, its compacted pods and the agents it knows): the daemon rewrites
the journal as that one frame once it passes ``journal_max_mib``.

The own-record index answers "what do I publish for pod P": the current version of
each of my claims on P and the epoch mark I wrote, if any.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fedcore.resources import Resources

from crdt import wire
from crdt.claims import RELEASED, Change, Claim, ClaimDelta, EpochMark, Status
from crdt.claims_replica import ClaimsReplica
from crdt.dots import VersionVector

Op = list[Any]
"""One journaled call: ``[name, *arguments]`` with msgpack-friendly arguments."""

_EVERYTHING = 2**62
"""Compaction treats every dot as stable (see :meth:`Ledger.compact`)."""


class Ledger:
    """A :class:`ClaimsReplica` whose every change is recorded for the journal."""

    def __init__(self, agent_id: str, node: str, capacity: Resources) -> None:
        self.replica = ClaimsReplica(agent_id, node, capacity)
        self.agent_id = agent_id
        self.ops: list[Op] = []
        """Changes not yet handed to the journal (:meth:`take_ops`)."""
        self._own: dict[str, dict[int, Claim]] = {}
        self._marks: dict[str, EpochMark] = {}
        self._agents: set[str] = {agent_id}
        self._bound_at: dict[str, int] = {}
        """Back-end epoch each bound pod of ours was bound at: our claim's CRDT epoch is higher when the bind was
        adopted after a rival won in the CRDT, and an eviction is fenced by the back end's epoch."""

    # ---- local operations (each recorded when it changed something) ----------------------

    def claim(self, pod: str, epoch: int, score: float, request: Resources) -> ClaimDelta | Status:
        out = self.replica.claim(pod, epoch, score, request)
        return self._record(out, ["claim", pod, epoch, score, list(request.as_tuple())])

    def bind(self, pod: str, epoch: int | None) -> ClaimDelta | Status:
        """Mark our claim bound; ``epoch`` is the back end's (None: a journal written before it was recorded)."""
        out = self._record(self.replica.bind(pod), ["bind", pod, epoch])
        if not isinstance(out, Status) and epoch is not None:
            self._bound_at[pod] = epoch
        return out

    def complete(self, pod: str) -> ClaimDelta | Status:
        self._bound_at.pop(pod, None)
        return self._record(self.replica.complete(pod), ["complete", pod])

    def release(self, pod: str) -> ClaimDelta | Status:
        self._bound_at.pop(pod, None)
        return self._record(self.replica.release(pod), ["release", pod])

    def bump_epoch(self, pod: str) -> ClaimDelta | Status:
        out = self.replica.bump_epoch(pod)
        if isinstance(out, Status):
            return out
        return self._record(out[1], ["bump", pod])

    def merge(self, data: bytes) -> tuple[ClaimDelta, tuple[Change, ...]]:
        """Decode and merge a peer's record; returns it and what it did to our own claims (a claim that
        stopped winning now shows in ``replica.pending_releases()``). Raises :class:`crdt.errors.InvalidDelta`
        with nothing changed."""
        delta = wire.decode_delta(data)
        changes = self.replica.merge(delta)
        agents = self._agents
        for record in (*delta.claims, *delta.marks):
            agents.add(record.agent)
        self.ops.append(["merge", data])
        return delta, changes

    def compact(self) -> list[str]:
        """Drop completed pods whose claims are all released; returns their uids.

        Every dot counts as stable: a replica's compaction is local (it only frees our
        memory), completion is terminal in the CRDT and compacted uids stay tombstoned,
        so a straggling record cannot resurrect the pod. Peers still learn of the
        completion because our gossip record for the pod outlives compaction by
        ``placement.compact_after`` seconds.
        """
        if not self.replica.compact(VersionVector({a: _EVERYTHING for a in self._agents})):
            return []
        self.ops.append(["compact"])
        gone = [uid for uid in self.own_pods() if self.replica.is_finished(uid)]
        for uid in gone:
            self._own.pop(uid, None)
            self._marks.pop(uid, None)
        return gone

    # ---- queries ----------------------------------------------------------------------------

    def own_delta(self, pod: str) -> ClaimDelta | None:
        """Our current records for ``pod`` (what our gossip record carries), or None if we wrote none."""
        claims = tuple(self._own.get(pod, {}).values())
        mark = self._marks.get(pod)
        if not claims and mark is None:
            return None
        return ClaimDelta(claims=claims, marks=(mark,) if mark else ())

    def own_pods(self) -> Iterator[str]:
        """Pods we hold records for (not yet compacted), in the order we first wrote for them: what we
        republish and withdraw follows our records, not the process's hash seed."""
        return iter(dict.fromkeys([*self._own, *self._marks]))

    def bound_epoch(self, claim: Claim) -> int:
        """The back-end epoch our bound ``claim``'s pod was bound at."""
        return self._bound_at.get(claim.pod, claim.epoch)

    def reservations_of(self, pod: str) -> list[Claim]:
        """Our unreleased claims on ``pod``: :meth:`reservations` for one pod, without a scan of every pod."""
        return [claim for claim in self._own.get(pod, {}).values() if not claim.flags & RELEASED]

    def reservations(self) -> Iterator[Claim]:
        """Our unreleased claims: what our node's capacity is reserved for."""
        for claims in self._own.values():
            for claim in claims.values():
                if not claim.flags & RELEASED:
                    yield claim

    def snapshot(self) -> Op:
        """One operation whose replay rebuilds this ledger as it is now (it stands for every earlier one)."""
        state = self.replica.full_state()
        return ["restore", wire.encode_delta(state), list(self.replica.finished_pods()), sorted(self._agents),
                sorted(self._bound_at.items())]

    def take_ops(self) -> list[Op]:
        ops, self.ops = self.ops, []
        return ops

    # ---- restart -------------------------------------------------------------------------------

    @classmethod
    def replay(cls, agent_id: str, node: str, capacity: Resources, ops: Iterable[Op]) -> Ledger:
        """Rebuild the ledger a previous life left, from its journal; raises ValueError on a foreign op."""
        ledger = cls(agent_id, node, capacity)
        apply: dict[str, Callable[[list[Any]], object]] = {
            "claim": lambda a: ledger.claim(a[0], a[1], a[2], Resources.from_tuple(a[3])),
            "bind": lambda a: ledger.bind(a[0], a[1] if len(a) > 1 else None),
            "complete": lambda a: ledger.complete(a[0]),
            "release": lambda a: ledger.release(a[0]),
            "bump": lambda a: ledger.bump_epoch(a[0]),
            "merge": lambda a: ledger.merge(a[0]),
            "compact": lambda a: ledger.compact(),
            "restore": lambda a: ledger._restore(a[0], a[1], a[2], a[3] if len(a) > 3 else []),
        }
        for op in ops:
            step = apply.get(op[0]) if isinstance(op, list) and op and isinstance(op[0], str) else None
            if step is None:
                raise ValueError(f"journal holds an unknown operation {op!r:.80}")
            step(op[1:])
        ledger.ops.clear()
        return ledger

    # ---- internals -------------------------------------------------------------------------------

    def _restore(self, data: bytes, finished: list[str], agents: list[str], bound_at: list[list[Any]]) -> None:
        """Become what :meth:`snapshot` saved (a journal is trusted local data: no record-size bound)."""
        state = wire.decode_delta(data, max_bytes=len(data))
        replica = self.replica
        self.replica = ClaimsReplica.restore(replica.agent_id, replica.node, replica.capacity, state, finished)
        self._own, self._marks, self._agents = {}, {}, {self.agent_id, *agents}
        self._bound_at = {str(pod): int(epoch) for pod, epoch in bound_at}
        self._index([c for c in state.claims if c.agent == self.agent_id], [m for m in state.marks if m.agent == self.agent_id])

    def _record(self, out: ClaimDelta | Status, op: Op) -> ClaimDelta | Status:
        if isinstance(out, Status):
            return out
        self._index(out.claims, out.marks)
        self.ops.append(op)
        return out

    def _index(self, claims: Iterable[Claim], marks: Iterable[EpochMark]) -> None:
        """Note our own records' current versions: what our gossip record for each pod carries."""
        for claim in claims:
            self._own.setdefault(claim.pod, {})[claim.epoch] = claim
        for mark in marks:
            self._marks[mark.pod] = mark
