"""Filter plugins as tables: which nodes each rule admits for which pod."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod, Toleration
from fedcore.resources import GpuRequest
from fedcore.scheduling.filters import MaxPerNode, NodeAffinity, NodeArch, NodeResourcesFit, TaintToleration

NODES = [
    Node("cpu-small", 4000, 8192),
    Node("gpu-8", 64000, 262144, gpus=8, gpu_model="V100"),
    Node("gpu-2-t4", 32000, 131072, gpus=2, gpu_model="T4", arch=Arch.ARM64, labels={"zone": "edge"}),
    Node("tainted", 64000, 262144, taints=(Taint("dedicated", "ml", TaintEffect.NO_SCHEDULE),)),
    Node("soft-taint", 64000, 262144, taints=(Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE),)),
]


@pytest.fixture
def table() -> NodeTable:
    t = NodeTable(NODES)
    t.allocate(Pod("half", 0, 0, gpu=GpuRequest(1, 600)), 2)  # gpu-2-t4: device 0 has 400 free, device 1 whole
    return t


def names(table: NodeTable, mask: np.ndarray) -> set[str]:
    return {table.nodes[i].name for i in np.flatnonzero(mask)}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (Pod("tiny", 1000, 1024), {"cpu-small", "gpu-8", "gpu-2-t4", "tainted", "soft-taint"}),
        (Pod("big-cpu", 40000, 1024), {"gpu-8", "tainted", "soft-taint"}),
        (Pod("big-mem", 1000, 200000), {"gpu-8", "tainted", "soft-taint"}),
        (Pod("share-300", 1000, 1024, gpu=GpuRequest(1, 300)), {"gpu-8", "gpu-2-t4"}),
        (Pod("share-500", 1000, 1024, gpu=GpuRequest(1, 500)), {"gpu-8", "gpu-2-t4"}),
        (Pod("two-whole", 1000, 1024, gpu=GpuRequest(2, 1000)), {"gpu-8"}),
        (Pod("one-whole", 1000, 1024, gpu=GpuRequest(1, 1000)), {"gpu-8", "gpu-2-t4"}),
        (Pod("t4-only", 1000, 1024, gpu=GpuRequest(1, 1000), gpu_model="T4"), {"gpu-2-t4"}),
        (Pod("v100-or-a10", 1000, 1024, gpu=GpuRequest(1, 200), gpu_model="A10|V100"), {"gpu-8"}),
    ],
)
def test_resources_fit(table: NodeTable, pod: Pod, expected: set[str]) -> None:
    assert names(table, NodeResourcesFit().filter(pod, table)) == expected


def test_share_needs_one_device_with_enough_free(table: NodeTable) -> None:
    # gpu-2-t4 has 400 + 1000 free: 1,400 in total but a 1-device share of 1000 only fits device 1.
    table.allocate(Pod("fill", 0, 0, gpu=GpuRequest(1, 1000)), 2)
    pod = Pod("share-500", 0, 0, gpu=GpuRequest(1, 500))
    assert "gpu-2-t4" not in names(table, NodeResourcesFit().filter(pod, table))


@pytest.mark.parametrize(
    ("tolerations", "expected_tainted_ok"),
    [
        ((), False),
        ((Toleration("dedicated"),), True),
        ((Toleration("dedicated", "ml"),), True),
        ((Toleration("dedicated", "web"),), False),
        ((Toleration("dedicated", None, TaintEffect.NO_EXECUTE),), False),
    ],
)
def test_taint_toleration(table: NodeTable, tolerations: tuple[Toleration, ...], expected_tainted_ok: bool) -> None:
    got = names(table, TaintToleration().filter(Pod("p", 1, 1, tolerations=tolerations), table))
    assert ("tainted" in got) is expected_tainted_ok
    assert "soft-taint" in got  # PreferNoSchedule never filters


def test_node_affinity_and_arch(table: NodeTable) -> None:
    assert names(table, NodeAffinity().filter(Pod("p", 1, 1, node_selector={"zone": "edge"}), table)) == {"gpu-2-t4"}
    assert names(table, NodeArch().filter(Pod("p", 1, 1, archs=frozenset({Arch.ARM64})), table)) == {"gpu-2-t4"}
    assert len(names(table, NodeArch().filter(Pod("p", 1, 1), table))) == len(NODES)


def test_max_per_node(table: NodeTable) -> None:
    pod = Pod("r1", 100, 100, workload="app", max_per_node=2)
    table.allocate(pod, 1)
    assert "gpu-8" in names(table, MaxPerNode().filter(pod, table))
    table.allocate(pod, 1)
    assert "gpu-8" not in names(table, MaxPerNode().filter(pod, table))
