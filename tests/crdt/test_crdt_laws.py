"""Lattice laws for every generic delta CRDT: one suite, run against each type (a contract test).

States come from one shared random history over three replicas (so they never
contradict each other), then the laws are checked on them: merge is
commutative, associative and idempotent, and shipping ``delta_since`` equals
shipping the whole state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from crdt.escrow import Escrow
from crdt.lattices import apply, join
from crdt.lww import LWWRegister, Marker
from crdt.ormap import ORMap
from crdt.orset import ORSet
from crdt.pncounter import PNCounter
from fedcore.resources import Resources

REPLICAS = ("a", "b", "c")


@dataclass(frozen=True)
class Kit:
    """How to make and mutate one CRDT type; the laws below are written once against this."""

    name: str
    fresh: Callable[[], Any]
    mutate: Callable[[Any, str, int], Any]
    """Apply one mutation chosen by an integer as the given replica; return its delta."""


def _lww(state: LWWRegister[int], replica: str, arg: int) -> LWWRegister[int]:
    lamport = (state.marker.lamport if state.marker else 0) + 1
    return state.set(arg, Marker(lamport, replica))


def _pn(state: PNCounter, replica: str, arg: int) -> PNCounter:
    return state.increment(replica, arg - 5)


def _escrow(state: Escrow, replica: str, arg: int) -> Escrow:
    amount = Resources(arg % 7, arg % 3)
    if arg % 3 == 0:
        return state.add(replica, amount)
    if arg % 3 == 1:
        return state.consume(replica, amount) or Escrow()
    other = REPLICAS[(REPLICAS.index(replica) + 1 + arg % 2) % 3]
    return state.transfer(replica, other, amount) or Escrow()


def _orset(state: ORSet[int], replica: str, arg: int) -> ORSet[int]:
    return state.add(arg % 5, replica) if arg % 3 else state.remove(arg % 5, replica)


def _ormap(state: ORMap[int, int], replica: str, arg: int) -> ORMap[int, int]:
    return state.put(arg % 4, arg, replica) if arg % 3 else state.remove(arg % 4, replica)


KITS = [
    Kit("lww", LWWRegister, _lww),
    Kit("pncounter", PNCounter, _pn),
    Kit("escrow", Escrow, _escrow),
    Kit("orset", ORSet, _orset),
    Kit("ormap", ORMap, _ormap),
]

steps = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 20), st.sets(st.integers(0, 2), max_size=2)), max_size=25
)


def history(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> list[Any]:
    """Three replicas after ``ops``: each op mutates one replica and ships the delta to some others."""
    states = [kit.fresh() for _ in REPLICAS]
    for who, arg, targets in ops:
        delta = kit.mutate(states[who], REPLICAS[who], arg)
        for target in targets - {who}:
            apply(states[target], copy.deepcopy(delta))
    return states


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
@settings(max_examples=60, deadline=None)
@given(ops=steps)
def test_merge_is_commutative(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> None:
    a, b, _ = history(kit, ops)
    assert join(a, b) == join(b, a)


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
@settings(max_examples=60, deadline=None)
@given(ops=steps)
def test_merge_is_associative(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> None:
    a, b, c = history(kit, ops)
    assert join(join(a, b), c) == join(a, join(b, c))


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
@settings(max_examples=60, deadline=None)
@given(ops=steps)
def test_merge_is_idempotent(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> None:
    a, b, _ = history(kit, ops)
    assert join(a, a) == a
    ab = join(a, b)
    assert join(ab, b) == ab


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
@settings(max_examples=60, deadline=None)
@given(ops=steps)
# ormap: of a's put, put, remove of key 0 only the first and the last reach b, so b's context
# covers the second put (a2) without b learning that it removed the first (a1)
@example(ops=[(0, 4, {0, 1}), (0, 4, set()), (0, 0, {0, 1})])
def test_delta_since_equals_full_state_merge(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> None:
    a, b, _ = history(kit, ops)
    assert join(b, a.delta_since(b.version())) == join(b, a)
    assert join(b, a.delta_since(VersionVector())) == join(b, a)


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
@settings(max_examples=60, deadline=None)
@given(ops=steps)
def test_fully_merged_replicas_converge(kit: Kit, ops: list[tuple[int, int, set[int]]]) -> None:
    a, b, c = history(kit, ops)
    assert join(join(a, b), c) == join(join(c, a), b) == join(join(b, c), a)


@settings(max_examples=60, deadline=None)
@given(ops=steps)
def test_escrow_never_overdrawn_once_merged(ops: list[tuple[int, int, set[int]]]) -> None:
    merged = join(join(*history(KITS[2], ops)[:2]), history(KITS[2], ops)[2])
    assert merged.value.is_nonnegative()
    assert all(merged.rights(r).is_nonnegative() for r in REPLICAS)


def test_escrow_consumes_only_rights_held() -> None:
    escrow = Escrow()
    escrow.add("a", Resources(1000, 100))
    assert escrow.consume("b", Resources(1)) is None
    assert escrow.transfer("a", "b", Resources(400, 40)) is not None
    assert escrow.consume("b", Resources(400, 40)) is not None
    assert escrow.consume("b", Resources(1)) is None
    assert escrow.rights("a") == Resources(600, 60)
    assert escrow.value == Resources(600, 60)


def test_orset_concurrent_add_beats_remove() -> None:
    a, b = ORSet[str](), ORSet[str]()
    apply(b, a.add("x", "a"))
    removal = b.remove("x", "b")
    re_add = a.add("x", "a")
    apply(a, removal)
    apply(b, re_add)
    assert a == b and "x" in a


def test_version_vector_folds_out_of_order_dots() -> None:
    vv = VersionVector()
    for seq in (3, 5, 2, 4):
        vv.add(("r", seq))
    assert vv.base("r") == 0 and ("r", 4) in vv and ("r", 1) not in vv
    vv.add(("r", 1))
    assert vv.base("r") == 5 and not list(vv.cloud())


def test_fold_stable_counts_a_stable_prefix_as_seen_and_nothing_beyond_what_was_seen() -> None:
    vv = VersionVector(cloud=[("r", 3), ("r", 5), ("s", 9)])
    meet = VersionVector.meet([vv, VersionVector({"r": 4, "s": 9})])
    vv.fold_stable(meet)  # a true meet: ours is in it, nothing changes
    assert vv == VersionVector(cloud=[("r", 3), ("r", 5), ("s", 9)])
    vv.fold_stable(VersionVector({"r": 4, "s": 2**62}))
    assert vv.base("r") == 5 and vv.base("s") == 9 and not list(vv.cloud())
    assert ("s", 10) not in vv


def test_ormap_keeps_concurrent_puts_and_reads_one_everywhere() -> None:
    a, b = ORMap[str, int](), ORMap[str, int]()
    da, db = a.put("k", 1, "a"), b.put("k", 2, "b")
    apply(a, db)
    apply(b, da)
    assert a == b and a.values("k") == [1, 2] and a.get("k") == b.get("k") == 2
    apply(b, a.put("k", 3, "a"))
    assert b.values("k") == [3] and b.keys() == frozenset({"k"})
    apply(a, b.remove("k", "b"))
    assert a.get("k") is None and a.keys() == frozenset() and ORSet[str]().elements() == frozenset()


def test_dotmap_delta_claiming_a_mutation_outside_its_context_is_rejected() -> None:
    """``applied`` answers a peer's pull: a delta must not claim a mutation it carries no dot of."""
    state = ORSet[int]()
    bogus = ORSet[int]({}, VersionVector(cloud=[("a", 1)]), VersionVector(cloud=[("a", 2)]))
    with pytest.raises(InvalidDelta, match="applied"):
        apply(state, bogus)
    assert state == ORSet[int]()
