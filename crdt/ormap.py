"""Add-wins observed-remove map whose values are multi-value registers.

A ``put`` replaces the values it has observed; concurrent puts both survive
(``values``) and ``get`` picks one deterministically (the highest dot), so every
replica reads the same value once merged.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from crdt.dotmaps import DotMap

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ORMap(DotMap[K, V]):
    """A map replicas write and remove keys in without coordination; a concurrent put beats a remove."""

    __slots__ = ()

    def put(self, key: K, value: V, replica: str) -> ORMap[K, V]:
        """Write ``value`` as ``replica``; returns the delta to ship."""
        return self._write(key, value, replica)

    def remove(self, key: K, replica: str) -> ORMap[K, V]:
        return self._remove(key, replica)

    def values(self, key: K) -> list[V]:
        """Every concurrent value of ``key``, ordered by dot."""
        return [v for _, v in sorted(self.entries.get(key, {}).items(), key=lambda item: item[0])]

    def get(self, key: K) -> V | None:
        found = self.values(key)
        return found[-1] if found else None

    def keys(self) -> frozenset[K]:
        return frozenset(self.entries)
