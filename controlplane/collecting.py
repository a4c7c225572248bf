"""The cyclic garbage collector of a serving plane, kept out of the tick's way.

At 10,000 agents a plane holds millions of objects the collector tracks (its twins' pods, the evidence book, the
registry's parsed documents, a connection's transport and buffers per agent), and almost all of them live as long as
the process. A full (generation-2) collection walks every one of them holding the GIL, so the tick stops with it:
2.8 s of wall time inside one tick was measured at 10,000 agents. So ``serve`` freezes (:func:`gc.freeze`) what is
alive once it has started, and again after every full collection the interpreter runs (its survivors are alive by
definition): the next full collection walks only what was made since. Frozen objects are still freed by reference
counting when their last reference goes; what freezing gives up is reclaiming a frozen *cycle* that becomes garbage
later (the plane's reports, pods and placements are replaced, not linked into cycles; a closed connection's cycle is the
kind it keeps). So what freezing keeps stays bounded: once the frozen set has grown by :data:`THAW_GROWTH` since the
last thaw, it is thawed, and the next full collection walks everything once (one long pause, rare: the frozen set must
grow by half again first) and frees those cycles before freezing anew. Every collection's pause goes to
``fedplane_gc_pause_seconds`` by generation.

Installed by the serve command only: the collector is the process's, and a plane embedded in a test or drill
leaves it as its host set it.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram

THAW_GROWTH = 0.5
"""The frozen set may grow by this fraction (live state or cycles that died frozen) before a full walk reclaims them."""


class Freezer:
    """Freezes the survivors of every full collection and times each collection's pause."""

    def __init__(self, pauses: Histogram) -> None:
        self.pauses = pauses
        self._began = 0.0
        self._baseline = 0
        self._thawed = False

    def install(self) -> None:
        """Freeze what is alive now (the started plane) and every full collection's survivors from now on."""
        gc.collect()
        gc.freeze()
        self._baseline = gc.get_freeze_count()
        gc.callbacks.append(self._observe)

    def uninstall(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.pauses.labels(str(info["generation"])).observe(time.perf_counter() - self._began)
        if info["generation"] != 2:
            return
        if not self._thawed and gc.get_freeze_count() > (1 + THAW_GROWTH) * self._baseline:
            gc.unfreeze()  # the next full collection walks (and frees) what died frozen
            self._thawed = True
            return
        gc.freeze()  # the collection is over ("stop"): its survivors leave the generations it walks
        if self._thawed:
            self._thawed, self._baseline = False, gc.get_freeze_count()
