"""PN-counter: each replica owns a row of (increments, decrements) totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from crdt.rows import OwnerRows


@dataclass(frozen=True, slots=True)
class PNRow:
    """Totals added and removed by one replica; both only grow."""

    p: int = 0
    n: int = 0

    def covers(self, older: PNRow) -> bool:
        return self.p >= older.p and self.n >= older.n


@dataclass(slots=True)
class PNCounter:
    """An integer any replica may increment or decrement without coordination."""

    rows: OwnerRows[PNRow] = field(default_factory=OwnerRows)

    @property
    def value(self) -> int:
        return sum(row.p - row.n for _, row in self.rows.rows.values())

    def increment(self, replica: str, amount: int = 1) -> PNCounter:
        """Add ``amount`` (negative subtracts) as ``replica``; returns the delta."""
        row = self.rows.get(replica) or PNRow()
        grown = PNRow(row.p + max(amount, 0), row.n + max(-amount, 0))
        return PNCounter(self.rows.put(replica, grown))

    def validate(self, other: PNCounter) -> None:
        if any(row.p < 0 or row.n < 0 for _, row in other.rows.rows.values()):
            raise InvalidDelta("a PN-counter row holds a negative total")
        self.rows.validate(other.rows)

    def merge(self, other: PNCounter) -> None:
        self.rows.merge(other.rows)

    def version(self) -> VersionVector:
        return self.rows.version()

    def delta_since(self, seen: VersionVector) -> PNCounter:
        return PNCounter(self.rows.delta_since(seen))
