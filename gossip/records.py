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
it never holds that key (:meth:`gossip.node.GossipNode.handle_record`).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import takewhile
from typing import Any

RecordValue = Any
"""Anything msgpack can encode (bytes, str, numbers, lists, dicts); lists come back for tuples."""


class RecordStore:
    """Latest version of every record this node has heard of."""

    __slots__ = ("_owners", "_size", "_tombstones")

    def __init__(self) -> None:
        self._owners: dict[str, dict[str, tuple[int, RecordValue]]] = {}
        self._size = 0
        self._tombstones: dict[tuple[str, str], float] = {}
        """When each held tombstone arrived, oldest first (insertion order; times never go back)."""

    def __len__(self) -> int:
        return self._size

    def apply(self, owner: str, key: str, version: int, value: RecordValue, now: float) -> bool:
        """Keep the record if it is newer than what we hold; True if it changed our state."""
        keys = self._owners.get(owner)
        held = None if keys is None else keys.get(key)
        if held is not None and held[0] >= version:
            return False
        if value is None:
            if held is None:
                return False
            self._tombstones.pop((owner, key), None)
            self._tombstones[(owner, key)] = now
        elif held is not None and held[1] is None:
            del self._tombstones[(owner, key)]
        if keys is None:
            keys = self._owners[owner] = {}
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
        keys = self._owners.get(owner)
        return None if keys is None else keys.get(key)

    def drop_owner(self, owner: str) -> dict[str, tuple[int, RecordValue]]:
        """Forget an owner's records (its member was reaped); returns what was dropped."""
        dropped = self._owners.pop(owner, {})
        self._size -= len(dropped)
        for key, (_, value) in dropped.items():
            if value is None:
                del self._tombstones[(owner, key)]
        return dropped

    def entries(self) -> Iterator[tuple[str, str, int, RecordValue]]:
        """Every (owner, key, version, value) held."""
        for owner, keys in self._owners.items():
            for key, (version, value) in keys.items():
                yield owner, key, version, value

    def snapshot(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """A copy callers may keep: owner -> key -> (version, value)."""
        return {owner: dict(keys) for owner, keys in self._owners.items() if keys}
