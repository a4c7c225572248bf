"""The common interface of every delta-state CRDT here, and the two helpers built on it.

A delta CRDT is a join-semilattice whose mutators return *deltas*: small states
of the same type that, merged anywhere in any order, have the effect of the
mutation. ``merge`` must be commutative, associative and idempotent; the tests
check those laws for every type. ``validate`` is separate so a replica can
refuse a bad delta without touching its state (rust-crdt's ``validate_merge``).
"""

from __future__ import annotations

import copy
from typing import Protocol, Self, TypeVar

from crdt.dots import VersionVector


class DeltaCRDT(Protocol):
    """A state-based CRDT that can ship only what a peer lacks."""

    def validate(self, other: Self) -> None:
        """Raise :class:`crdt.errors.InvalidDelta` if ``other`` must not be merged; never mutates."""

    def merge(self, other: Self) -> None:
        """Join ``other`` (a full state or a delta) into ``self``, in place."""

    def version(self) -> VersionVector:
        """The mutations this state reflects, to send to a peer as a pull request."""

    def delta_since(self, seen: VersionVector) -> Self:
        """The smallest state that brings a replica which has ``seen`` up to date with ``self``."""


C = TypeVar("C", bound=DeltaCRDT)


def apply(state: C, delta: C) -> None:
    """Validate, then merge: the only way untrusted deltas should enter a replica."""
    state.validate(delta)
    state.merge(delta)


def join(a: C, b: C) -> C:
    """``a ⊔ b`` as a new value; both inputs are left untouched."""
    result = copy.deepcopy(a)
    apply(result, b)
    return result
