"""When our node state goes out to the peers: at most every ``STATE_EVERY`` seconds, and only once it changed.

Peers rank us by the state we last published (:mod:`edgeagent.ranking`), not by our live one,
so :class:`StatePublication` also remembers what they heard. The placement core
(:mod:`edgeagent.placing`) builds the state and marks it changed, as do the stage moves in
:mod:`edgeagent.holdings` that free room; the record itself is :mod:`edgeagent.records`'.
"""

from __future__ import annotations

from edgeagent import records
from edgeagent.effects import Publish

STATE_EVERY = 0.5
"""Seconds between publications of our node state (it changes with every claim; peers only rank by it)."""


class StatePublication:
    """The schedule of our node-state record and the state peers last heard from us."""

    def __init__(self) -> None:
        self.at = -STATE_EVERY
        """When we last published."""
        self.dirty = True
        """Our state changed since (a claim, freed room, a load step, another scorer)."""
        self.last: records.NodeState | None = None
        """The node state peers last heard from us: they rank us by it."""

    def due(self, now: float) -> bool:
        return self.dirty and now >= self.at + STATE_EVERY

    def deadline(self) -> float | None:
        """When the next publication is due, or None while nothing changed."""
        return self.at + STATE_EVERY if self.dirty else None

    def publish(self, state: records.NodeState, now: float) -> Publish:
        self.at, self.dirty = now, False
        self.last = state
        return Publish(records.NODE_KEY, records.encode_node_state(state))
