"""Per-writer rows: the lattice under counters whose entries only their owner changes.

Each replica owns one row and rewrites it with a higher sequence number on every
mutation; a row only ever grows (``covers`` its older versions), so the join is
"keep the row with the higher seq". The seq doubles as the row's dot, which makes
``delta_since`` exact: ship the rows a peer's version vector does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, Self, TypeVar

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta


class Row(Protocol):
    def covers(self, older: Self) -> bool:
        """True when ``self`` could be a later version of ``older`` (every total is at least as large)."""


R = TypeVar("R", bound=Row)


@dataclass(slots=True)
class OwnerRows(Generic[R]):
    """``replica -> (seq, row)``; only ``replica`` itself writes its row."""

    rows: dict[str, tuple[int, R]] = field(default_factory=dict)

    def get(self, replica: str) -> R | None:
        entry = self.rows.get(replica)
        return None if entry is None else entry[1]

    def put(self, replica: str, row: R) -> OwnerRows[R]:
        """Replace ``replica``'s row by a grown one; returns the one-row delta."""
        seq = self.rows.get(replica, (0, row))[0] + 1
        delta = OwnerRows({replica: (seq, row)})
        self.rows[replica] = (seq, row)
        return delta

    def validate(self, other: OwnerRows[R]) -> None:
        for replica, (seq, row) in other.rows.items():
            if seq < 1:
                raise InvalidDelta(f"row of {replica!r} has seq {seq} < 1")
            mine = self.rows.get(replica)
            if mine is None:
                continue
            if seq == mine[0] and row != mine[1]:
                raise InvalidDelta(f"two different rows of {replica!r} share seq {seq}")
            newer, older = ((row, mine[1]) if seq > mine[0] else (mine[1], row))
            if not newer.covers(older):
                raise InvalidDelta(f"row of {replica!r} shrinks between versions")

    def merge(self, other: OwnerRows[R]) -> None:
        for replica, entry in other.rows.items():
            mine = self.rows.get(replica)
            if mine is None or entry[0] > mine[0]:
                self.rows[replica] = entry

    def version(self) -> VersionVector:
        return VersionVector({replica: seq for replica, (seq, _) in self.rows.items()})

    def delta_since(self, seen: VersionVector) -> OwnerRows[R]:
        return OwnerRows({r: e for r, e in self.rows.items() if e[0] > seen.base(r)})

