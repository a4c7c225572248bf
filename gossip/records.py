"""Versioned records: owner -> key -> (version, value), the replicated state of a node.

Each owner versions its own records with one counter that grows with every publish,
so the newest version of a key always wins and replicas converge whatever the order
of delivery. A value of ``None`` is a tombstone: the owner withdrew the key.

Tombstones are kept only for a while (:meth:`RecordStore.reap`): long enough for the
withdrawal to reach every holder by broadcast and anti-entropy, not for ever, or a
node would keep one per key ever withdrawn (an agent: several per pod it has seen).
A tombstone for a key we do not hold is not stored (there is nothing to withdraw, and
storing it would bounce reaped tombstones between peers for ever). A live version that
slips past a reaped tombstone is withdrawn again by its owner, the one node that knows
it never holds that key (:meth:`gossip.publishing.Publisher.handle_record`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import takewhile
from typing import Any

RecordValue = Any
"""Anything msgpack can encode (bytes, str, numbers, lists, dicts); lists come back for tuples."""


class RecordStore:
    """Latest version of every record this node has heard of.

    Like :class:`gossip.members.Members`, a store may read through to a shared, read-only
    ``base`` (owner -> key -> (version, value), no tombstones): an owner's records are
    copied into the store the first time they change here.
    """

    __slots__ = ("_owners", "_base", "_size", "_tombstones")

    def __init__(self, base: Mapping[str, Mapping[str, tuple[int, RecordValue]]] | None = None, base_size: int = 0) -> None:
        """``base`` is shared and read-only and holds ``base_size`` records."""
        self._base: Mapping[str, Mapping[str, tuple[int, RecordValue]]] = base or {}
        self._owners: dict[str, dict[str, tuple[int, RecordValue]]] = {}
        """Owners whose records changed here (an empty dict hides a base owner we dropped)."""
        self._size = base_size
        self._tombstones: dict[tuple[str, str], float] = {}
        """When each held tombstone arrived, oldest first (insertion order; times never go back)."""

    def adopt(self, base: Mapping[str, Mapping[str, tuple[int, RecordValue]]], base_size: int) -> None:
        """Read through to ``base`` from now on, as if built on it (a node adopting a shared state
        keeps its store object, which its collaborators hold). Only an empty store may."""
        if self._size or self._owners or self._base:
            raise ValueError("only an empty record store may adopt a base")
        self._base, self._size = base or {}, base_size

    def __len__(self) -> int:
        return self._size

    def _keys(self, owner: str) -> Mapping[str, tuple[int, RecordValue]] | None:
        keys = self._owners.get(owner)
        return self._base.get(owner) if keys is None else keys

    def apply(self, owner: str, key: str, version: int, value: RecordValue, now: float) -> bool:
        """Keep the record if it is newer than what we hold; True if it changed our state."""
        held = self.get(owner, key)
        if held is not None and held[0] >= version:
            return False
        if value is None:
            if held is None:
                return False
            self._tombstones.pop((owner, key), None)
            self._tombstones[(owner, key)] = now
        elif held is not None and held[1] is None:
            del self._tombstones[(owner, key)]
        keys = self._owners.get(owner)
        if keys is None:
            keys = self._owners[owner] = dict(self._base.get(owner, {}))
        if held is None:
            self._size += 1
        keys[key] = (version, value)
        return True

    def reap(self, before: float) -> int:
        """Forget tombstones that arrived before ``before``; returns how many."""
        expired = list(takewhile(lambda item: item[1] < before, self._tombstones.items()))
        for (owner, key), _ in expired:
            del self._tombstones[(owner, key)], self._owners[owner][key]
        self._size -= len(expired)
        return len(expired)

    def get(self, owner: str, key: str) -> tuple[int, RecordValue] | None:
        keys = self._keys(owner)
        return None if keys is None else keys.get(key)

    def drop_owner(self, owner: str) -> dict[str, tuple[int, RecordValue]]:
        """Forget an owner's records (its member was reaped); returns what was dropped."""
        dropped = dict(self._keys(owner) or {})
        if owner in self._base:
            self._owners[owner] = {}
        else:
            self._owners.pop(owner, None)
        self._size -= len(dropped)
        for key, (_, value) in dropped.items():
            if value is None:
                del self._tombstones[(owner, key)]
        return dropped

    def own_owners(self) -> Iterator[str]:
        """Owners whose records this store holds itself: all without a base, else those changed here."""
        return iter(self._owners)

    def own_entries(self) -> Iterator[tuple[str, str, int, RecordValue]]:
        """(owner, key, version, value) of the owners in :meth:`own_owners`."""
        for owner, keys in self._owners.items():
            for key, (version, value) in keys.items():
                yield owner, key, version, value

    def _all(self) -> Iterator[tuple[str, Mapping[str, tuple[int, RecordValue]]]]:
        owners = self._owners
        yield from owners.items()
        for owner, keys in self._base.items():
            if owner not in owners:
                yield owner, keys

    def entries(self) -> Iterator[tuple[str, str, int, RecordValue]]:
        """Every (owner, key, version, value) held."""
        for owner, keys in self._all():
            for key, (version, value) in keys.items():
                yield owner, key, version, value

    def snapshot(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """A copy callers may keep: owner -> key -> (version, value)."""
        return {owner: dict(keys) for owner, keys in self._all() if keys}
