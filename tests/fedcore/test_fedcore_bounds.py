"""The limits results read against: the configuration-LP allocation bound and the pooled-fleet (fluid) replay."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.traces.dlrm import Instance
from fedcore.twin import bounds, submission

pytest.importorskip("scipy", reason="the LP bound needs scipy (train extra)")


def share(uid: str, milli: int, cpu: int = 1000) -> Pod:
    return Pod(uid, cpu, 1024, gpu=GpuRequest(1, milli))


def test_two_shares_that_cannot_share_a_device_leave_it_part_empty() -> None:
    nodes = [Node("n", 32000, 65536, gpus=1)]
    assert bounds.gpu_alloc_bound([share("a", 600), share("b", 600)], nodes) == pytest.approx(0.6)
    assert bounds.gpu_alloc_bound([share("a", 500), share("b", 500)], nodes) == pytest.approx(1.0)


def test_cpu_binds_when_the_fleet_runs_out_of_it() -> None:
    nodes = [Node("n", 4000, 65536, gpus=2)]
    pods = [Pod("w1", 4000, 1024, gpu=GpuRequest(1, 1000)), Pod("w2", 4000, 1024, gpu=GpuRequest(1, 1000))]
    assert bounds.gpu_alloc_bound(pods, nodes) == pytest.approx(0.5)


def test_the_bound_is_never_below_what_a_policy_reaches() -> None:
    rng = np.random.default_rng(3)
    nodes = [Node(f"n{i}", 64000, 262144, gpus=int(rng.choice([1, 2, 4, 8]))) for i in range(12)]
    pods = [
        share(f"s{i}", int(rng.choice([100, 250, 300, 450, 500, 700, 810]))) if rng.random() < 0.6
        else Pod(f"w{i}", 4000, 4096, gpu=GpuRequest(int(rng.choice([1, 2, 4])), 1000))
        for i in range(120)
    ]
    for profile in ("bestfit", "fgd", "random"):
        for seed in range(3):
            reached = submission.run(nodes, pods, profile, seed).gpu_alloc_ratio
            assert reached <= submission.upper_bound(pods, seed, nodes) + 1e-9


def test_fluid_replay_counts_waits_until_capacity_frees_and_unplaced_until_they_leave() -> None:
    nodes = [Node("a", 4000, 8192), Node("b", 4000, 8192)]
    pods = [Pod(f"p{i}", 3000, 1024) for i in range(4)]
    instances = [
        Instance(pods[0], 0.0, 10.0),
        Instance(pods[1], 0.0, None),
        Instance(pods[2], 1.0, None),  # waits for p0 to leave at 10 (pooled: 2000 milli free is not enough)
        Instance(pods[3], 2.0, 5.0),  # never placed: leaves at 5
    ]
    fluid = bounds.fluid_replay(nodes, instances, first_counted=2, end=20.0)
    assert fluid.never_placed == 1
    assert fluid.wait_s_mean == pytest.approx((9.0 + 3.0) / 2)
