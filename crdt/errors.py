"""The one exception the CRDT layer raises for bad input from a peer.

Expected outcomes of local operations (no escrow, stale epoch, ...) are
:class:`crdt.claims.Status` values, never exceptions. ``InvalidDelta`` means a
delta (or its bytes) is malformed, oversized or inconsistent with what this
replica already holds: the caller should log it with the peer and drop it; the
replica's state is untouched, and retrying the same bytes will fail again.
"""

from __future__ import annotations


class InvalidDelta(ValueError):
    """A delta was rejected before merging; local state is unchanged (permanent: drop it)."""
