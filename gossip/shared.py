"""A cluster state that many in-process nodes start from at once, shared instead of copied.

A simulation whose N nodes all restore one snapshot would otherwise hold N copies of N
members and their records: N² rows, ~60 GB at N = 10,000. Given a ``SharedState``, each
node's member table and record store read through to it until they change a row
(:class:`gossip.members.Members`, :class:`gossip.records.RecordStore`), so the process holds
the snapshot once plus what each node changed since.

Anti-entropy over such a node would hash every entry of the snapshot at every exchange
(N exchanges of N entries per interval). The snapshot's digest positions are computed once
per salt and geometry here instead, and each node's digest takes the rows it still reads
through to (:func:`gossip.antientropy.digest_parts`): the same bits as hashing them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gossip import digests, wire
from gossip.members import MemberState, MemberView, SharedRows
from gossip.messages import Alive, Record
from gossip.records import RecordValue

Ref = tuple[str, str | None]
"""An entry: (member name, None) or (record owner, record key)."""
_CACHED_GEOMETRIES = 8
"""Digest geometries (salt, capacity, error rate) whose positions are kept: a salt lasts
several push-pull intervals and nodes of one cluster hold similar counts."""


@dataclass(frozen=True, slots=True)
class SharedState:
    """Member rows and records as of one instant; read-only once built."""

    members: SharedRows
    """The member rows (and, growing, every row a node changes one to)."""
    records: Mapping[str, Mapping[str, tuple[int, RecordValue]]]
    refs: tuple[Ref, ...]
    """Every entry: members in order, then records owner by owner."""
    member_row: Mapping[str, int]
    """Member name -> its row in ``refs``."""
    owner_rows: Mapping[str, tuple[int, int]]
    """Record owner -> the slice of ``refs`` holding its records."""
    record_count: int
    _positions: dict[tuple[int, int, float], digests.Hashed] = field(default_factory=dict)
    _sizes: list[np.ndarray] = field(default_factory=list)
    _vouched: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        members: Iterable[tuple[str, int, MemberState]],
        records: Iterable[tuple[str, str, int, RecordValue]],
        now: float,
    ) -> SharedState:
        """From the same tuples ``GossipNode.restore`` takes (tombstones are left out: nothing to withdraw)."""
        rows = {name: MemberView(name, incarnation, MemberState(state)) for name, incarnation, state in members}
        held: dict[str, dict[str, tuple[int, RecordValue]]] = {}
        for owner, key, version, value in records:
            if value is not None and owner in rows:
                keys = held.setdefault(owner, {})
                if version > keys.get(key, (0, None))[0]:
                    keys[key] = (version, value)
        refs: list[Ref] = [(name, None) for name in rows]
        owner_rows: dict[str, tuple[int, int]] = {}
        for owner, keys in held.items():
            owner_rows[owner] = (len(refs), len(refs) + len(keys))
            refs.extend((owner, key) for key in keys)
        table = SharedRows(list(rows.values()), now)
        return cls(table, held, tuple(refs), table.index, owner_rows, len(refs) - len(rows))

    def message_sizes(self) -> np.ndarray:
        """Encoded size of the state message of every entry in ``refs``, and 0 for members not
        alive (their message names its sender as accuser: :meth:`vouched_rows`). Full-state frame
        sizes without encoding the frames (:func:`gossip.antientropy.full_state_body_size`)."""
        if not self._sizes:
            sizes = np.zeros(len(self.refs), dtype=np.int64)
            for i, (name, key) in enumerate(self.refs):
                if key is None:
                    row = self.members.rows[i]
                    if row.state == MemberState.ALIVE:
                        sizes[i] = len(wire.encode(Alive(name, row.incarnation)))
                else:
                    version, value = self.records[name][key]
                    sizes[i] = len(wire.encode(Record(name, key, version, value)))
            self._sizes.append(sizes)
        return self._sizes[0]

    def vouched_rows(self) -> np.ndarray:
        """Member rows whose state message depends on who sends it (suspect, dead, left): the
        snapshot's rows never change, so this is worked out once."""
        if not self._vouched:
            states = np.array([row.state for row in self.members.rows[: len(self.members)]], dtype=np.int64)
            self._vouched.append(np.flatnonzero(states != MemberState.ALIVE))
        return self._vouched[0]

    def positions(self, salt: int, capacity: int, error_rate: float) -> digests.Hashed:
        """Bloom bit positions of every entry in ``refs`` (row i: entry i) for this salt and geometry."""
        geometry = (salt, capacity, error_rate)
        cached = self._positions.get(geometry)
        if cached is None:
            if len(self._positions) >= _CACHED_GEOMETRIES:
                del self._positions[next(iter(self._positions))]
            cached = self._positions[geometry] = digests.positions(self._keys(salt), capacity, error_rate)
        return cached

    def _keys(self, salt: int) -> list[str]:
        keys = []
        for name, key in self.refs:
            if key is None:
                row = self.members.rows[self.member_row[name]]
                keys.append(digests.member_key(salt, name, row.incarnation, row.state))
            else:
                keys.append(digests.record_key(salt, name, key, self.records[name][key][0]))
        return keys
