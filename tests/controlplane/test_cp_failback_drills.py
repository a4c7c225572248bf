"""The failback drills, short: a flapping cluster (3 flaps) and a stateful hand-off killed mid-way, each one run
through the real service with stand-in agents; judged by ground truth as the acceptance runs are.

Each drill runs in a fresh process: grpc's asyncio layer does not survive a second event loop in one process
(a segmentation fault, now and then), and the drill command runs one loop per process too.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from cp_feeder import EVIDENCE, EvidenceFeeder
from fedplane.lab.drills import flappingdrill, statefuldrill
from fedplane.lab.drills.failoverdrill import DrillConfig


def flapping(seed: int) -> tuple[dict[str, Any], list[flappingdrill.FlapResult]]:
    config = DrillConfig(agents_bind=False, planner=flappingdrill.BUDGET)
    short = flappingdrill.Flapping(period_s=10.0, flaps=3, window_s=6.0)
    return asyncio.run(flappingdrill.run_flapping(1, seed, config, EvidenceFeeder, flapping=short, evidence=EVIDENCE))


def stateful(seed: int) -> tuple[dict[str, Any], list[statefuldrill.StateResult]]:
    config = DrillConfig(clusters=2, regions=2, nodes_per_cluster=2, workloads=0, agents_bind=False)
    return asyncio.run(statefuldrill.run_stateful(1, seed, config, EvidenceFeeder, evidence=EVIDENCE))


def isolated(drill: Any, seed: int) -> Any:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(drill, seed).result(timeout=240)


@pytest.mark.integration
def test_a_short_flapping_run_moves_each_workload_at_most_twice_and_brings_it_home() -> None:
    summary, results = isolated(flapping, 0)
    assert summary["flaps"] == 3 and summary["early_returns"] == 0
    assert summary["moves_per_workload_max"] <= 2 and max(results[0].moves.values()) == 2, results[0].moves
    assert summary["returned_home"] == 1 and summary["returned_home_s_p99"] <= 10
    assert summary["lost"] == summary["duplicated"] == summary["healthy_evicted"] == 0


@pytest.mark.integration
@pytest.mark.parametrize("seed", [0, 1])  # 0 crashes the control plane mid-hand-off, 1 kills the source replica
def test_a_stateful_hand_off_killed_mid_way_loses_no_acknowledged_write(seed: int) -> None:
    _, results = isolated(stateful, seed)
    r = results[0]
    assert r.fault == ("plane", "source")[seed] and r.killed
    assert r.acknowledged > 50 and r.lost == 0 and r.two_writers_s == 0.0
    assert r.migration_s is not None and r.migration_s < 15 and r.state_mib >= 64


def test_drill_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="runs must be"):
        asyncio.run(flappingdrill.run_flapping(0))
    with pytest.raises(ValueError, match="runs must be"):
        asyncio.run(statefuldrill.run_stateful(0))
