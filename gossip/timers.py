"""The node's timer heap: every deadline of the sans-IO core, run when ``GossipNode.tick`` says.

The collaborators of :mod:`gossip.node` (``probing``, ``membership``, ``exchanging`` and the
gossip rounds of ``sending``) schedule callbacks here; timers due at the same instant run in
the order they were scheduled, so a seeded run replays exactly. How long to wait is pure
maths in :mod:`gossip.timeouts`; the driver reads the next deadline and calls ``tick``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

Callback = Callable[[Any, float], None]
"""Called with the argument it was scheduled with and the time it runs at."""


class Timers:
    """Callbacks by deadline, ties in scheduling order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, when: float, fn: Callback, arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, fn, arg))

    def run_due(self, now: float) -> None:
        """Run every timer due at ``now``, including those the callbacks schedule for ``now``."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, fn, arg = heapq.heappop(heap)
            fn(arg, now)

    def next_deadline(self, idle: Callable[[Callback, Any], bool]) -> float:
        """The earliest deadline, once the leading timers ``idle(fn, arg)`` says would do nothing
        are dropped (a driver need not wake for them). The node always holds a timer (its probe
        and push-pull rounds re-arm themselves)."""
        heap = self._heap
        while idle(heap[0][2], heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0]
