"""ClaimsReplica behaviour, scenario by scenario: winner order, binding, epochs, escrow, compaction."""

from __future__ import annotations

import pytest

from crdt.claims import BOUND, ChangeKind, Claim, ClaimDelta, EpochMark, Status, StatusCode
from crdt import claims_state
from crdt.claims_replica import ClaimsReplica
from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from fedcore.resources import Resources

CAP = Resources(4000, 8192)
REQ = Resources(1000, 1024)


def agents(n: int = 3) -> list[ClaimsReplica]:
    return [ClaimsReplica(f"agent-{i}", f"node-{i}", CAP) for i in range(n)]


def ok(outcome: object) -> ClaimDelta:
    if isinstance(outcome, tuple):
        outcome = outcome[1]
    assert isinstance(outcome, ClaimDelta), outcome
    return outcome


def code(outcome: object) -> StatusCode:
    assert isinstance(outcome, Status), outcome
    return outcome.code


def sync(replicas: list[ClaimsReplica]) -> None:
    for a in replicas:
        for b in replicas:
            a.merge(b.state_delta_since(a.version()))


def test_higher_score_wins_everywhere_whatever_the_order() -> None:
    a, b, c = agents()
    da, db, dc = ok(a.claim("p", 0, 0.2, REQ)), ok(b.claim("p", 0, 0.9, REQ)), ok(c.claim("p", 0, 0.5, REQ))
    for replica, order in ((a, (dc, db)), (b, (da, dc)), (c, (db, da))):
        for delta in order:
            replica.merge(delta)
    assert {r.winner("p").node for r in (a, b, c)} == {"node-1"}  # type: ignore[union-attr]
    assert sorted(a.pending_releases() + c.pending_releases()) == ["p", "p"]


def test_loser_gets_lost_change_and_release_restores_escrow() -> None:
    a, b = agents(2)
    da = ok(a.claim("p", 0, 0.2, REQ))
    assert a.free() == CAP - REQ
    assert a.merge(ok(b.claim("p", 0, 0.9, REQ))) == (("p", ChangeKind.LOST),)
    b.merge(da)
    release = ok(a.release("p"))
    assert release.claims[0].released and a.free() == CAP and a.pending_releases() == []


def test_binding_is_final_within_the_epoch() -> None:
    a, b = agents(2)
    da = ok(a.claim("p", 0, 0.2, REQ))
    bind = ok(a.bind("p"))
    db = ok(b.claim("p", 0, 0.9, REQ))  # b has not seen a's claim yet
    b.merge(da)
    b.merge(bind)
    a.merge(db)
    assert a.winner("p") == b.winner("p") and a.winner("p").node == "node-0"  # type: ignore[union-attr]
    assert b.pending_releases() == ["p"]


def test_claim_after_binding_is_refused_locally() -> None:
    a, b = agents(2)
    b.merge(ok(a.claim("p", 0, 0.2, REQ)))
    b.merge(ok(a.bind("p")))
    assert code(b.claim("p", 0, 0.9, REQ)) is StatusCode.ALREADY_BOUND


def test_concurrent_bindings_resolve_and_loser_is_evicted() -> None:
    a, b = agents(2)
    da, db = ok(a.claim("p", 0, 0.2, REQ)), ok(b.claim("p", 0, 0.9, REQ))
    ba, bb = ok(a.bind("p")), ok(b.bind("p"))
    assert a.merge(db) == () and a.merge(bb) == (("p", ChangeKind.EVICT),)
    b.merge(da)
    b.merge(ba)
    assert a.winner("p") == b.winner("p") and a.winner("p").node == "node-1"  # type: ignore[union-attr]


def test_stale_epoch_never_wins_and_returning_node_is_evicted() -> None:
    a, b, c = agents()
    for delta in (ok(a.claim("p", 0, 0.9, REQ)), ok(a.bind("p"))):
        b.merge(delta)
        c.merge(delta)
    new_epoch, mark = b.bump_epoch("p")  # type: ignore[misc]
    assert new_epoch == 1 and b.winner("p") is None
    c.merge(mark)
    assert code(c.claim("p", 0, 0.99, REQ)) is StatusCode.STALE_EPOCH
    dc = ok(c.claim("p", 1, 0.1, REQ))
    b.merge(dc)
    assert a.merge(dc) == (("p", ChangeKind.EVICT),)  # a claim at a higher epoch fences too
    assert a.merge(mark) == ()
    assert a.winner("p") == b.winner("p") == c.winner("p") and a.winner("p").node == "node-2"  # type: ignore[union-attr]
    assert code(a.bind("p")) is StatusCode.NOT_WINNING
    ok(a.release("p"))
    assert a.free() == CAP


def test_escrow_refuses_what_does_not_fit() -> None:
    (a,) = agents(1)
    for i in range(4):
        ok(a.claim(f"p{i}", 0, 0.5, REQ))
    assert code(a.claim("p4", 0, 0.5, REQ)) is StatusCode.INSUFFICIENT_ESCROW


@pytest.mark.parametrize(
    ("setup", "operation", "expected"),
    [
        ("none", "bind", StatusCode.UNKNOWN_POD),
        ("claimed", "complete", StatusCode.NOT_BOUND),
        ("claimed", "release", StatusCode.NOT_WINNING),
        ("none", "release", StatusCode.NOTHING_TO_RELEASE),
        ("bound", "bind", StatusCode.ALREADY_BOUND),
        ("claimed", "claim", StatusCode.ALREADY_CLAIMED),
        ("completed", "bump", StatusCode.COMPLETED),
    ],
)
def test_refusals_are_statuses(setup: str, operation: str, expected: StatusCode) -> None:
    (a,) = agents(1)
    steps = {"none": 0, "claimed": 1, "bound": 2, "completed": 3}[setup]
    actions = [lambda: a.claim("p", 0, 0.5, REQ), lambda: a.bind("p"), lambda: a.complete("p")]
    for action in actions[:steps]:
        ok(action())
    run = {
        "bind": lambda: a.bind("p"), "complete": lambda: a.complete("p"), "release": lambda: a.release("p"),
        "claim": lambda: a.claim("p", 0, 0.7, REQ), "bump": lambda: a.bump_epoch("p"),
    }[operation]
    assert code(run()) is expected


def test_completion_frees_capacity_and_compaction_keeps_late_claims_out() -> None:
    a, b = agents(2)
    for delta in (ok(a.claim("p", 0, 0.9, REQ)), ok(a.bind("p")), ok(a.complete("p"))):
        b.merge(delta)
    assert a.free() == CAP and a.pods_on("node-0") == []
    late = ClaimsReplica("agent-9", "node-9", CAP).claim("p", 0, 0.1, REQ)  # never saw the completion
    stable = VersionVector.meet([a.version(), b.version()])
    assert a.compact(stable) == 1 and b.compact(stable) == 1
    assert a.merge(ok(late)) == () and list(a.pods()) == [] and a.is_finished("p")
    assert code(a.claim("p", 0, 0.5, REQ)) is StatusCode.COMPLETED


def test_compacting_with_a_bound_folds_the_gaps_of_versions_never_received() -> None:
    """Gossip carries a record's latest version only: the superseded ones leave gaps, which compaction folds."""
    a, b = agents(2)
    deltas = [ok(a.claim("p", 0, 0.9, REQ)), ok(a.bind("p")), ok(a.complete("p"))]  # completing releases too
    b.merge(deltas[-1])  # the last version alone
    assert b.version().base("agent-0") == 0 and sorted(b.version().cloud_of("agent-0")) == [3]
    everything = VersionVector({"agent-0": 2**62, "agent-1": 2**62})  # the edge agent's bound (edgeagent.ledger)
    assert b.compact(everything) == 1
    assert b.version().base("agent-0") == 3 and not list(b.version().cloud())
    assert b.merge(deltas[0]) == () and b.is_finished("p") and list(b.pods()) == []


def test_only_the_newest_compacted_pods_are_remembered_and_restore_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon compacts pods for months: the tombstones of compacted pods are bounded, oldest forgotten first."""
    monkeypatch.setattr(claims_state, "FINISHED_KEEP", 3)
    (a,) = agents(1)
    everything = VersionVector({"agent-0": 2**62})
    for pod in ("p0", "p1", "p2", "p3", "p4"):
        ok(a.claim(pod, 0, 0.5, REQ))
        ok(a.bind(pod))
        ok(a.complete(pod))
        assert a.compact(everything) == 1
    assert a.finished_pods() == ("p2", "p3", "p4") and not a.is_finished("p1") and a.is_finished("p4")
    again = ClaimsReplica.restore("agent-0", "node-0", CAP, a.full_state(), ("p0", *a.finished_pods()))
    assert again.finished_pods() == ("p2", "p3", "p4")
    assert code(again.claim("p4", 0, 0.5, REQ)) is StatusCode.COMPLETED


def test_delta_since_ships_only_what_the_peer_lacks() -> None:
    a, b = agents(2)
    ok(a.claim("p1", 0, 0.5, REQ))
    b.merge(a.full_state())
    ok(a.claim("p2", 0, 0.5, REQ))
    delta = a.state_delta_since(b.version())
    assert [c.pod for c in delta.claims] == ["p2"] and a.has_news_for(b.version())
    b.merge(delta)
    assert not a.has_news_for(b.version()) and a.version() == b.version()


def forged(replica: ClaimsReplica) -> list[ClaimDelta]:
    """Deltas that contradict what ``replica`` (agent-0, which claimed "p" at seq 1) holds."""
    mine = replica.claims("p")[0]
    return [
        ClaimDelta(claims=(mine._replace(score=0.99, seq=5),)),  # same claim, different bid
        ClaimDelta(claims=(mine._replace(flags=BOUND),)),  # same seq, different flags
        ClaimDelta(claims=(Claim("q", 0, "node-0", "agent-7", 0.5, 1, (1, 1, 1, 1), 0, 1),)),  # our node, not us
        ClaimDelta(claims=(mine._replace(pod="q", seq=9),)),  # "ours" but we never wrote it
        ClaimDelta(marks=(EpochMark("p", 3, "agent-0", 1),)),  # our dot reused for a different record
    ]


@pytest.mark.parametrize("index", range(5))
def test_contradicting_delta_is_rejected_and_state_untouched(index: int) -> None:
    a, b = agents(2)
    ok(a.claim("p", 0, 0.5, REQ))
    before = (a.full_state(), a.version(), a.free(), a.lamport)
    good = ok(b.claim("r", 0, 0.5, REQ))
    bad = forged(a)[index]
    with pytest.raises(InvalidDelta):
        a.merge(ClaimDelta(claims=good.claims + bad.claims, marks=bad.marks))
    assert (a.full_state(), a.version(), a.free(), a.lamport) == before


def test_superseded_versions_arriving_late_close_the_context_gap() -> None:
    a, b = agents(2)
    first, bound = ok(a.claim("p", 0, 0.9, REQ)), ok(a.bind("p"))
    b.merge(bound)
    assert b.version().base("agent-0") == 0
    b.merge(first)
    assert b.version() == a.version() and b.winner("p") == a.winner("p")
