"""Suspicions: one timer watches them all, refuted ones leave nothing behind, unrefuted ones expire on time."""

from __future__ import annotations

import random

from gossip.members import MemberState
from gossip.messages import Alive, Suspect
from gossip.node import GossipNode

PEERS = [f"p{i}" for i in range(200)]


def node() -> GossipNode:
    me = GossipNode("me", now=0.0, rng=random.Random(1))
    me.restore([(name, 0, MemberState.ALIVE) for name in PEERS], [], 0.0)
    return me


def test_refuted_suspicions_leave_no_timers_behind() -> None:
    me = node()
    idle = len(me._timers)
    for i, name in enumerate(PEERS):
        now = 0.01 * i
        me._membership.handle_suspect("p0", Suspect(name, 0, "p0" if name != "p0" else "p1"), now)
        me._membership.handle_alive(name, Alive(name, 1), now)  # refuted at once
    assert me._membership.suspicions == {}
    assert len(me._timers) <= idle + 2, "a timer per suspicion would hold 200 here"
    me.tick(60.0)
    assert all(view.state == MemberState.ALIVE for view in me.members().values())


def test_unrefuted_suspicions_expire_at_their_own_deadlines() -> None:
    me = node()
    me._membership.handle_suspect("p0", Suspect("p5", 0, "p0"), 0.0)
    me._membership.handle_suspect("p0", Suspect("p6", 0, "p0"), 1.0)
    first = me._membership.suspicions["p5"].deadline()
    me.tick(first - 0.001)
    assert me.members()["p5"].state == MemberState.SUSPECT
    me.tick(first)
    assert me.members()["p5"].state == MemberState.DEAD and me.members()["p6"].state == MemberState.SUSPECT
    me.tick(me._membership.suspicions["p6"].deadline())
    assert me.members()["p6"].state == MemberState.DEAD


def test_a_confirmation_brings_the_watch_forward() -> None:
    me = node()
    me._membership.handle_suspect("p0", Suspect("p5", 0, "p0"), 0.0)
    alone = me._membership.suspicions["p5"].deadline()
    for accuser in ("p1", "p2", "p3"):
        me._membership.handle_suspect(accuser, Suspect("p5", 0, accuser), 0.1)
    confirmed = me._membership.suspicions["p5"].deadline()
    assert confirmed < alone
    me.tick(confirmed)
    assert me.members()["p5"].state == MemberState.DEAD


def test_a_refused_probe_brings_the_deadline_to_refused_suspicion() -> None:
    """Our probe found no process at the suspect's address: dead refused_suspicion after we suspect it, not after
    Lifeguard's timeout; a suspicion others started is cut the same way by our refused probe."""
    me = node()
    cfg = me.config
    me._membership.suspect("p5", 0, "me", 10.0, refused=True)
    assert me._membership.suspicions["p5"].deadline() == 10.0 + cfg.refused_suspicion
    me._membership.handle_suspect("p0", Suspect("p6", 0, "p0"), 10.0)
    assert me._membership.suspicions["p6"].deadline() > 12.0
    me._membership.suspect("p6", 0, "me", 10.2, refused=True)
    assert me._membership.suspicions["p6"].deadline() == 10.2 + cfg.refused_suspicion
    me.tick(10.2 + cfg.refused_suspicion)
    assert me.members()["p5"].state == MemberState.DEAD and me.members()["p6"].state == MemberState.DEAD


def test_a_refusal_ends_an_unanswered_probe_round_at_once_and_only_that() -> None:
    """A refusal for another target, or for a probe a helper's relayed ack already answered, changes nothing; one for
    the unanswered probe suspects the target then (refused_suspicion to its death), not at the round's end, and leaves
    our own health score alone (the fault is the target's)."""
    me = node()
    me._prober._probe_round(None, 0.0)
    probe = me._prober._probe
    assert probe is not None
    me._prober.handle_refused("elsewhere", 0.5)
    probe.acked = True
    me._prober.handle_refused(probe.target, 0.5)
    assert me._prober._probe is probe and me.members()[probe.target].state == MemberState.ALIVE
    me._prober._probe_round(None, 1.0)
    probe = me._prober._probe
    assert probe is not None
    me._prober.handle_refused(probe.target, 1.5)
    assert me._prober._probe is None and me.members()[probe.target].state == MemberState.SUSPECT
    assert me._membership.suspicions[probe.target].deadline() == 1.5 + me.config.refused_suspicion
    assert me._awareness.score == 0


def test_a_suspicion_we_are_told_of_is_probed_in_our_next_round() -> None:
    """In a small cluster every member told of a suspicion checks the suspect next (its confirmation or its chance to
    refute); one we accused ourselves, or that has all its confirmations, is left to the round-robin order."""
    me = GossipNode("me", now=0.0, rng=random.Random(1))
    me.restore([(f"p{i}", 0, MemberState.ALIVE) for i in range(4)], [], 0.0)
    me._membership.handle_suspect("p0", Suspect("p3", 0, "p0"), 0.0)
    assert me._membership.to_vouch == [("p3", 0)]
    me._prober._probe_round(None, 0.5)
    assert me._prober._probe is not None and me._prober._probe.target == "p3"
    me._membership.handle_suspect("p0", Suspect("p2", 0, "p0"), 0.6)
    for accuser in ("p1", "p3", "x"):
        me._membership.handle_suspect(accuser, Suspect("p2", 0, accuser), 0.6)
    assert not me._membership.needs_vouch("p2", 0)  # confirmed k times already


def test_in_a_large_cluster_about_2k_members_vouch_for_a_suspicion() -> None:
    vouchers = 0
    for seed in range(2000):
        me = GossipNode("me", now=0.0, rng=random.Random(seed))
        me.restore([(name, 0, MemberState.ALIVE) for name in PEERS], [], 0.0)
        me._membership.handle_suspect("p0", Suspect("p5", 0, "p0"), 0.0)
        vouchers += bool(me._membership.to_vouch)
    k = GossipNode("me", now=0.0, rng=random.Random(0)).config.suspicion_confirmations
    share = vouchers / 2000
    assert abs(share - 2 * k / (len(PEERS) + 1 - 2)) < 0.012, share
