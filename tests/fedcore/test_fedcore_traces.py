"""Trace readers on small golden files, their error messages, and the openb protocol on the real trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.pods import QoS
from fedcore.resources import GpuRequest
from fedcore.traces import TraceError, dlrm, openb
from fedcore.twin import submission
from fedcore.twin.replay import Replay

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,0,\nn2,64000,131072,8,V100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "p0,4000,8192,1,500,,LS,Running,0,10,0\n"
    "p1,8000,16384,2,1000,,BE,Running,1,10,1\n"
    "p2,2000,4096,0,0,,Burstable,Running,2,10,2\n"
    "p3,2000,4096,1,1200,,Guaranteed,Running,2,10,2\n"
)
DLRM = (
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,"
    "memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
    "i0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n"
    "i1,CN,app_1,8,8,0,0,0,0,16.0,16.0,10,10,1,100,100,200\n"
    "i2,CN,app_1,8,8,0,0,0,0,16.0,16.0,10,10,1,50,50,\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_golden_openb(tmp_path: Path) -> None:
    nodes = openb.load_nodes(write(tmp_path, "nodes.csv", NODES), scale=2, clusters=2, regions=2)
    assert [n.name for n in nodes][:4] == ["n0-x0", "n1-x0", "n2-x0", "n0-x1"]
    assert {n.cluster for n in nodes} == {"c0", "c1"} and nodes[1].region == "r1"
    pods = openb.load_pods(write(tmp_path, "pods.csv", PODS))
    assert [p.gpu for p in pods] == [GpuRequest(1, 500), GpuRequest(2, 1000), GpuRequest(), GpuRequest(1, 1000)]
    result = submission.run(nodes, pods, "bestfit", seed=0, arrived_load=1.0)
    assert result.pods_submitted >= len(pods) and 0 < result.gpu_alloc_ratio <= 1


def test_five_column_openb_pod_list(tmp_path: Path) -> None:
    """Some official openb lists carry only name, cpu, memory and GPU columns: they read like the full shape."""
    five = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,1,500\np1,8000,16384,2,1000\np2,2000,4096,0,0\n"
    pods = openb.load_pods(write(tmp_path, "five.csv", five))
    full = openb.load_pods(write(tmp_path, "full.csv", PODS))
    assert [(p.uid, p.cpu_milli, p.memory_mib, p.gpu) for p in pods] == [(p.uid, p.cpu_milli, p.memory_mib, p.gpu) for p in full[:3]]
    assert {p.qos for p in pods} == {QoS.BEST_EFFORT}
    with pytest.raises(TraceError, match="header lacks column"):
        openb.load_pods(write(tmp_path, "four.csv", "name,cpu_milli,memory_mib,num_gpu\np0,1,1,0\n"))


def test_golden_dlrm_replay(tmp_path: Path) -> None:
    instances = dlrm.load(write(tmp_path, "dlrm.csv", DLRM))
    assert [i.pod.uid for i in instances] == ["i0", "i2", "i1"]  # sorted by creation; empty = from the start
    assert instances[0].pod.cpu_milli == 12000 and instances[0].pod.memory_mib == 120 * 1024
    assert instances[2].deleted == 200 and instances[1].deleted is None
    nodes = openb.load_nodes(write(tmp_path, "nodes.csv", NODES))
    replay = Replay(nodes, instances, "kube-default", samples=4)
    result = replay.run()
    # i1 and i2 share app_1 with max 1 per node: both run, on different nodes.
    assert result.unscheduled == 0 and result.events == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn0,1,1,0\n", "header lacks column(s) model"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,lots,1,0,\n", ":2: column 'cpu_milli' is not a number"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,\nn1,1,-5,0,\n", ":3: column 'memory_mib' must be a non-negative"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0\n", ":2: wrong number of fields"),
        ("sn,cpu_milli,memory_mib,gpu,model\n", "no nodes"),
    ],
)
def test_malformed_node_lists_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as err:
        openb.load_nodes(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_malformed_dlrm_rows(tmp_path: Path) -> None:
    bad = DLRM.replace("i1,CN,app_1,8", "i1,XX,app_1,8")
    with pytest.raises(TraceError, match=r"dlrm.csv:3: role must be CN or HN"):
        dlrm.load(write(tmp_path, "dlrm.csv", bad))
    with pytest.raises(TraceError, match="cannot read trace"):
        dlrm.load(tmp_path / "missing.csv")


def test_real_openb_protocol_fgd_beats_random(traces: Path) -> None:
    nodes = openb.load_nodes(traces / "alibaba-openb/openb_node_list_all_node.csv")
    pods = openb.load_pods(traces / "alibaba-openb/openb_pod_list_default.csv")
    assert len(nodes) == 1523 and len(submission.gpu_nodes(nodes)) == 1213 and len(pods) == 8152
    fgd = submission.run(nodes, pods, "fgd", seed=1, arrived_load=0.9)
    rnd = submission.run(nodes, pods, "random", seed=1, arrived_load=0.9)
    assert fgd.gpu_alloc_ratio > rnd.gpu_alloc_ratio
