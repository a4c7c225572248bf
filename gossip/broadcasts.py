"""Retransmit-limited broadcast queue: what a node piggybacks on its outgoing packets.

After memberlist's queue.go (TransmitLimitedQueue). A newer broadcast about the same
subject (a member, or one record of one owner) replaces the older one, so stale news is
never sent. Items least transmitted go first, newest first among equals; each item
is sent at most ``limit`` times, a limit that grows with log N (``timeouts.retransmit_limit``).

Items sit in one bucket per transmit count (insertion-ordered dicts), so ``take`` walks
them in priority order without sorting: under loss the queue holds hundreds of items
and ``take`` runs for every packet.

An item may be held back until a time (``ready_at``): news a node relays waits for its
next gossip round (see :mod:`gossip.sending`), so it moves one hop per round however
many packets the node sends meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Hashable


class BroadcastQueue:
    """Pending broadcasts keyed by subject, drained by ``take`` under a byte budget."""

    __slots__ = ("_transmits", "_buckets", "_ready", "_sizes")

    def __init__(self) -> None:
        self._transmits: dict[Hashable, int] = {}
        """Subject -> how many times its news was sent (its bucket)."""
        self._buckets: list[dict[Hashable, bytes] | None] = [None]
        """Per transmit count: subject -> its encoded message (ready to concatenate into a compound
        packet), oldest first; None while empty, so ``take`` passes empty buckets without reading them
        (a simulated cluster of 10,000 queues is bound by memory reads, not by instructions)."""
        self._ready: dict[Hashable, float] = {}
        """When each unsent item may first go out."""
        self._sizes: dict[int, int] = {}
        """Payload size -> how many items have it: once the budget left is below the smallest,
        ``take`` stops instead of reading every other item (a queue of records under churn
        holds hundreds, none of which fits the last few dozen bytes of a packet)."""

    def __len__(self) -> int:
        return len(self._transmits)

    def queue(self, subject: Hashable, payload: bytes, ready_at: float = -math.inf) -> None:
        """Queue news about subject, invalidating anything older about the same subject.

        It is not sent before ``ready_at`` (by default at once).
        """
        self.drop(subject)
        self._transmits[subject] = 0
        fresh = self._buckets[0]
        if fresh is None:
            fresh = self._buckets[0] = {}
        fresh[subject] = payload
        sizes = self._sizes
        sizes[len(payload)] = sizes.get(len(payload), 0) + 1
        if ready_at > -math.inf:
            self._ready[subject] = ready_at

    def take(self, budget: int, limit: int, now: float = math.inf) -> list[bytes]:
        """Payloads ready at ``now`` that fit in ``budget`` bytes; counts one transmission for each.

        Items that reached ``limit`` transmissions are dropped from the queue. Runs for
        every packet a node sends, so it walks only non-empty buckets and moves what it
        took a bucket at a time.
        """
        transmits = self._transmits
        if not transmits:
            return []
        ready, buckets, sizes = self._ready, self._buckets, self._sizes
        stop = max(16, min(sizes))
        out: list[bytes] = []
        moves: list[tuple[int, list[Hashable]]] = []
        for sent, bucket in enumerate(buckets):
            if bucket is None:
                continue
            picked: list[Hashable] = []
            for subject, payload in reversed(bucket.items()):
                if ready and subject in ready:
                    if ready[subject] > now:
                        continue
                    del ready[subject]
                size = len(payload)
                if size <= budget:
                    budget -= size
                    picked.append(subject)
                    out.append(payload)
                    if budget < stop:
                        break
            if picked:
                moves.append((sent, picked))
            if budget < stop:
                break
        for sent, picked in moves:
            bucket = buckets[sent]
            assert bucket is not None
            if sent + 1 >= limit:
                for subject in picked:
                    self._forget_size(len(bucket.pop(subject)))
                    del transmits[subject]
            else:
                if sent + 1 == len(buckets):
                    buckets.append(None)
                later = buckets[sent + 1]
                if later is None:
                    later = buckets[sent + 1] = {}
                for subject in picked:
                    later[subject] = bucket.pop(subject)
                transmits.update(dict.fromkeys(picked, sent + 1))
            if not bucket:
                buckets[sent] = None
        return out

    def drop(self, subject: Hashable) -> None:
        """Forget any pending news about subject (superseded, or a reaped member)."""
        sent = self._transmits.pop(subject, None)
        if sent is not None:
            bucket = self._buckets[sent]
            assert bucket is not None
            self._forget_size(len(bucket.pop(subject)))
            if not bucket:
                self._buckets[sent] = None
            self._ready.pop(subject, None)

    def _forget_size(self, size: int) -> None:
        left = self._sizes[size] - 1
        if left:
            self._sizes[size] = left
        else:
            del self._sizes[size]
