"""Retransmit-limited broadcast queue: what a node piggybacks on its outgoing packets.

After memberlist's queue.go (TransmitLimitedQueue). A newer broadcast about the same
subject (a member, or one record of one owner) replaces the older one, so stale news is
never sent. Items least transmitted go first, newest first among equals; each item
is sent at most ``limit`` times, a limit that grows with log N (``timeouts.retransmit_limit``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _Broadcast:
    payload: bytes
    """One encoded message, ready to be concatenated into a compound packet."""
    transmits: int
    order: int
    """Insertion counter: among equally transmitted items the newest wins."""


class BroadcastQueue:
    """Pending broadcasts keyed by subject, drained by ``take`` under a byte budget."""

    __slots__ = ("_items", "_order")

    def __init__(self) -> None:
        self._items: dict[Hashable, _Broadcast] = {}
        self._order = 0

    def __len__(self) -> int:
        return len(self._items)

    def queue(self, subject: Hashable, payload: bytes) -> None:
        """Queue news about subject, invalidating anything older about the same subject."""
        self._order += 1
        self._items[subject] = _Broadcast(payload, 0, self._order)

    def take(self, budget: int, limit: int) -> list[bytes]:
        """Payloads that fit in ``budget`` bytes; counts one transmission for each.

        Items that reached ``limit`` transmissions are dropped from the queue.
        """
        if not self._items or budget <= 0:
            return []
        chosen: list[bytes] = []
        done: list[Hashable] = []
        for subject, item in sorted(self._items.items(), key=lambda kv: (kv[1].transmits, -kv[1].order)):
            size = len(item.payload)
            if size > budget:
                continue
            budget -= size
            chosen.append(item.payload)
            item.transmits += 1
            if item.transmits >= limit:
                done.append(subject)
            if budget < 16:
                break
        for subject in done:
            del self._items[subject]
        return chosen

    def drop(self, subject: Hashable) -> None:
        """Forget any pending news about subject (e.g. a reaped member)."""
        self._items.pop(subject, None)
