"""Nodes started from one shared state behave, and digest, exactly as nodes that copied it."""

from __future__ import annotations

import random

from gossip.members import MemberState
from gossip.node import GossipNode
from gossip.shared import SharedState

NAMES = [f"n{i}" for i in range(40)]
MEMBERS = [(name, i % 3, MemberState.DEAD if i == 7 else MemberState.ALIVE) for i, name in enumerate(NAMES)]
RECORDS = [(name, key, 1 + i, {"v": i}) for i, name in enumerate(NAMES) for key in ("a", "b")]


def pair(now: float = 0.0) -> tuple[GossipNode, GossipNode]:
    """The same node twice: one restored from tuples, one adopting the shared state."""
    copied = GossipNode("n3", now=now, rng=random.Random(1))
    copied.restore(MEMBERS, RECORDS, now)
    shared = GossipNode("n3", now=now, rng=random.Random(1))
    shared.adopt(SharedState.of(MEMBERS, RECORDS, now), now)
    return copied, shared


def test_an_adopted_state_reads_as_a_restored_one() -> None:
    copied, shared = pair()
    assert shared.members() == copied.members() and shared.records() == copied.records()


def test_digests_are_the_same_bits_before_and_after_local_changes() -> None:
    copied, shared = pair()
    for node in (copied, shared):
        node.publish("a", {"mine": 1}, 1.0)  # an owner's records change here
        node._members.set("n5", 9, MemberState.SUSPECT, 1.0, random.Random(0))  # a member's row too
        node._members.set("x-new", 0, MemberState.ALIVE, 1.0, random.Random(0))  # a newcomer
        node._members.remove("n9")
        node._records.drop_owner("n9")
    assert shared.records() == copied.records()
    for salt in (1, 2):
        assert shared._exchanger.digest(salt) == copied._exchanger.digest(salt)


def test_both_find_the_same_entries_missing_from_a_peers_digest() -> None:
    copied, shared = pair()
    peer = GossipNode("n4", now=0.0, rng=random.Random(2))
    peer.restore(MEMBERS[:20], RECORDS[:30], 0.0)
    bloom = peer._exchanger.digest(5)
    want = sorted(map(repr, copied._exchanger.missing_from(bloom, 5)))
    assert want and sorted(map(repr, shared._exchanger.missing_from(bloom, 5))) == want


def test_sampling_over_a_shared_state_is_uniform_over_live_peers() -> None:
    _, shared = pair()
    rng = random.Random(3)
    counts: dict[str, int] = {}
    for _ in range(3000):
        for name in shared._members.sample(rng, 3, exclude="n1"):
            counts[name] = counts.get(name, 0) + 1
    live = {n for n, _, s in MEMBERS if s == MemberState.ALIVE} - {"n3", "n1"}
    assert set(counts) == live
    assert max(counts.values()) < 1.5 * min(counts.values())


def test_a_probe_pass_over_a_shared_state_visits_every_live_peer_once() -> None:
    _, shared = pair()
    rng = random.Random(4)
    live = sorted(n for n, _, s in MEMBERS if s == MemberState.ALIVE and n != "n3")
    first = [shared._members.next_probe_target(rng) for _ in live]
    second = [shared._members.next_probe_target(rng) for _ in live]
    assert sorted(first) == sorted(second) == live and first != second


def test_tables_on_shared_rows_hold_a_change_as_a_row_number_shared_by_all() -> None:
    state = SharedState.of(MEMBERS, RECORDS, 0.0)
    nodes = [GossipNode(name, now=0.0, rng=random.Random(i)) for i, name in enumerate(NAMES[:3])]
    for node in nodes:
        node.adopt(state, 0.0)
        node._members.set("n9", 5, MemberState.SUSPECT, 1.0, random.Random(0))
    rows = [node._members.get("n9") for node in nodes]
    assert rows[0] == rows[1] == rows[2] and rows[0] is rows[1] is rows[2]
    assert len(state.members.rows) == len(NAMES) + 1, "one interned row for three tables"
    assert state.members.rows[9].incarnation == 9 % 3, "the snapshot's row is never written"


def test_a_dead_member_of_the_snapshot_is_reaped_and_a_removed_one_stays_gone() -> None:
    _, shared = pair()
    assert shared.members()["n7"].state == MemberState.DEAD
    shared.tick(shared.config.reap_after + 1.0)
    assert "n7" not in shared.members() and "n7" not in shared.records()
    shared._members.set("n7", 3, MemberState.ALIVE, 70.0, random.Random(0))  # back under a new incarnation
    assert shared.members()["n7"].incarnation == 3 and len(shared._members) == len(NAMES) - 1


def test_full_state_frame_size_is_the_length_of_the_frame_full_state_push_pull_sends() -> None:
    from gossip import antientropy
    from gossip.keyring import Keyring
    from gossip.messages import PushPull, Record

    state = SharedState.of(MEMBERS, RECORDS, 0.0)
    copied = GossipNode("n3", now=0.0, rng=random.Random(1), keyring=Keyring([bytes(32)]))
    copied.restore(MEMBERS, RECORDS, 0.0)
    shared = GossipNode("n3", now=0.0, rng=random.Random(1), keyring=Keyring([bytes(32)]))
    shared.adopt(state, 0.0)
    for step in range(3):
        for node in (copied, shared):
            whole = antientropy.full_state(node.name, node.incarnation, node._members, node._records)
            for reply in (False, True):
                frame = node._outbox.seal([whole[0], PushPull(reply), *whole[1:]])
                assert node.full_state_frame_size() == len(frame), (step, reply)
            node.publish("a", {"mine": step * 1000}, 1.0 + step)
            node._members.set("n5", 9 + step, MemberState.SUSPECT, 1.0, random.Random(0))
            node._members.set(f"x-new{step}", 0, MemberState.ALIVE, 1.0, random.Random(0))
            node._members.remove("n9")
            node._records.drop_owner("n9")
            node._publisher.handle_record("n12", Record("n12", "b", 500 + step, {"v": "longer" * step}), 2.0)
    assert shared.full_state_frame_size() == copied.full_state_frame_size()
