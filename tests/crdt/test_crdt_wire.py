"""The wire decoder is the trust boundary: round trips exactly, and rejects everything else with InvalidDelta."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import wire
from crdt.claims import BOUND, COMPLETED, RELEASED, Claim, ClaimDelta, EpochMark
from crdt.claims_replica import ClaimsReplica
from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from fedcore.resources import Resources

ids = st.text(min_size=1, max_size=40)
counts = st.integers(0, 2**40)
claims = st.builds(
    Claim,
    pod=ids, epoch=counts, node=ids, agent=ids,
    score=st.floats(allow_nan=False, allow_infinity=False),
    lamport=st.integers(1, 2**40),
    request=st.tuples(counts, counts, counts, counts),
    flags=st.sampled_from([0, BOUND, RELEASED, BOUND | RELEASED, BOUND | RELEASED | COMPLETED]),
    seq=st.integers(1, 2**40),
)
marks = st.builds(EpochMark, pod=ids, epoch=st.integers(1, 2**40), agent=ids, seq=st.integers(1, 2**40))


def unique_dots(delta: ClaimDelta) -> bool:
    """No dot names two different records (the same record twice is a harmless duplicate)."""
    records = set((*delta.claims, *delta.marks))
    return len({(r.agent, r.seq) for r in records}) == len(records)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        ClaimDelta,
        st.lists(claims, max_size=5).map(tuple),
        st.lists(marks, max_size=3).map(tuple),
        lamport=st.integers(0, 2**63 - 1),
    )
)
def test_round_trip(delta: ClaimDelta) -> None:
    if not unique_dots(delta):
        with pytest.raises(InvalidDelta):
            wire.decode_delta(wire.encode_delta(delta))
        return
    assert wire.decode_delta(wire.encode_delta(delta)) == delta


def test_round_trip_with_context_and_size() -> None:
    replica = ClaimsReplica("agent-0017", "node-0017", Resources(8000, 16384))
    delta = replica.claim("3f1c2b9e-8d6a-4c1f-9e2b-7a5d4c3b2a10", 0, 0.731, Resources(500, 512))
    assert isinstance(delta, ClaimDelta)
    data = wire.encode_delta(delta)
    assert len(data) < 128
    state = replica.full_state()
    assert wire.decode_delta(wire.encode_delta(state)) == state
    assert wire.decode_version(wire.encode_version(replica.version())) == replica.version()


def test_full_state_carries_the_lamport_time_compaction_dropped() -> None:
    """A restored replica must not reissue Lamport times; gossip records keep the 4-field form older decoders read."""
    replica = ClaimsReplica("agent-1", "node-1", Resources(8000, 16384))
    gossip = replica.claim("kept", 0, 0.5, Resources(100, 100))
    assert isinstance(gossip, ClaimDelta) and len(msgpack.unpackb(wire.encode_delta(gossip))) == 4
    replica.claim("done", 0, 0.5, Resources(100, 100))
    replica.bind("done")
    replica.complete("done")
    assert replica.compact(replica.version()) == 1 and replica.lamport == 2
    state = wire.decode_delta(wire.encode_delta(replica.full_state()), max_bytes=2**20)
    assert state.lamport == 2 and max(c.lamport for c in state.claims) == 1
    again = ClaimsReplica.restore("agent-1", "node-1", Resources(8000, 16384), state, replica.finished_pods())
    assert again.lamport == 2
    fresh = again.claim("next", 0, 0.5, Resources(100, 100))
    assert isinstance(fresh, ClaimDelta) and fresh.claims[0].lamport == 3


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_invalid_delta(data: bytes) -> None:
    for decode in (wire.decode_delta, wire.decode_version):
        try:
            decode(data)
        except InvalidDelta:
            pass


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=500, deadline=None)
@given(st.lists(json_like, min_size=4, max_size=5).map(lambda v: [1, *v[1:]]) | json_like)
def test_well_formed_msgpack_of_the_wrong_shape_raises_only_invalid_delta(value: object) -> None:
    try:
        wire.decode_delta(msgpack.packb(value))
    except InvalidDelta:
        pass


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_valid_deltas_raise_only_invalid_delta(data: st.DataObject) -> None:
    replica = ClaimsReplica("agent-1", "node-1", Resources(8000, 16384))
    replica.claim("pod-1", 0, 0.5, Resources(100, 100))
    raw = bytearray(wire.encode_delta(replica.full_state()))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        wire.decode_delta(bytes(raw))
    except InvalidDelta:
        pass


GOOD = [b"p", 0, b"n", b"a", 0.5, 1, 1, 1, 1, 1, 0, 1]


def encoded(claim: list[object], context: object = None) -> bytes:
    fields = [f.decode() if isinstance(f, bytes) else f for f in claim]
    return msgpack.packb([1, [fields], [], context])


@pytest.mark.parametrize(
    ("index", "value", "why"),
    [
        (4, math.nan, "nan score"),
        (4, math.inf, "infinite score"),
        (4, 1, "integer score"),
        (1, -1, "negative epoch"),
        (1, True, "boolean epoch"),
        (5, 0, "lamport zero"),
        (6, -5, "negative request"),
        (10, COMPLETED, "completed without bound and released"),
        (10, 64, "unknown flag"),
        (11, 0, "seq zero"),
        (0, "", "empty pod uid"),
        (2, "x" * 300, "node id too long"),
        (3, 7, "agent id not a string"),
    ],
)
def test_bad_fields_are_rejected(index: int, value: object, why: str) -> None:
    claim = list(GOOD)
    claim[index] = value
    with pytest.raises(InvalidDelta):
        wire.decode_delta(encoded(claim))


def test_inconsistent_and_oversized_deltas_are_rejected() -> None:
    fields = [f.decode() if isinstance(f, bytes) else f for f in GOOD]
    twin = list(fields)
    twin[4] = 0.9
    with pytest.raises(InvalidDelta, match="two different records"):
        wire.decode_delta(msgpack.packb([1, [fields, twin], [], None]))
    with pytest.raises(InvalidDelta, match="context"):
        wire.decode_delta(encoded(GOOD, context=[["someone-else", 3, []]]))
    with pytest.raises(InvalidDelta, match="limit"):
        wire.decode_delta(msgpack.packb([1, [fields] * 5000, [], None]))
    with pytest.raises(InvalidDelta, match="expected"):
        wire.decode_delta(msgpack.packb([2, [], [], None]))
    assert wire.decode_delta(encoded(GOOD)).claims[0].pod == "p"


@pytest.mark.parametrize("lamport", [-1, 2**63, True, 1.5, "7", None, [3]])
def test_a_bad_lamport_is_rejected_and_a_missing_one_is_zero(lamport: object) -> None:
    fields = [f.decode() if isinstance(f, bytes) else f for f in GOOD]
    with pytest.raises(InvalidDelta, match="lamport"):
        wire.decode_delta(msgpack.packb([1, [fields], [], None, lamport]))
    with pytest.raises(InvalidDelta, match="expected"):
        wire.decode_delta(msgpack.packb([1, [fields], [], None, 3, lamport]))
    assert wire.decode_delta(msgpack.packb([1, [fields], [], None])).lamport == 0
    assert wire.decode_delta(msgpack.packb([1, [fields], [], None, 3])).lamport == 3


def test_rejected_bytes_leave_a_replica_untouched() -> None:
    replica = ClaimsReplica("agent-1", "node-1", Resources(8000, 16384))
    replica.claim("pod-1", 0, 0.5, Resources(100, 100))
    before = (replica.full_state(), replica.version())
    bad = encoded(["pod-1", 0, "node-1", "agent-1", 0.9, 1, 1, 1, 1, 1, 0, 1])  # our own claim, other bid
    with pytest.raises(InvalidDelta):
        replica.merge(wire.decode_delta(bad))
    assert (replica.full_state(), replica.version()) == before
    assert VersionVector() == wire.decode_version(wire.encode_version(VersionVector()))


def test_decoded_claims_share_their_name_strings() -> None:
    """A replica keeps every live claim: node and agent names are one string object each, not one per record.

    Pod names are not interned (each is transient; a stream of them would grow the interpreter's table for good)."""
    a = ClaimsReplica("agent-a" * 8, "node-a" * 8, Resources(4000, 8192))
    claim = a.claim("pod-" + "p" * 40, 0, 0.5, Resources(1000, 1024))
    assert isinstance(claim, ClaimDelta)
    one, two = (wire.decode_delta(wire.encode_delta(claim)).claims[0] for _ in range(2))
    assert one == claim.claims[0] and one.node is two.node and one.agent is two.agent
    assert one.pod == two.pod and one.pod is not two.pod
