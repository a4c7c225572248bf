"""The agent's view of twin-link messages: the harness's protobufs round-trip, garbage is refused."""

from __future__ import annotations

from typing import Any

import pytest

from edgeagent import linkcodec
from edgeagent.clusters import (
    BindOutcome,
    BindResult,
    ClusterUnavailable,
    Phase,
    PodUpdate,
)
from fedplane.lab.doubles.linkharness import node_to_pb, result_to_pb, update_to_pb
from fedapi import twincluster_pb2 as pb
from fedapi.linkserver import to_wire
from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, Toleration
from fedcore.resources import GpuRequest

POD = Pod("p1", 1500, 2048, disk_mib=10, gpu=GpuRequest(1, 500), gpu_model="V100", priority=3,
          archs=frozenset({Arch.ARM64}), node_selector={"zone": "z1"}, max_per_node=2,
          tolerations=(Toleration("edge", None, TaintEffect.NO_SCHEDULE),), workload="w")
NODE = Node("n1", 8000, 16384, gpus=2, gpu_model="V100", arch=Arch.ARM64, labels={"zone": "z1"},
            taints=(Taint("edge", "yes", TaintEffect.NO_SCHEDULE),))


def test_enum_numbers_are_the_protos() -> None:
    assert {n: p.name for n, p in linkcodec.PHASES.items()} == {
        pb.POD_PENDING: "PENDING", pb.POD_RUNNING: "RUNNING", pb.POD_SUCCEEDED: "SUCCEEDED", pb.POD_FAILED: "FAILED"}
    assert linkcodec.EVENT_DELETED == pb.EVENT_DELETED
    assert {n: o.name for n, o in linkcodec.OUTCOMES.items()} == {
        pb.BIND_BOUND: "BOUND", pb.BIND_ALREADY_BOUND: "ALREADY_BOUND", pb.BIND_STALE_EPOCH: "STALE_EPOCH",
        pb.BIND_DUPLICATE: "DUPLICATE", pb.BIND_REJECTED: "REJECTED"}


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.RUNNING, Phase.DELETED])
def test_pod_updates_round_trip(phase: Phase) -> None:
    update = PodUpdate(POD, 4, phase, "n1" if phase is Phase.RUNNING else "")
    assert linkcodec.update_from_wire(to_wire(update_to_pb(update))) == update


def test_nodes_and_bind_results_round_trip() -> None:
    assert linkcodec.node_from_wire(to_wire(node_to_pb(NODE))) == NODE
    assert linkcodec.node_from_wire(linkcodec.node_to_wire(NODE)) == NODE
    result = BindResult(BindOutcome.STALE_EPOCH, "n2", 7, "moved on")
    assert linkcodec.result_from_wire(to_wire(result_to_pb(result))) == result


def _pod_wire(**changes: Any) -> dict[str, Any]:
    wire = to_wire(update_to_pb(PodUpdate(POD, 4, Phase.PENDING, "")))
    for path, value in changes.items():
        where = wire
        *parents, leaf = path.split("__")
        for p in parents:
            where = where[p]
        where[leaf] = value
    return wire


@pytest.mark.parametrize("changes", [
    {"pod__requests__cpu_milli": "lots"}, {"pod__requests__cpu_milli": -5}, {"pod__epoch": 0},
    {"pod__epoch": 1.5}, {"pod__phase": 99}, {"pod__spec__archs": ["sparc"]}, {"pod__spec__gpu_milli_each": 1500},
    {"pod__spec__tolerations": [{"key": "k"}]}, {"pod__name": ""}, {"pod": None}, {"pod__node": 3},
])
def test_malformed_pods_are_a_failed_call(changes: dict[str, Any]) -> None:
    with pytest.raises(ClusterUnavailable, match="malformed"):
        linkcodec.update_from_wire(_pod_wire(**changes))


@pytest.mark.parametrize("wire", [{}, {"outcome": 9, "node": "", "epoch": 1, "reason": ""},
                                  {"outcome": 1, "node": None, "epoch": 1, "reason": ""}])
def test_malformed_bind_results_are_a_failed_call(wire: dict[str, Any]) -> None:
    with pytest.raises(ClusterUnavailable):
        linkcodec.result_from_wire(wire)


def test_malformed_nodes_are_a_failed_call() -> None:
    wire = linkcodec.node_to_wire(NODE)
    wire["capacity"]["cpu_milli"] = "8"
    with pytest.raises(ClusterUnavailable, match="malformed node"):
        linkcodec.node_from_wire(wire)
