"""Repeated news: a node skips what it has settled, and hears it again once it forgot what settled it."""

from __future__ import annotations

import random

from gossip import wire
from gossip.config import GossipConfig
from gossip.envelopes import Envelopes
from gossip.members import MemberState
from gossip.messages import Alive, Dead, Message, Record
from gossip.node import GossipNode


def packet(sender: Envelopes, *messages: Message) -> bytes:
    return sender.seal(wire.join([wire.encode(m) for m in messages]))


def node_hearing_b(config: GossipConfig | None = None) -> tuple[GossipNode, Envelopes]:
    me = GossipNode("me", now=0.0, rng=random.Random(1), config=config)
    b = Envelopes("b", 1, None)
    me.on_packet("b", packet(b, Alive("b", 0)), 0.0)  # b introduces itself
    assert me.members()["b"].state == MemberState.ALIVE
    return me, b


def test_a_reaped_member_comes_back_when_its_old_news_is_heard_again() -> None:
    """SWIM resurrects a reaped member on any news of it; the skip of settled news must not hide that."""
    me, b = node_hearing_b(GossipConfig(reap_after=5.0))
    me.on_packet("b", packet(b, Alive("x", 3)), 0.1)
    me.on_packet("b", packet(b, Alive("x", 3)), 0.2)  # a repeat: settled, skipped
    me.on_packet("b", packet(b, Dead("x", 3, "b")), 0.3)
    assert me.members()["x"].state == MemberState.DEAD
    me.tick(6.0)
    assert "x" not in me.members()
    events = me.on_packet("b", packet(b, Alive("x", 3)), 6.1)
    assert me.members()["x"].state == MemberState.ALIVE and events


def test_a_withdrawal_of_a_record_not_held_is_not_settled() -> None:
    """A tombstone for a record we lack is not stored, so an older version heard later must still be withdrawn by it."""
    me, b = node_hearing_b()
    me.on_packet("b", packet(b, Record("b", "k", 5, None)), 0.1)
    assert me.record("b", "k") is None
    me.on_packet("b", packet(b, Record("b", "k", 3, "v")), 0.2)
    assert me.record("b", "k") == (3, "v")
    me.on_packet("b", packet(b, Record("b", "k", 5, None)), 0.3)
    assert me.record("b", "k") == (5, None)


def test_repeats_change_nothing_and_are_not_handled_again() -> None:
    me, b = node_hearing_b()
    calls: list[Message] = []
    handlers = me._dispatcher.handlers
    handle = handlers[Alive]
    handlers[Alive] = lambda s, m, now: (calls.append(m), handle(s, m, now))
    first = me.on_packet("b", packet(b, Alive("y", 2)), 0.1)
    again = me.on_packet("b", packet(b, Alive("y", 2), Alive("y", 1)), 0.2)
    assert first and not again and me.members()["y"].incarnation == 2
    assert calls == [Alive("y", 2), Alive("y", 1)], "the repeat is skipped; the older news is handled (and settled)"
