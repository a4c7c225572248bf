"""The broadcast queue: priority, invalidation, byte budget and retransmit limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gossip.broadcasts import BroadcastQueue


def test_least_sent_first_newest_first_and_limit_enforced() -> None:
    q = BroadcastQueue()
    q.queue("a", b"A" * 10)
    q.queue("b", b"B" * 10)
    assert q.take(15, limit=2) == [b"B" * 10], "newest first, and only what fits"
    assert q.take(100, limit=2) == [b"A" * 10, b"B" * 10], "the unsent one before the once-sent one"
    assert q.take(100, limit=2) == [b"A" * 10]
    assert len(q) == 0


def test_newer_news_about_a_subject_replaces_the_old() -> None:
    q = BroadcastQueue()
    q.queue("node-1", b"suspect")
    q.take(100, limit=5)
    q.queue("node-1", b"alive")
    assert len(q) == 1 and q.take(100, limit=5) == [b"alive"]
    q.drop("node-1")
    assert q.take(100, limit=5) == []


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 60)), max_size=60), st.integers(1, 6), st.integers(0, 400))
def test_every_item_is_sent_exactly_limit_times_within_budget(items: list[tuple[int, int]], limit: int, budget: int) -> None:
    q = BroadcastQueue()
    latest = {subject: bytes([subject]) * size for subject, size in items}
    for subject, size in items:
        q.queue(subject, bytes([subject]) * size)
    sent: dict[bytes, int] = {}
    for _ in range(limit * len(latest) + 2):
        batch = q.take(max(budget, 60), limit)
        assert sum(map(len, batch)) <= max(budget, 60)
        for payload in batch:
            sent[payload] = sent.get(payload, 0) + 1
    assert sent == {payload: limit for payload in latest.values()}
    assert len(q) == 0


def test_news_held_back_until_ready_jumps_no_queue() -> None:
    q = BroadcastQueue()
    q.queue("relayed", b"R", ready_at=1.0)
    q.queue("ours", b"O")
    assert q.take(100, limit=3, now=0.5) == [b"O"], "relayed news waits for its round"
    assert q.take(100, limit=3, now=1.0) == [b"R", b"O"], "then goes least-sent first"
    q.queue("relayed", b"R2", ready_at=2.0)
    assert q.take(100, limit=3, now=1.5) == [b"O"] and len(q) == 1
