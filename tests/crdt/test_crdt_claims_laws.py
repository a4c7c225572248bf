"""The lattice laws for the claims CRDT, on states from one shared random history of three agents."""

from __future__ import annotations

import copy
import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from crdt.claims import ClaimDelta
from crdt.claims_replica import ClaimsReplica
from crdt.dots import VersionVector
from fedcore.resources import Resources

CAP = Resources(3000, 4096)
PODS = ("p0", "p1", "p2")
ops = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(["claim", "bind", "complete", "release", "bump"]),
        st.sampled_from(PODS),
        st.floats(0, 1),
        st.sets(st.integers(0, 2), max_size=2),
    ),
    max_size=30,
)


def history(steps: list[tuple[int, str, str, float, set[int]]]) -> list[ClaimsReplica]:
    replicas = [ClaimsReplica(f"agent-{i}", f"node-{i}", CAP) for i in range(3)]
    for who, op, pod, score, to in steps:
        me = replicas[who]
        outcome = {
            "claim": lambda: me.claim(pod, me.epoch(pod), score, Resources(1000, 1024)),
            "bind": lambda: me.bind(pod),
            "complete": lambda: me.complete(pod),
            "release": lambda: me.release(pod),
            "bump": lambda: me.bump_epoch(pod),
        }[op]()
        delta = outcome[1] if isinstance(outcome, tuple) else outcome
        if isinstance(delta, ClaimDelta):
            for target in to - {who}:
                replicas[target].merge(delta)
    return replicas


def observe(*states: ClaimDelta) -> tuple[object, ...]:
    """Join ``states`` in order into a fresh observer; return a canonical view of the result."""
    observer = ClaimsReplica("observer", "observer-node", CAP)
    for state in states:
        observer.merge(state)
    return snapshot(observer)


def snapshot(replica: ClaimsReplica) -> tuple[object, ...]:
    full = replica.full_state()
    winners = [replica.winner(p) for p in PODS]
    return sorted(full.claims), sorted(full.marks), replica.version(), winners


@settings(max_examples=150, deadline=None)
@given(ops)
def test_join_is_commutative_associative_and_idempotent(steps: list[tuple[int, str, str, float, set[int]]]) -> None:
    states = [r.full_state() for r in history(steps)]
    first, *others = (observe(*order) for order in itertools.permutations(states))
    assert all(other == first for other in others)
    assert observe(*states) == observe(*states, *states)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_delta_since_equals_full_state_merge(steps: list[tuple[int, str, str, float, set[int]]]) -> None:
    a, b, _ = history(steps)
    via_delta, via_full = copy.deepcopy(b), copy.deepcopy(b)
    via_delta.merge(a.state_delta_since(b.version()))
    via_full.merge(a.full_state())
    assert snapshot(via_delta) == snapshot(via_full)
    assert not a.has_news_for(via_delta.version())


@settings(max_examples=100, deadline=None)
@given(ops)
def test_single_record_deltas_in_any_order_equal_full_state(steps: list[tuple[int, str, str, float, set[int]]]) -> None:
    replicas = history(steps)
    records = [ClaimDelta(claims=(c,)) for r in replicas for c in r.full_state().claims]
    records += [ClaimDelta(marks=(m,)) for r in replicas for m in r.full_state().marks]
    full = observe(*(r.full_state() for r in replicas))
    forwards, backwards = observe(*records), observe(*reversed(records))
    assert forwards[:2] == backwards[:2] == full[:2]
    assert forwards[3] == backwards[3] == full[3]
    assert VersionVector().dominates(VersionVector())


@settings(max_examples=100, deadline=None)
@given(ops)
@example([(0, "claim", "p0", 0.0, set())] * 13 + [(0, op, "p2", 0.0, set()) for op in ("claim", "bind", "complete")])
@example([(0, "claim", "p1", 0.0, set())] + [(0, "claim", "p0", 0.0, set())] * 3
         + [(0, "bind", "p1", 0.0, set()), (0, "bump", "p1", 0.0, set()), (1, "claim", "p0", 0.0, {0})])
def test_restore_from_full_state_rebuilds_the_replica(steps: list[tuple[int, str, str, float, set[int]]]) -> None:
    for replica in history(steps):
        replica.compact(replica.version())
        again = ClaimsReplica.restore(replica.agent_id, replica.node, CAP, replica.full_state(), replica.finished_pods())
        assert snapshot(again) == snapshot(replica) and again.lamport == replica.lamport
        assert again.free() == replica.free() and again.pending_releases() == replica.pending_releases()
        for pod in PODS:
            assert type(again.bind(pod)) is type(replica.bind(pod))
