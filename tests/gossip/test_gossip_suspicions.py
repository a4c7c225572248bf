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
