"""Bounded counter (escrow) over resource vectors: consume only rights you hold.

The counter's value (e.g. a node's free capacity) must never go negative, yet
replicas decrement it without coordination. Each replica holds *rights*: what it
added, plus what others transferred to it, minus what it transferred away and
what it consumed. A replica consumes or transfers only from its own rights,
which it alone changes, so the sum over replicas — the value — stays
non-negative under any interleaving (Balegas et al., "Extending eventually
consistent cloud databases for enforcing numeric invariants", 2015).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedcore.resources import ZERO, Resources

from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from crdt.rows import OwnerRows


@dataclass(frozen=True, slots=True)
class EscrowRow:
    """One replica's running totals; each only grows, so the row is a lattice element."""

    added: Resources = ZERO
    consumed: Resources = ZERO
    sent: tuple[tuple[str, Resources], ...] = ()
    """Transfers out, per receiver, sorted by receiver so equal rows compare equal."""

    def sent_to(self, replica: str) -> Resources:
        return next((amount for to, amount in self.sent if to == replica), ZERO)

    def covers(self, older: EscrowRow) -> bool:
        return (
            older.added.fits_in(self.added)
            and older.consumed.fits_in(self.consumed)
            and all(amount.fits_in(self.sent_to(to)) for to, amount in older.sent)
        )


@dataclass(slots=True)
class Escrow:
    """A resource counter whose value never drops below zero, whatever the merge order."""

    rows: OwnerRows[EscrowRow] = field(default_factory=OwnerRows)

    @property
    def value(self) -> Resources:
        total = ZERO
        for _, row in self.rows.rows.values():
            total = total + row.added - row.consumed
        return total

    def rights(self, replica: str) -> Resources:
        """What ``replica`` may still consume or transfer."""
        own = self.rows.get(replica) or EscrowRow()
        total = own.added - own.consumed
        for _, amount in own.sent:
            total = total - amount
        for other, (_, row) in self.rows.rows.items():
            if other != replica:
                total = total + row.sent_to(replica)
        return total

    def add(self, replica: str, amount: Resources) -> Escrow:
        """Grow the value by ``amount``, as rights of ``replica`` (capacity, or a release)."""
        row = self.rows.get(replica) or EscrowRow()
        return Escrow(self.rows.put(replica, EscrowRow(row.added + amount, row.consumed, row.sent)))

    def consume(self, replica: str, amount: Resources) -> Escrow | None:
        """Spend ``amount`` of ``replica``'s rights; ``None`` (and no change) if it holds too few."""
        if not amount.fits_in(self.rights(replica)):
            return None
        row = self.rows.get(replica) or EscrowRow()
        return Escrow(self.rows.put(replica, EscrowRow(row.added, row.consumed + amount, row.sent)))

    def transfer(self, source: str, target: str, amount: Resources) -> Escrow | None:
        """Hand ``amount`` of ``source``'s rights to ``target``; ``None`` if ``source`` holds too few."""
        if source == target or not amount.fits_in(self.rights(source)):
            return None
        row = self.rows.get(source) or EscrowRow()
        sent = dict(row.sent)
        sent[target] = sent.get(target, ZERO) + amount
        grown = EscrowRow(row.added, row.consumed, tuple(sorted(sent.items())))
        return Escrow(self.rows.put(source, grown))

    def validate(self, other: Escrow) -> None:
        for replica, (_, row) in other.rows.rows.items():
            totals = [row.added, row.consumed, *(amount for _, amount in row.sent)]
            if not all(t.is_nonnegative() for t in totals) or any(to == replica for to, _ in row.sent):
                raise InvalidDelta(f"escrow row of {replica!r} is malformed")
        # Rights are not checked here: a row that spends a transfer may arrive before the
        # transfer itself, so a partial view can look overdrawn without anyone cheating.
        self.rows.validate(other.rows)

    def merge(self, other: Escrow) -> None:
        self.rows.merge(other.rows)

    def version(self) -> VersionVector:
        return self.rows.version()

    def delta_since(self, seen: VersionVector) -> Escrow:
        return Escrow(self.rows.delta_since(seen))
