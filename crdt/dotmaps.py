"""Causal dot-maps: the add-wins join shared by the OR-set and the OR-map.

State is ``key -> {dot: value}`` plus the :class:`VersionVector` of every dot
ever seen. A dot the other side has *seen* but no longer holds was removed
there, so it goes; a dot the other side never saw stays. That is add-wins
without tombstones: removals live only in the (compacted) version vector.

Mutator deltas are one key's dots and context: small. ``delta_since`` for a
lagging peer ships the whole (tombstone-free) state: without tombstones, "we
removed a dot you hold" cannot be told apart from "we did not send it", and a
cheaper rule tried here (ship only new dots once the peer has seen every
removal) was unsound — a peer can learn of a removing write's dot, as a
superseded dot in a later write's context, without learning what it removed.
The gossip tests found that case.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, Self, TypeVar

from crdt.dots import Dot, VersionVector
from crdt.errors import InvalidDelta

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class DotMap(Generic[K, V]):
    """``key -> {dot: value}`` under a shared causal context; the base of ORSet and ORMap."""

    entries: dict[K, dict[Dot, V]] = field(default_factory=dict)
    context: VersionVector = field(default_factory=VersionVector)

    def _write(self, key: K, value: V, replica: str) -> Self:
        """Replace every observed dot of ``key`` by one new dot carrying ``value``; returns the delta."""
        dot = self.context.next_dot(replica)
        old = self.entries.get(key, {})
        self.entries[key] = {dot: value}
        return type(self)({key: {dot: value}}, VersionVector(cloud=[dot, *old]))

    def _remove(self, key: K, replica: str) -> Self:
        """Drop every observed dot of ``key`` (a concurrent write elsewhere survives); returns the delta."""
        old = self.entries.pop(key, {})
        if not old:
            return type(self)()
        dot = self.context.next_dot(replica)
        return type(self)({}, VersionVector(cloud=[dot, *old]))

    def validate(self, other: Self) -> None:
        for key, dots in other.entries.items():
            if not dots:
                raise InvalidDelta(f"key {key!r} is present with no dots")
            mine = self.entries.get(key, {})
            for dot, value in dots.items():
                if dot not in other.context:
                    raise InvalidDelta(f"dot {dot} of {key!r} is missing from the delta's context")
                if dot in mine and mine[dot] != value:
                    raise InvalidDelta(f"dot {dot} carries two different values")

    def merge(self, other: Self) -> None:
        for key in set(self.entries) | set(other.entries):
            mine = self.entries.get(key, {})
            theirs = other.entries.get(key, {})
            kept = {d: v for d, v in mine.items() if d in theirs or d not in other.context}
            kept.update((d, v) for d, v in theirs.items() if d not in self.context)
            if kept:
                self.entries[key] = kept
            else:
                self.entries.pop(key, None)
        self.context.merge(other.context)

    def version(self) -> VersionVector:
        return self.context.copy()

    def delta_since(self, seen: VersionVector) -> Self:
        if seen.dominates(self.context):
            return type(self)()
        return type(self)({k: dict(dots) for k, dots in self.entries.items()}, self.context.copy())
