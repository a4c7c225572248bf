"""Pure timer maths of SWIM and Lifeguard, after memberlist's util.go and suspicion.go.

No state and no clock: every function maps numbers to numbers so they can be tested by table.
"""

from __future__ import annotations

import math


def suspicion_min(mult: float, n: int, probe_interval: float) -> float:
    """Shortest suspicion: grows with log10 of the cluster size so dissemination can catch up."""
    node_scale = max(1.0, math.log10(max(1.0, float(n))))
    return mult * node_scale * probe_interval


def remaining_suspicion_time(n: int, k: int, elapsed: float, lo: float, hi: float) -> float:
    """Time left before a suspect is declared dead, given n of k expected confirmations.

    Starts at ``hi`` and falls logarithmically towards ``lo`` as independent members confirm
    (memberlist ``remainingSuspicionTime``); may be negative when the deadline has passed.
    """
    if k < 1:
        return lo - elapsed
    frac = math.log(n + 1.0) / math.log(k + 1.0)
    raw = hi - frac * (hi - lo)
    timeout = max(lo, math.floor(1000.0 * raw) / 1000.0)
    return timeout - elapsed


def retransmit_limit(mult: int, n: int) -> int:
    """How many times a broadcast is sent: enough for epidemic spread to reach all of n."""
    return mult * math.ceil(math.log10(n + 1))


def scaled(timeout: float, awareness_score: int) -> float:
    """Lifeguard: a node that is itself unhealthy waits (score + 1) times longer before accusing."""
    return timeout * (awareness_score + 1)


def next_round(now: float, interval: float, offset: float) -> float:
    """Start of the first gossip round at least a quarter interval after ``now``.

    Rounds start where ``now + offset`` is a multiple of ``interval``; nodes whose clocks
    agree (``offset`` maps each driver's clock onto a shared one) start them together. The
    quarter-interval margin keeps news that arrived just after a round started, or a little
    before by a peer's clock skew, out of that same round: news moves one hop per round.
    """
    return math.ceil((now + offset + interval / 4) / interval) * interval - offset
