"""Add-wins observed-remove set (ORSWOT): a concurrent add beats a remove."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from crdt.dotmaps import DotMap

T = TypeVar("T", bound=Hashable)


class ORSet(DotMap[T, None]):
    """A set replicas add to and remove from without coordination; no tombstones kept."""

    __slots__ = ()

    def add(self, element: T, replica: str) -> ORSet[T]:
        """Add as ``replica``; returns the delta to ship."""
        return self._write(element, None, replica)

    def remove(self, element: T, replica: str) -> ORSet[T]:
        """Remove the adds this replica has observed; returns the delta to ship."""
        return self._remove(element, replica)

    def __contains__(self, element: object) -> bool:
        return element in self.entries

    def elements(self) -> frozenset[T]:
        return frozenset(self.entries)
