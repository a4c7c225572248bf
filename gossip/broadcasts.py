"""Retransmit-limited broadcast queue: what a node piggybacks on its outgoing packets.

After memberlist's queue.go (TransmitLimitedQueue). A newer broadcast about the same
subject (a member, or one record of one owner) replaces the older one, so stale news is
never sent. Items least transmitted go first, newest first among equals; each item
is sent at most ``limit`` times, a limit that grows with log N (``timeouts.retransmit_limit``).

Items sit in one bucket per transmit count (insertion-ordered dicts), so ``take`` walks
them in priority order without sorting: under loss the queue holds hundreds of items
and ``take`` runs for every packet.

An item may be held back until a time (``ready_at``): news a node relays waits for its
next gossip round (see :mod:`gossip.rounds`), so it moves one hop per round however
many packets the node sends meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Hashable


class BroadcastQueue:
    """Pending broadcasts keyed by subject, drained by ``take`` under a byte budget."""

    __slots__ = ("_payloads", "_transmits", "_buckets", "_ready")

    def __init__(self) -> None:
        self._payloads: dict[Hashable, bytes] = {}
        """One encoded message per subject, ready to concatenate into a compound packet."""
        self._transmits: dict[Hashable, int] = {}
        self._buckets: list[dict[Hashable, None]] = [{}]
        """Subjects by transmit count, oldest first within a bucket."""
        self._ready: dict[Hashable, float] = {}
        """When each unsent item may first go out."""

    def __len__(self) -> int:
        return len(self._payloads)

    def queue(self, subject: Hashable, payload: bytes, ready_at: float = -math.inf) -> None:
        """Queue news about subject, invalidating anything older about the same subject.

        It is not sent before ``ready_at`` (by default at once).
        """
        self.drop(subject)
        self._payloads[subject] = payload
        self._transmits[subject] = 0
        self._buckets[0][subject] = None
        if ready_at > -math.inf:
            self._ready[subject] = ready_at

    def take(self, budget: int, limit: int, now: float = math.inf) -> list[bytes]:
        """Payloads ready at ``now`` that fit in ``budget`` bytes; counts one transmission for each.

        Items that reached ``limit`` transmissions are dropped from the queue. Runs for
        every packet a node sends, so it walks only non-empty buckets and moves what it
        took a bucket at a time.
        """
        payloads = self._payloads
        if not payloads:
            return []
        ready, buckets = self._ready, self._buckets
        out: list[bytes] = []
        moves: list[tuple[int, list[Hashable]]] = []
        for sent, bucket in enumerate(buckets):
            if not bucket:
                continue
            picked: list[Hashable] = []
            for subject in reversed(bucket):
                if ready and subject in ready:
                    if ready[subject] > now:
                        continue
                    del ready[subject]
                payload = payloads[subject]
                if len(payload) <= budget:
                    budget -= len(payload)
                    picked.append(subject)
                    out.append(payload)
                    if budget < 16:
                        break
            if picked:
                moves.append((sent, picked))
            if budget < 16:
                break
        transmits = self._transmits
        for sent, picked in moves:
            bucket = buckets[sent]
            if sent + 1 >= limit:
                for subject in picked:
                    del bucket[subject], payloads[subject], transmits[subject]
                continue
            if sent + 1 == len(buckets):
                buckets.append({})
            later = buckets[sent + 1]
            for subject in picked:
                del bucket[subject]
                transmits[subject] = sent + 1
                later[subject] = None
        return out

    def drop(self, subject: Hashable) -> None:
        """Forget any pending news about subject (superseded, or a reaped member)."""
        sent = self._transmits.pop(subject, None)
        if sent is not None:
            del self._payloads[subject], self._buckets[sent][subject]
            self._ready.pop(subject, None)
