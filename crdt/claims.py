"""Placement-claim records, their total order, and what replica operations return.

A claim says "node N (owned by agent A) will run pod P in fencing epoch E, with
this score". Claims are facts that only grow: later versions of a claim, all
written by its owner, only add flags (bound, released, completed). The winner of
a pod is the maximum of its current-epoch claims under :func:`rank`, so adding
claims or flags can only move the winner up — which is what lets every replica
pick the same winner whatever order it merged in.

Records are ``NamedTuple`` s rather than dataclasses: the merge fast path builds
and compares hundreds of thousands of them a second, and tuples are the cheapest
immutable records Python has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from fedcore.resources import Resources

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta

# Claim flags, one bit each. ONLY APPEND: the values are on the wire.
BOUND = 1
"""The owner bound the pod to its node: the pod runs there. Final within the epoch."""
RELEASED = 2
"""The owner gave the reservation back to its node's escrow."""
COMPLETED = 4
"""The pod finished on this node (always set together with ``BOUND | RELEASED``)."""
ALL_FLAGS = BOUND | RELEASED | COMPLETED

MAX_ID_LEN = 253
"""Longest pod uid, node or agent id accepted (a DNS subdomain)."""


class Claim(NamedTuple):
    """One node's bid for one pod in one epoch; the version with the highest ``seq`` is current."""

    pod: str
    epoch: int
    node: str
    agent: str
    """The node's owner, the only writer of this claim; ``(agent, seq)`` is the version's dot."""
    score: float
    lamport: int
    """The owner's Lamport time when it claimed; earlier claims win ties on score."""
    request: tuple[int, int, int, int]
    """Resources reserved in the node's escrow, as :meth:`Resources.as_tuple`."""
    flags: int
    seq: int

    @property
    def resources(self) -> Resources:
        return Resources(*self.request)

    @property
    def bound(self) -> bool:
        return bool(self.flags & BOUND)

    @property
    def released(self) -> bool:
        return bool(self.flags & RELEASED)

    @property
    def completed(self) -> bool:
        return bool(self.flags & COMPLETED)


def rank(claim: Claim) -> tuple[int, int, float, int, str]:
    """The winner order: highest epoch, then bound before unbound, then score, earlier Lamport, node id.

    ``bound`` ranks above ``score`` so a binding is final for its (pod, epoch):
    a better claim arriving after a bind cannot displace it. Only two bindings
    made concurrently (each binder not yet seeing the other's claim) are ordered
    by score; the loser is told to evict (:data:`ChangeKind.EVICT`). A completed
    claim outranks every other claim of its pod, at any epoch: completion is terminal.
    """
    return (claim.epoch, claim.flags & BOUND, claim.score, -claim.lamport, claim.node)


class EpochMark(NamedTuple):
    """A re-placer raised the pod's fencing epoch: every claim below ``epoch`` is stale."""

    pod: str
    epoch: int
    agent: str
    seq: int


@dataclass(frozen=True, slots=True)
class ClaimDelta:
    """A join of claim and epoch records; what replicas gossip and what a full state sync sends.

    ``context`` and ``lamport`` are set on anti-entropy deltas (and so on a full
    state): the sender's whole version vector, valid because the delta holds
    every record the receiver lacked, and its Lamport high-water mark, which
    compacted records no longer show but a restored replica must not go below.
    """

    claims: tuple[Claim, ...] = ()
    marks: tuple[EpochMark, ...] = ()
    context: VersionVector | None = None
    lamport: int = 0


class StatusCode(IntEnum):
    """Why a local operation did nothing. ONLY APPEND."""

    INSUFFICIENT_ESCROW = 1
    STALE_EPOCH = 2
    ALREADY_CLAIMED = 3
    ALREADY_BOUND = 4
    OUTRANKED = 5
    NOT_WINNING = 6
    NOT_BOUND = 7
    NOTHING_TO_RELEASE = 8
    COMPLETED = 9
    UNKNOWN_POD = 10
    BAD_SCORE = 11


@dataclass(frozen=True, slots=True)
class Status:
    """An expected refusal: the caller decides what to do (retry later, skip the pod, ...)."""

    code: StatusCode
    reason: str


class ChangeKind(IntEnum):
    """What a merge did to one of this replica's own reservations."""

    LOST = 1
    """Our unbound claim is no longer the winner: call ``release``."""
    EVICT = 2
    """Our bound claim was displaced (a higher epoch, or a concurrent binding that ranks higher):
    stop the pod, then call ``release``."""


class Change(NamedTuple):
    pod: str
    kind: ChangeKind


def _check_id(value: object, what: str) -> None:
    if type(value) is not str or not 0 < len(value) <= MAX_ID_LEN:
        raise InvalidDelta(f"{what} must be a string of 1..{MAX_ID_LEN} characters, got {value!r:.80}")


def _check_count(value: object, what: str, low: int) -> None:
    if type(value) is not int or not low <= value < 2**63:
        raise InvalidDelta(f"{what} must be an integer in [{low}, 2**63), got {value!r:.80}")


def check_claim(claim: Claim) -> None:
    """Field-level checks for a claim that came from outside the process."""
    _check_id(claim.pod, "pod uid")
    _check_id(claim.node, "node")
    _check_id(claim.agent, "agent")
    _check_count(claim.epoch, "epoch", 0)
    _check_count(claim.lamport, "lamport", 1)
    _check_count(claim.seq, "seq", 1)
    if type(claim.score) is not float or not math.isfinite(claim.score):
        raise InvalidDelta(f"score must be a finite float, got {claim.score!r:.80}")
    if len(claim.request) != 4:
        raise InvalidDelta("a request is 4 integers")
    for value in claim.request:
        _check_count(value, "requested resource", 0)
    _check_count(claim.flags, "flags", 0)
    if claim.flags & ~ALL_FLAGS:
        raise InvalidDelta(f"unknown claim flags {claim.flags:#x}")
    if claim.flags & COMPLETED and claim.flags & (BOUND | RELEASED) != BOUND | RELEASED:
        raise InvalidDelta("a completed claim must also be bound and released")


def check_mark(mark: EpochMark) -> None:
    _check_id(mark.pod, "pod uid")
    _check_id(mark.agent, "agent")
    _check_count(mark.epoch, "epoch", 1)
    _check_count(mark.seq, "seq", 1)


def check_delta(delta: ClaimDelta) -> None:
    """Checks a received delta on its own: fields, and no dot used twice for different records."""
    _check_count(delta.lamport, "the delta's lamport", 0)
    seen: dict[tuple[str, int], object] = {}
    records: list[Claim | EpochMark] = [*delta.claims, *delta.marks]
    for record in records:
        if isinstance(record, Claim):
            check_claim(record)
        else:
            check_mark(record)
        dot = (record.agent, record.seq)
        if seen.setdefault(dot, record) != record:
            raise InvalidDelta(f"dot {dot} names two different records in one delta")
        if delta.context is not None and dot not in delta.context:
            raise InvalidDelta(f"dot {dot} is missing from the delta's own context")
