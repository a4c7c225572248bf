"""Lifeguard local-health score: how much a node distrusts its own view of others.

Failed probes without nacks, missed nacks and having to refute a suspicion raise it; a
clean probe lowers it. The score stretches probe timeout and interval (``timeouts.scaled``),
so a slow or overloaded node probes less aggressively and is slow to accuse healthy peers.
"""

from __future__ import annotations


class Awareness:
    """A saturating integer score in ``[0, max_score)``."""

    __slots__ = ("max_score", "score")

    def __init__(self, max_score: int) -> None:
        self.max_score = max_score
        self.score = 0

    def apply(self, delta: int) -> None:
        """Move the score by delta, clamped to the allowed range."""
        self.score = min(self.max_score - 1, max(0, self.score + delta))
