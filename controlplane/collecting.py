"""The cyclic garbage collector of a serving plane, kept out of the tick's way.

At 10,000 agents a plane holds millions of objects the collector tracks (its twins' pods, the evidence book, the
registry's parsed documents, a connection's transport and buffers per agent), and almost all of them live as long as
the process. A full (generation-2) collection walks every one of them holding the GIL, so the tick stops with it:
2.8 s of wall time inside one tick was measured at 10,000 agents. So ``serve`` freezes (:func:`gc.freeze`) what is
alive once it has started, and again after every full collection the interpreter runs (its survivors are alive by
definition): the next full collection walks only what was made since. Walking only that, a full collection costs
what was promoted since the last one, so they run more often than CPython's default (:data:`FULL_AFTER`) and each
is shorter: at 10,000 agents, four in a 30 s steady phase paused 98 ms each (p99) at the default. Frozen objects are
still freed by reference counting when their last reference goes; what freezing gives up is reclaiming a frozen
*cycle* that becomes garbage later (the plane's reports, pods and placements are replaced, not linked into cycles; a
closed connection's cycle is the kind it keeps). So what freezing keeps stays bounded: once the process's peak
memory has grown by :data:`THAW_GROWTH` while the plane's live state (its agents and twin pods, ``live``) did not,
everything is thawed and the next full collection walks it all once (one long pause, rare) and frees those cycles
before freezing anew. Growth with the fleet is the fleet, not garbage: judged on size alone, a plane loaded with
100,000 pods thawed once loaded and its next full collection held the GIL 2.5 s inside a tick at 10,000 agents (the
scale bench); so live state grown by :data:`THAW_GROWTH` moves the mark growth is judged from. Nothing here counts
the frozen set (:func:`gc.get_freeze_count` walks all of it: ~40 ms for 3 million objects, on every full collection).
Every collection's pause goes to ``fedplane_gc_pause_seconds`` by generation.

Installed by the serve command only: the collector is the process's, and a plane embedded in a test or drill
leaves it as its host set it.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Histogram

THAW_GROWTH = 0.5
"""Peak memory grown by this fraction over a live state that did not (cycles that died frozen) thaws; live state grown
by this fraction moves the mark instead."""
FULL_AFTER = 2
"""Generation-1 collections between full ones (CPython's default: 10)."""


def peak_rss_kib() -> int:
    """The process's peak resident memory: O(1), unlike counting the frozen set."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Freezer:
    """Freezes the survivors of every full collection and times each collection's pause."""

    def __init__(self, pauses: Histogram, live: Callable[[], int] = lambda: 1, memory: Callable[[], int] = peak_rss_kib) -> None:
        """``live``: how many items of live state the plane holds now; ``memory``: the process's memory (both cheap:
        they are read after every full collection)."""
        self.pauses, self.live, self.memory = pauses, live, memory
        self._began = 0.0
        self._memory = 0
        self._items = 0
        """The memory and the live state at the mark (install, a thaw, or the fleet's growth)."""
        self._thawed = False
        self._thresholds = gc.get_threshold()

    def install(self) -> None:
        """Freeze what is alive now (the started plane) and every full collection's survivors from now on."""
        gc.collect()
        gc.freeze()
        self._mark(self.live())
        self._thresholds = gc.get_threshold()
        gc.set_threshold(self._thresholds[0], self._thresholds[1], FULL_AFTER)
        gc.callbacks.append(self._observe)

    def _mark(self, items: int) -> None:
        self._memory, self._items = self.memory(), items

    def uninstall(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)
            gc.set_threshold(*self._thresholds)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.pauses.labels(str(info["generation"])).observe(time.perf_counter() - self._began)
        if info["generation"] != 2:
            return
        items = self.live()
        grown = items > (1 + THAW_GROWTH) * max(1, self._items)
        if not self._thawed and not grown and self.memory() > (1 + THAW_GROWTH) * self._memory:
            gc.unfreeze()  # the next full collection walks (and frees) what died frozen
            self._thawed = True
            return
        gc.freeze()  # the collection is over ("stop"): its survivors leave the generations it walks
        if self._thawed or grown:
            self._thawed = False
            self._mark(items)
