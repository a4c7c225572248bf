"""Timer maths of SWIM and Lifeguard, checked against memberlist's own tables."""

from __future__ import annotations

import math

import pytest

from gossip import timeouts
from gossip.awareness import Awareness
from gossip.suspicion import Suspicion


@pytest.mark.parametrize(
    ("mult", "n", "interval", "expected"),
    [
        (3, 1, 1.0, 3.0),  # memberlist TestSuspicionTimeout: log10 floor of 1
        (3, 5, 1.0, 3.0),
        (3, 10, 1.0, 3.0),
        (3, 50, 1.0, 5.097),
        (3, 100, 1.0, 6.0),
        (3, 1000, 1.0, 9.0),
        (4, 1000, 0.2, 2.4),
        (2.5, 1000, 0.2, 1.5),
    ],
)
def test_suspicion_min_grows_with_log_n(mult: float, n: int, interval: float, expected: float) -> None:
    assert timeouts.suspicion_min(mult, n, interval) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(
    ("n", "k", "elapsed", "expected"),
    [  # memberlist TestUtil_RemainingSuspicionTime, min 2 s, max 30 s
        (0, 3, 0.0, 30.0),
        (1, 3, 2.0, 14.0),
        (2, 3, 3.0, 4.810),
        (3, 3, 4.0, -2.0),
        (4, 3, 5.0, -3.0),
        (5, 3, 10.0, -8.0),
    ],
)
def test_remaining_suspicion_time_matches_memberlist(n: int, k: int, elapsed: float, expected: float) -> None:
    assert timeouts.remaining_suspicion_time(n, k, elapsed, 2.0, 30.0) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(("mult", "n", "expected"), [(4, 0, 0), (4, 1, 4), (4, 9, 4), (4, 99, 8), (4, 999, 12), (4, 1000, 16), (3, 10_000, 15)])
def test_retransmit_limit_scales_with_log_n(mult: int, n: int, expected: int) -> None:
    assert timeouts.retransmit_limit(mult, n) == expected


@pytest.mark.parametrize(("score", "expected"), [(0, 0.5), (1, 1.0), (7, 4.0)])
def test_awareness_stretches_timeouts(score: int, expected: float) -> None:
    assert timeouts.scaled(0.5, score) == expected


@pytest.mark.parametrize(("deltas", "expected"), [([1, 1, 1], 3), ([5, 5], 7), ([2, -5], 0), ([3, -1, 10, -2], 5)])
def test_awareness_score_saturates(deltas: list[int], expected: int) -> None:
    awareness = Awareness(8)
    for delta in deltas:
        awareness.apply(delta)
    assert awareness.score == expected


def test_suspicion_deadline_falls_with_independent_confirmations_only() -> None:
    s = Suspicion("a", started=10.0, k=3, lo=2.0, hi=12.0)
    deadlines = [s.deadline()]
    assert not s.confirm("a"), "the first accuser is not a confirmation"
    for accuser in ("b", "b", "c", "d", "e"):
        s.confirm(accuser)
        deadlines.append(s.deadline())
    assert deadlines[0] == 22.0
    assert deadlines == sorted(deadlines, reverse=True)
    assert deadlines[-1] == 12.0 and s.confirmations == 3


def test_suspicion_without_expected_confirmations_uses_the_minimum() -> None:
    assert Suspicion("a", started=1.0, k=0, lo=2.0, hi=9.0).deadline() == 3.0
    assert math.isclose(Suspicion("a", 0.0, 1, 2.0, 9.0).deadline(), 9.0)


@pytest.mark.parametrize(
    ("now", "offset", "expected"),
    [
        (0.0, 0.0, 0.04),  # a round starting now is already under way: the next one
        (0.005, 0.0, 0.04),
        (0.031, 0.0, 0.08),  # under a quarter interval before a start: the one after
        (0.041, 0.0, 0.08),
        (0.041, 0.002, 0.078),  # a clock 2 ms ahead starts its rounds 2 ms earlier
        (10.0, -0.001, 10.041),
    ],
)
def test_rounds_start_on_the_shared_clocks_grid(now: float, offset: float, expected: float) -> None:
    assert timeouts.next_round(now, 0.04, offset) == pytest.approx(expected)
