"""Causal dot-maps: the add-wins join shared by the OR-set and the OR-map.

State is ``key -> {dot: value}`` plus the :class:`VersionVector` of every dot
ever seen. A dot the other side has *seen* but no longer holds was removed
there, so it goes; a dot the other side never saw stays. That is add-wins
without tombstones: removals live only in the (compacted) version vector.

``kills`` remembers, per replica, the seq of its latest mutation that removed
dots. ``delta_since`` can ship only new dots when the peer has seen every such
removal; otherwise it must ship the whole (tombstone-free) state, because a
removal of a dot the peer already holds cannot be told apart from "not sent".
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
    kills: dict[str, int] = field(default_factory=dict)

    def _write(self, key: K, value: V, replica: str) -> Self:
        """Replace every observed dot of ``key`` by one new dot carrying ``value``; returns the delta."""
        dot = self.context.next_dot(replica)
        old = self.entries.get(key, {})
        kills = {replica: dot[1]} if old else {}
        self.entries[key] = {dot: value}
        self.kills.update(kills)
        return type(self)({key: {dot: value}}, VersionVector(cloud=[dot, *old]), kills)

    def _remove(self, key: K, replica: str) -> Self:
        """Drop every observed dot of ``key`` (a concurrent write elsewhere survives); returns the delta."""
        old = self.entries.pop(key, {})
        if not old:
            return type(self)()
        dot = self.context.next_dot(replica)
        self.kills[replica] = dot[1]
        return type(self)({}, VersionVector(cloud=[dot, *old]), {replica: dot[1]})

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
        for replica, seq in other.kills.items():
            self.kills[replica] = max(seq, self.kills.get(replica, 0))

    def version(self) -> VersionVector:
        return self.context.copy()

    def delta_since(self, seen: VersionVector) -> Self:
        if any(seq > seen.base(r) for r, seq in self.kills.items()):
            return type(self)(
                {k: dict(dots) for k, dots in self.entries.items()}, self.context.copy(), dict(self.kills)
            )
        fresh: dict[K, dict[Dot, V]] = {}
        context = VersionVector()
        for key, dots in self.entries.items():
            new = {d: v for d, v in dots.items() if d not in seen}
            if new:
                fresh[key] = new
                for dot in new:
                    context.add(dot)
        return type(self)(fresh, context, dict(self.kills))
