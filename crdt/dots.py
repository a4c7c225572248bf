"""Dots and version vectors: the causal bookkeeping every delta CRDT here shares.

A *dot* ``(replica, seq)`` names one mutation; each replica numbers its own
mutations 1, 2, 3, ... so dots are globally unique without any clock. A
:class:`VersionVector` is the set of dots a replica has seen, kept compact as a
contiguous prefix per replica (``base``) plus the few dots that arrived out of
order (``cloud``); a cloud dot folds into the base as soon as the gap before it
fills, so causal history does not grow with the number of mutations.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

Dot = tuple[str, int]
"""``(replica id, sequence number >= 1)``."""


class VersionVector:
    """A compacted set of dots: per replica a contiguous prefix ``1..base`` and an out-of-order cloud."""

    __slots__ = ("_base", "_cloud")

    def __init__(self, base: Mapping[str, int] | None = None, cloud: Iterable[Dot] = ()) -> None:
        self._base: dict[str, int] = {r: s for r, s in (base or {}).items() if s > 0}
        self._cloud: dict[str, set[int]] = {}
        for dot in cloud:
            self.add(dot)

    def __contains__(self, dot: Dot) -> bool:
        replica, seq = dot
        if seq <= self._base.get(replica, 0):
            return True
        extra = self._cloud.get(replica)
        return extra is not None and seq in extra

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return self._base == other._base and self._cloud == other._cloud

    def __repr__(self) -> str:
        return f"VersionVector({dict(sorted(self._base.items()))!r}, cloud={sorted(self.cloud())!r})"

    def base(self, replica: str) -> int:
        """The highest ``seq`` such that every dot of ``replica`` up to it is in the set."""
        return self._base.get(replica, 0)

    def cloud(self) -> Iterator[Dot]:
        """Dots seen out of order (beyond a gap); empty once delivery catches up."""
        for replica, seqs in self._cloud.items():
            for seq in seqs:
                yield (replica, seq)

    def cloud_of(self, replica: str) -> frozenset[int]:
        return frozenset(self._cloud.get(replica, ()))

    def replicas(self) -> set[str]:
        return set(self._base) | set(self._cloud)

    def add(self, dot: Dot) -> None:
        """Record one dot, folding the cloud into the base when a gap closes."""
        replica, seq = dot
        base = self._base.get(replica, 0)
        if seq != base + 1:
            if seq > base:
                self._cloud.setdefault(replica, set()).add(seq)
            return
        extra = self._cloud.get(replica)
        if extra:
            while seq + 1 in extra:
                seq += 1
                extra.discard(seq)
            if not extra:
                del self._cloud[replica]
        self._base[replica] = seq

    def fold_stable(self, stable: VersionVector) -> None:
        """Treat the dots below ``stable``'s bases as seen, up to the newest dot we saw of each replica.

        With a true meet of all versions this changes nothing (ours is in it). A caller
        that compacts with a bound instead (the edge agent counts every dot stable, see
        ``edgeagent.ledger``) would otherwise keep for ever one cloud entry per
        superseded version it never received: gossip carries only a record's latest
        version. Dots beyond the newest one seen stay unseen.
        """
        for replica in list(self._cloud):
            seq = min(stable.base(replica), max(self._cloud[replica]))
            if seq > self._base.get(replica, 0):
                self._raise_base(replica, seq)

    def _raise_base(self, replica: str, seq: int) -> None:
        """Make ``1..seq`` the replica's prefix; its cloud beyond ``seq`` re-folds in order, closing gaps."""
        pending = self._cloud.pop(replica, set())
        self._base[replica] = seq
        for later in sorted(pending):
            self.add((replica, later))  # at or below the new base: ignored

    def next_dot(self, replica: str) -> Dot:
        """Mint and record the next dot of ``replica`` (only ever called by that replica)."""
        dot = (replica, self._base.get(replica, 0) + 1)
        self.add(dot)
        return dot

    def merge(self, other: VersionVector) -> None:
        for replica, seq in other._base.items():
            if seq > self._base.get(replica, 0):
                self._raise_base(replica, seq)
        for dot in other.cloud():
            self.add(dot)

    def copy(self) -> VersionVector:
        clone = VersionVector(self._base)
        clone._cloud = {replica: set(seqs) for replica, seqs in self._cloud.items()}
        return clone

    def dominates(self, other: VersionVector) -> bool:
        """True when every dot of ``other`` is in ``self``."""
        if any(seq > self._base.get(r, 0) for r, seq in other._base.items()):
            return False
        return all(dot in self for dot in other.cloud())

    @staticmethod
    def meet(vectors: Iterable[VersionVector]) -> VersionVector:
        """Pointwise minimum of the bases: the dots every given replica has seen (causal stability)."""
        result: dict[str, int] | None = None
        for vv in vectors:
            if result is None:
                result = dict(vv._base)
            else:
                result = {r: min(s, vv._base.get(r, 0)) for r, s in result.items()}
        return VersionVector(result or {})
