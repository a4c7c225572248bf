"""Last-writer-wins register whose order comes from a caller-supplied Lamport marker.

The marker ``(lamport, replica)`` grows monotonically at each writer and is
globally unique, so concurrent writes are ordered the same everywhere without
reading a clock (rust-crdt's ``LWWReg``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta

T = TypeVar("T")


class Marker(NamedTuple):
    """Write order: Lamport time first, the writer's id breaks ties."""

    lamport: int
    replica: str


@dataclass(slots=True)
class LWWRegister(Generic[T]):
    """A value and the marker of the write that set it; ``marker is None`` is the empty register."""

    value: T | None = None
    marker: Marker | None = None

    def set(self, value: T, marker: Marker) -> LWWRegister[T]:
        """Write ``value`` at ``marker`` (must exceed every marker this writer used before); returns the delta."""
        delta = LWWRegister(value, marker)
        self.merge(delta)
        return delta

    def validate(self, other: LWWRegister[T]) -> None:
        if other.marker is not None and other.marker == self.marker and other.value != self.value:
            raise InvalidDelta(f"marker {other.marker} reused for two different values")

    def merge(self, other: LWWRegister[T]) -> None:
        if other.marker is not None and (self.marker is None or other.marker > self.marker):
            self.value, self.marker = other.value, other.marker

    def version(self) -> VersionVector:
        """The writer's markers up to the current one are covered: a peer needs nothing older."""
        if self.marker is None:
            return VersionVector()
        return VersionVector({self.marker.replica: self.marker.lamport})

    def delta_since(self, seen: VersionVector) -> LWWRegister[T]:
        if self.marker is None or self.marker.lamport <= seen.base(self.marker.replica):
            return LWWRegister()
        return LWWRegister(self.value, self.marker)
