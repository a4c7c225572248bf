"""Hostile and careless input, one case per class of issue #36, each asserting the exact outcome: the error it gets,
and that nothing changed.

Classes: trace readers (a byte-order mark, a node claiming a million GPUs, a pod list without GPU pods), the Kubernetes
object reader (never raises anything but its own error), the control plane's RPC bounds, re-registering a cluster,
autoscaling series (the server opens no path a client names; a bad series is refused on enable; one workload's failing
autoscaler stalls no other), and the lab's arguments (refused before anything starts).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore import kubeobjects
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.traces import TraceError, openb
from fedcore.twin import submission

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


# ---- trace readers -------------------------------------------------------------------------------


def test_a_byte_order_mark_opening_a_trace_is_read_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (NODE_HEADER + "n0,32000,65536,2,G2\n").encode())
    assert [(n.name, n.gpus) for n in openb.load_nodes(path)] == [("n0", 2)]


def test_a_node_with_a_million_gpus_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(NODE_HEADER + "n0,32000,65536,2,G2\nn1,32000,65536,1000000,G2\n")
    with pytest.raises(TraceError) as got:
        openb.load_nodes(path)
    assert str(got.value) == f"{path}:3: column 'gpu' is over {openb.MAX_GPUS} GPUs (the most a node holds here)"


@pytest.mark.parametrize(("cell", "why"), [("1.5", "must be a whole number of GPUs"), ("65", f"is over {openb.MAX_GPUS} GPUs")])
def test_a_pod_asking_for_a_fraction_of_devices_or_too_many_is_refused(tmp_path: Path, cell: str, why: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + f"p0,1000,1024,{cell},1000\n")
    with pytest.raises(TraceError, match=why) as got:
        openb.load_pods(path)
    assert str(got.value).startswith(f"{path}:2: column 'num_gpu'")


def test_the_openb_protocol_refuses_a_pod_list_without_gpu_pods_at_once() -> None:
    from fedcore.nodes import Node

    pods = [Pod(f"p{i}", 1000, 1024) for i in range(200)]
    with pytest.raises(ValueError, match="none of the 200 pods asks for a GPU"):
        submission.run([Node("n0", 32000, 65536, gpus=8)], pods, "fgd", 0)
    assert len(submission.workload([*pods, Pod("g", 1000, 1024, gpu=GpuRequest(1, 1000))], 0, 8000)) >= 200


# ---- the Kubernetes object reader ---------------------------------------------------------------------


def _pod(cpu: object = "1", epoch: object = "1", **spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "annotations": {kubeobjects.EPOCH_ANNOTATION: epoch}},
            "spec": {"containers": [{"resources": {"requests": {"cpu": cpu}}}], **spec}}


@pytest.mark.parametrize(("cpu", "why"), [
    ("1e999999999", "not a Kubernetes quantity: '1e999999999'"),
    ("1e400", "quantity '1e400' is over the largest Kubernetes keeps"),
    ("1e17", "cpu '1e17' is over the largest Kubernetes keeps"),
])
def test_a_pod_with_an_impossible_cpu_is_refused(cpu: str, why: str) -> None:
    with pytest.raises(kubeobjects.KubeObjectError) as got:
        kubeobjects.read_pod(_pod(cpu))
    assert str(got.value).startswith(f"pod default/p container 0: {why}")


@pytest.mark.parametrize("epoch", ["1_000", "٣", str(2**70), 2**70, "0", "-1", True, None, ["1"]])
def test_a_pod_with_an_epoch_that_is_not_plain_decimal_in_range_is_refused(epoch: object) -> None:
    with pytest.raises(kubeobjects.KubeObjectError, match=r"must be an integer in 1\.\.9223372036854775807"):
        kubeobjects.read_pod(_pod(epoch=epoch))


@pytest.mark.parametrize("obj", [
    {"metadata": {"name": "p", "labels": ["x"]}},
    {"metadata": {"name": "p"}, "spec": {"containers": {"c": 1}}},
    {"metadata": {"name": "p"}, "spec": "x"},
    {"metadata": {"name": "p"}, "spec": {"tolerations": "abc"}},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": ["cpu"]}}]}},
    {"metadata": {"name": "p"}, "spec": {"priority": 2**70}},
    {"metadata": ["p"]},
    {"metadata": {"name": 5}},
    ["not", "a", "pod"],
])
def test_a_pod_of_the_wrong_shape_is_a_kube_object_error_and_nothing_else(obj: object) -> None:
    with pytest.raises(kubeobjects.KubeObjectError):
        kubeobjects.read_pod(obj)  # type: ignore[arg-type]


@pytest.mark.parametrize(("obj", "problem"), [
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e999999999"}}}, "unreadable allocatable: not a Kubernetes quantity"),
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e400"}}}, "unreadable allocatable: quantity '1e400' is over"),
    ({"metadata": {"name": "n", "labels": "x"}}, "a field has the wrong shape"),
    ({"metadata": {"name": "n"}, "status": {"allocatable": ["cpu"]}}, "a field has the wrong shape"),
    ({"metadata": {"name": "n"}, "status": {"conditions": "x"}}, "a field has the wrong shape"),
    ({"metadata": "x"}, "a field has the wrong shape"),
])
def test_a_node_of_the_wrong_shape_comes_back_with_its_problem_never_an_exception(obj: dict[str, object], problem: str) -> None:
    node = kubeobjects.read_node(obj)
    assert node.problem.startswith(problem) and node.capacity.cpu_milli == 0
    with pytest.raises(kubeobjects.KubeObjectError):
        node.to_node()  # never placed on
