"""Binds that name GPU devices: the twin books exactly the agent's devices, or refuses with a reason
and books nothing, so an agent's node table and the twin's never disagree about which devices are free."""

from __future__ import annotations

import re

import pytest
from test_cp_service import Api, api  # noqa: F401 (the gRPC fixture)

from fedapi import twincluster_pb2 as tw
from fedcore.backends.model import BindOutcome, Phase, WorkloadSpec
from fedcore.backends.twin import Binder, TwinCluster, make_nodes

NODE = "t1-n0"


def twin() -> TwinCluster:
    """Two 4-GPU nodes; ``train`` pods want two whole GPUs, ``web`` pods none."""
    t = TwinCluster("t1", make_nodes("t1", "r0", 2, 8000, 16384, gpus=4), lambda: 0.0, ready_delay_s=0.0, binder=Binder.EXTERNAL)
    t.create_workload(WorkloadSpec("train", 2, 500, 512, gpus=2))
    t.create_workload(WorkloadSpec("web", 1, 500, 512))
    return t


def free(t: TwinCluster, node: str = NODE) -> list[int]:
    """Free milli-GPU of each device on ``node``."""
    return [int(m) for m in t.table.gpu_free[t.table.index[node]]]


def test_named_devices_are_the_ones_booked_and_given_back() -> None:
    t = twin()
    result = t.bind_pod("train-0", NODE, 1, (1, 3))
    assert result.outcome is BindOutcome.BOUND and result.node == NODE
    assert free(t) == [1000, 0, 1000, 0]
    assert t.complete_pod("train-0", 1, True).ok
    assert free(t) == [1000] * 4


def test_no_named_devices_still_best_fits() -> None:
    t = twin()
    assert t.bind_pod("train-0", NODE, 1).outcome is BindOutcome.BOUND
    assert free(t) == [0, 0, 1000, 1000]


@pytest.mark.parametrize("pod, gpus, reason", [
    ("train-1", (1, 4), r"devices \[4\] are not on node t1-n0 \(it has 4\)"),
    ("train-1", (-1, 2), r"devices \[-1\] are not on node"),
    ("train-1", (2, 2), r"devices \[2\] are named more than once"),
    ("train-1", (2,), r"needs 2 devices, got 1"),
    ("train-1", (1, 2, 3), r"needs 2 devices, got 3"),
    ("web-0", (2,), r"needs 0 devices, got 1"),
    ("train-1", (1, 2), r"device 1 of node t1-n0 is too full"),
])
def test_bad_device_lists_are_refused_with_a_reason_and_book_nothing(pod: str, gpus: tuple[int, ...], reason: str) -> None:
    t = twin()
    assert t.bind_pod("train-0", NODE, 1, (0, 1)).ok
    row = t.table.index[NODE]
    before = (free(t), int(t.table.cpu_used[row]), int(t.table.mem_used[row]), t.cursor())

    result = t.bind_pod(pod, NODE, 1, gpus)

    assert result.outcome is BindOutcome.REJECTED and re.search(reason, result.reason), result.reason
    assert (free(t), int(t.table.cpu_used[row]), int(t.table.mem_used[row]), t.cursor()) == before
    state = next(s for s in t.snapshot() if s.name == pod)
    assert (state.phase, state.node) == (Phase.PENDING, "")
    assert t.bind_pod(pod, NODE, 1).ok  # nothing lost: the pod still binds


@pytest.mark.asyncio
async def test_grpc_bind_passes_the_agents_devices_through(api: Api) -> None:  # noqa: F811
    twin = api.running.plane.backends.twins()["edge"]
    twin.create_workload(WorkloadSpec("train", 1, 500, 256, gpus=1))  # placement is not under test: straight in

    def bind(*gpus: int) -> tw.BindPodRequest:
        return tw.BindPodRequest(cluster="edge", pod="train-0", node="edge-n1", epoch=1, gpus=gpus)

    refused = await api.twin.BindPod(bind(1))
    assert refused.outcome == tw.BIND_REJECTED and "devices [1] are not on node edge-n1" in refused.reason
    assert free(twin, "edge-n1") == [1000]
    bound = await api.twin.BindPod(bind(0))
    assert bound.outcome == tw.BIND_BOUND and free(twin, "edge-n1") == [0]
