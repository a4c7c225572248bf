"""The serving plane's collector: survivors of a full collection are frozen, every pause is timed."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Histogram

from controlplane.collecting import FULL_AFTER, Freezer


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_full_collections_freeze_their_survivors_and_every_pause_is_timed() -> None:
    registry = CollectorRegistry()
    freezer = Freezer(Histogram("pauses", "", ["generation"], registry=registry))
    try:
        freezer.install()
        at_start = gc.get_freeze_count()
        assert at_start > 0, "what lives once the plane started is frozen"
        kept = [_Cycle() for _ in range(1000)]
        gc.collect(0)
        assert gc.get_freeze_count() == at_start, "a young collection freezes nothing"
        dying = [_Cycle() for _ in range(1000)]
        del dying  # cycles: only the collector frees them, and a frozen one it would keep
        assert gc.collect(2) >= 1000, "what died before the full collection is freed, not frozen"
        assert gc.get_freeze_count() >= at_start + len(kept), "the survivors of a full collection are frozen"
        assert registry.get_sample_value("pauses_count", {"generation": "2"}) == 1
        assert registry.get_sample_value("pauses_count", {"generation": "0"}) >= 1
    finally:
        freezer.uninstall()
        gc.unfreeze()
    assert freezer._observe not in gc.callbacks


def test_cycles_that_died_frozen_are_freed_once_memory_grew_by_half_over_the_same_live_state() -> None:
    memory = [100]
    freezer = Freezer(Histogram("pauses", "", ["generation"], registry=CollectorRegistry()), memory=lambda: memory[0])
    gc.disable()  # only the collections below: an automatic one while the cycles are made would move the thaw
    try:
        freezer.install()
        at_start = gc.get_freeze_count()
        leaked = [_Cycle() for _ in range(at_start)]  # e.g. closed connections' cycles, alive at a full collection
        gc.collect(2)
        assert gc.get_freeze_count() >= 2 * at_start, "frozen with the survivors"
        del leaked  # they die frozen: no collection walks them now
        memory[0] = 140
        gc.collect(2)
        assert gc.get_freeze_count() >= 2 * at_start, "memory grew by less than half: still frozen"
        memory[0] = 151
        gc.collect(2)  # grown by half with the same live state: thawed
        assert gc.collect(2) >= at_start, "the next full collection walked the thawed set and freed the dead cycles"
        assert gc.get_freeze_count() < 1.5 * at_start, "frozen anew from what is alive"
    finally:
        gc.enable()
        freezer.uninstall()
        gc.unfreeze()


def test_growth_with_the_live_state_moves_the_mark_instead_of_thawing() -> None:
    items, memory = [1], [100]
    freezer = Freezer(Histogram("pauses", "", ["generation"], registry=CollectorRegistry()), lambda: items[0], lambda: memory[0])
    gc.disable()
    try:
        freezer.install()
        at_start = gc.get_freeze_count()
        fleet = [_Cycle() for _ in range(at_start)]  # the fleet arrives: live state
        items[0], memory[0] = 1000, 300
        gc.collect(2)
        gc.collect(2)
        assert gc.get_freeze_count() >= 2 * at_start, "grown with the fleet: not thawed (no full walk of it)"
        leaked = [_Cycle() for _ in range(at_start)]  # then cycles die frozen while the fleet stays the same
        gc.collect(2)
        del leaked
        memory[0] = 451  # half again over the new mark
        gc.collect(2)
        assert gc.collect(2) >= at_start, "thawed: the dead cycles were freed"
        assert len(fleet) == at_start
    finally:
        gc.enable()
        freezer.uninstall()
        gc.unfreeze()


def test_full_collections_run_more_often_while_installed_and_the_thresholds_come_back() -> None:
    before = gc.get_threshold()
    freezer = Freezer(Histogram("pauses", "", ["generation"], registry=CollectorRegistry()))
    try:
        freezer.install()
        assert gc.get_threshold() == (before[0], before[1], FULL_AFTER)
    finally:
        freezer.uninstall()
        gc.unfreeze()
    assert gc.get_threshold() == before
