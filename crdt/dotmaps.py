"""Causal dot-maps: the add-wins join shared by the OR-set and the OR-map.

State is ``key -> {dot: value}`` plus the :class:`VersionVector` of every dot
ever seen. A dot the other side has *seen* but no longer holds was removed
there, so it goes; a dot the other side never saw stays. That is add-wins
without tombstones: removals live only in the (compacted) version vector.

Mutator deltas are one key's dots and context: small. ``delta_since`` for a
lagging peer ships the whole (tombstone-free) state: without tombstones, "we
removed a dot you hold" cannot be told apart from "we did not send it".

A peer is lagging unless it has *applied* every mutation we have, and the
context cannot say that: a write's delta puts the dots it supersedes in the
context, so a peer that received only a later write learns the dot of an
earlier one without learning what that earlier write removed. Hence the second
vector, ``applied``: the dots of the mutations whose whole delta this state
has joined. A state is the join of those deltas, so a peer whose ``applied``
covers ours holds everything ours does. (Answering a peer's context instead
was unsound; the law and gossip tests found it.)
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
    """Every dot seen, superseded ones included: what :meth:`merge` tells a removal by."""
    applied: VersionVector = field(default_factory=VersionVector)
    """Dots of the mutations whose delta this state has joined (a subset of ``context``): its version."""

    def _write(self, key: K, value: V, replica: str) -> Self:
        """Replace every observed dot of ``key`` by one new dot carrying ``value``; returns the delta."""
        dot = self._mint(replica)
        old = self.entries.get(key, {})
        self.entries[key] = {dot: value}
        return type(self)({key: {dot: value}}, VersionVector(cloud=[dot, *old]), VersionVector(cloud=[dot]))

    def _remove(self, key: K, replica: str) -> Self:
        """Drop every observed dot of ``key`` (a concurrent write elsewhere survives); returns the delta."""
        old = self.entries.pop(key, {})
        if not old:
            return type(self)()
        dot = self._mint(replica)
        return type(self)({}, VersionVector(cloud=[dot, *old]), VersionVector(cloud=[dot]))

    def _mint(self, replica: str) -> Dot:
        """The next dot of ``replica``: a local mutation is seen and applied at once."""
        dot = self.context.next_dot(replica)
        self.applied.add(dot)
        return dot

    def validate(self, other: Self) -> None:
        if not other.context.dominates(other.applied):
            raise InvalidDelta("the delta claims mutations applied whose dots are missing from its context")
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
        self.applied.merge(other.applied)

    def version(self) -> VersionVector:
        return self.applied.copy()

    def delta_since(self, seen: VersionVector) -> Self:
        """Nothing if ``seen`` (a peer's :meth:`version`) covers every mutation we applied, else the whole state."""
        if seen.dominates(self.applied):
            return type(self)()
        return type(self)(
            {k: dict(dots) for k, dots in self.entries.items()}, self.context.copy(), self.applied.copy()
        )
