"""Concurrent scheduling through the claims CRDT: N agents, M pods, random delivery, partitions that heal.

At quiescence every pod has exactly one agreed winner, no node is committed
beyond its capacity, and no stale-epoch claim wins. Each failure message
carries the seed and the configuration, so ``Simulation(SimConfig(...)).run()``
replays it exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedplane.lab.sims.claimsim import SimConfig, Simulation


def check(config: SimConfig) -> None:
    result = Simulation(config).run()
    replay = f"replay with Simulation({config!r}).run()"
    assert result.quiesced, f"did not quiesce in {result.rounds} rounds; {replay}"
    assert result.unplaced == 0, f"{result.unplaced} pods never placed; {replay}"
    assert (result.double_bookings, result.overcommits, result.stale_epoch_wins) == (0, 0, 0), replay
    assert result.rejected_deltas == 0, replay
    assert result.replaced_pods > 0 and result.stale_evictions > 0, f"the failure drill did nothing; {replay}"


@pytest.mark.parametrize("seed", range(6))
def test_default_drill_is_safe(seed: int) -> None:
    check(SimConfig(agents=8, pods=400, seed=seed))


@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    seed=st.integers(0, 2**32),
    agents=st.integers(3, 12),
    pods=st.integers(40, 300),
    loss=st.sampled_from([0.0, 0.05, 0.2]),
    duplication=st.sampled_from([0.0, 0.1]),
    max_delay=st.integers(0, 4),
    bind_after=st.integers(0, 4),
    partition=st.tuples(st.integers(0, 10), st.integers(1, 12)).map(lambda p: (p[0], p[0] + p[1])),
    minority=st.sampled_from([0.25, 0.5]),
    headroom=st.sampled_from([0.6, 1.0, 1.5]),
)
def test_random_drills_are_safe(
    seed: int, agents: int, pods: int, loss: float, duplication: float, max_delay: int,
    bind_after: int, partition: tuple[int, int], minority: float, headroom: float,
) -> None:
    config = SimConfig(
        agents=agents, pods=pods, seed=seed, loss=loss, duplication=duplication, max_delay=max_delay,
        bind_after=bind_after, partition=partition, minority=minority, headroom=headroom, max_rounds=300,
    )
    result = Simulation(config).run()
    replay = f"replay with Simulation({config!r}).run()"
    # Safety must hold even when the run cannot place everything (headroom < 1 starves capacity).
    assert (result.double_bookings, result.overcommits, result.stale_epoch_wins) == (0, 0, 0), replay
    assert result.rejected_deltas == 0, replay
