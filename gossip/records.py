"""Versioned records: owner -> key -> (version, value), the replicated state of a node.

Each owner versions its own records with one counter that grows with every publish,
so the newest version of a key always wins and replicas converge whatever the order
of delivery. A value of ``None`` is a tombstone: the owner withdrew the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

RecordValue = Any
"""Anything msgpack can encode (bytes, str, numbers, lists, dicts); lists come back for tuples."""


class RecordStore:
    """Latest version of every record this node has heard of."""

    __slots__ = ("_owners", "_size")

    def __init__(self) -> None:
        self._owners: dict[str, dict[str, tuple[int, RecordValue]]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def apply(self, owner: str, key: str, version: int, value: RecordValue) -> bool:
        """Keep the record if it is newer than what we hold; True if it changed our state."""
        keys = self._owners.get(owner)
        if keys is None:
            keys = self._owners[owner] = {}
        held = keys.get(key)
        if held is not None and held[0] >= version:
            return False
        if held is None:
            self._size += 1
        keys[key] = (version, value)
        return True

    def get(self, owner: str, key: str) -> tuple[int, RecordValue] | None:
        keys = self._owners.get(owner)
        return None if keys is None else keys.get(key)

    def drop_owner(self, owner: str) -> dict[str, tuple[int, RecordValue]]:
        """Forget an owner's records (its member was reaped); returns what was dropped."""
        dropped = self._owners.pop(owner, {})
        self._size -= len(dropped)
        return dropped

    def entries(self) -> Iterator[tuple[str, str, int, RecordValue]]:
        """Every (owner, key, version, value) held."""
        for owner, keys in self._owners.items():
            for key, (version, value) in keys.items():
                yield owner, key, version, value

    def snapshot(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """A copy callers may keep: owner -> key -> (version, value)."""
        return {owner: dict(keys) for owner, keys in self._owners.items() if keys}
