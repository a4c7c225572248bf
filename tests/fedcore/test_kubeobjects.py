"""The one Kubernetes object model both adapters read pods and nodes with."""

from __future__ import annotations

from typing import Any

import pytest

from fedcore.kubeobjects import (
    EPOCH_ANNOTATION, KubeObjectError, Requests, cpu_milli, effective_requests, memory_mib, pod_archs, quantity,
    read_node, read_pod, room_problem,
)
from fedcore.nodes import Arch, TaintEffect
from kube_nodes import REAL_NODES


@pytest.mark.parametrize(("text", "milli"), [
    ("500m", 500), ("2", 2000), ("1.5", 1500), (1.5, 1500), ("0.0001", 1), ("1e3", 1_000_000), ("100u", 1), ("2k", 2_000_000),
])
def test_cpu_quantities_round_requests_up(text: Any, milli: int) -> None:
    assert cpu_milli(text) == milli


@pytest.mark.parametrize(("text", "mib"), [
    ("1Gi", 1024), ("512Mi", 512), (str(2**20), 1), ("1Ti", 1024**2), ("1T", 953_675), ("1Ei", 2**40), ("128974848", 123),
    ("129e6", 124), ("1M", 1), ("1500k", 2),
])
def test_memory_quantities_every_suffix(text: str, mib: int) -> None:
    assert memory_mib(text) == mib


def test_capacities_round_down() -> None:
    assert memory_mib("1500k", up=False) == 1 and cpu_milli("0.0001", up=False) == 0
    assert quantity("2E") == 2 * 10**18 and quantity("1E3") == 1000  # exa vs an exponent


@pytest.mark.parametrize("bad", ["", "abc", "1Qi", "--1", "1..2", "-1", "1 Gi", "Gi", "1e", "nan", "inf"])
def test_malformed_quantities_name_the_input(bad: str) -> None:
    with pytest.raises(KubeObjectError, match="quantity"):
        quantity(bad)


def container(name: str, cpu: str = "0", memory: str = "0", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}, **extra}


def test_effective_request_as_kube_scheduler_computes_it() -> None:
    spec = {
        "containers": [container("app", "500m", "256Mi"), container("log", "100m", "64Mi")],
        "initContainers": [
            container("migrate", "2", "128Mi"),                              # alone: 2 CPU
            container("proxy", "200m", "32Mi", restartPolicy="Always"),      # a sidecar: runs with everything after
            container("warm", "1", "1Gi"),                                   # with the proxy: 1.2 CPU, 1056 MiB
        ],
        "overhead": {"cpu": "50m", "memory": "10Mi"},
    }
    # regular + sidecar = 800m / 352Mi; init peak = max(2000m, 1200m) / max(128, 32, 1056) MiB; plus overhead
    assert effective_requests(spec) == Requests(2000 + 50, 1056 + 10, 0)


def test_limits_stand_in_for_missing_requests_and_gpus_are_whole() -> None:
    spec = {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}}}]}
    assert effective_requests(spec) == Requests(1000, 1024, 2)
    with pytest.raises(KubeObjectError, match="whole number"):
        effective_requests({"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "0.5"}}}]})


def affinity(*terms: list[tuple[str, list[str]]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": op, "values": values} for op, values in term]}
        for term in terms]}}}


def test_archs_from_node_selector_and_required_affinity() -> None:
    assert pod_archs({}) == frozenset()
    assert pod_archs({"nodeSelector": {"kubernetes.io/arch": "arm"}}) == {Arch.ARMV7}
    assert pod_archs({"affinity": affinity([("In", ["arm64", "amd64"])])}) == {Arch.ARM64, Arch.AMD64}
    assert pod_archs({"affinity": affinity([("NotIn", ["amd64"])])}) == {Arch.ARM64, Arch.ARMV7}
    assert pod_archs({"affinity": affinity([("In", ["arm64"])], [("In", ["arm"])])}) == {Arch.ARM64, Arch.ARMV7}  # ORed
    both = {"nodeSelector": {"kubernetes.io/arch": "arm64"}, "affinity": affinity([("In", ["arm64", "amd64"])])}
    assert pod_archs(both) == {Arch.ARM64}
    with pytest.raises(KubeObjectError, match="s390x"):
        pod_archs({"nodeSelector": {"kubernetes.io/arch": "s390x"}})


def test_pod_reads_epoch_tolerations_and_refuses_a_bad_epoch() -> None:
    obj = {"metadata": {"name": "p", "namespace": "ns", "annotations": {EPOCH_ANNOTATION: "4"},
                        "labels": {"fedplane.io/workload": "web"}},
           "spec": {"schedulerName": "fedplane", "nodeName": "n1", "containers": [container("a", "1", "1Gi")],
                    "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"},
                                    {"key": "zone", "operator": "Equal", "value": "a"}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    pod = read_pod(obj)
    assert (pod.key, pod.workload, pod.epoch, pod.node, pod.ready, pod.phase) == ("ns/p", "web", 4, "n1", True, "Running")
    assert [(t.key, t.value, t.effect) for t in pod.tolerations] == [("edge", None, TaintEffect.NO_SCHEDULE), ("zone", "a", None)]
    assert pod.to_pod().request.cpu_milli == 1000
    obj["metadata"]["annotations"][EPOCH_ANNOTATION] = "two"
    with pytest.raises(KubeObjectError, match="pod ns/p.*epoch"):
        read_pod(obj)


def test_nodes_shaped_like_real_clusters_are_mapped_or_flagged_never_raised() -> None:
    read = {n["metadata"]["name"]: read_node(n) for n in REAL_NODES}
    eks = read["ip-10-0-1-7.ec2.internal"]
    assert (eks.arch, eks.capacity.cpu_milli, eks.capacity.memory_mib, eks.problem) == (Arch.AMD64, 3920, 14723, "")
    assert read["gke-arm-pool-1"].arch is Arch.ARM64 and read["gke-arm-pool-1"].taints[0].effect is TaintEffect.NO_SCHEDULE
    assert read["pi-4"].arch is Arch.ARMV7 and read["pi-4"].to_node().arch is Arch.ARMV7
    assert read["gpu-a100-0"].to_node().gpus == 8 and read["gpu-a100-0"].capacity.memory_mib == 1536 * 1024
    assert "windows" in read["akswin000000"].problem
    assert "s390x" in read["mainframe"].problem and read["mainframe"].arch is None
    assert "no allocatable" in read["fresh"].problem
    assert "four" in read["typo"].problem
    for name in ("akswin000000", "mainframe", "fresh", "typo"):
        with pytest.raises(KubeObjectError, match=name):
            read[name].to_node()


def batch_container(cpu: Any, memory: Any) -> dict[str, Any]:
    wanted = {"kubernetes.io/batch-cpu": cpu, "kubernetes.io/batch-memory": memory}
    return {"name": "b", "image": "x", "resources": {"requests": wanted, "limits": wanted}}


def test_batch_resources_count_as_cpu_and_memory_with_their_part_kept() -> None:
    """Koordinator's batch-cpu is millicores, batch-memory bytes (rounded up to MiB): a batch pod's real size."""
    spec = {"containers": [batch_container("1500", str(2**30 + 1)), container("side", "100m", "64Mi")]}
    assert effective_requests(spec) == Requests(1500 + 100, 1025 + 64, 0, 1500, 1025)
    assert effective_requests(spec).regular == (100, 64)


@pytest.mark.parametrize(("cpu", "memory", "error"), [
    ("1.5", "0", "batch-cpu must be a whole number"), ("500m", "0", "batch-cpu must be a whole number"),
    ("-1", "0", "quantity"), ("1e400", "0", "over the largest"), ("0", "1Gi.5", "quantity"), ("0", "0.5", "batch-memory must be a whole"),
    ([1], "0", "quantity"),
])
def test_hostile_batch_quantities_name_the_pod_and_resource(cpu: Any, memory: Any, error: str) -> None:
    pod = {"metadata": {"name": "b-0", "namespace": "default"}, "spec": {"containers": [batch_container(cpu, memory)]}}
    with pytest.raises(KubeObjectError, match=f"pod default/b-0 container b: .*{error}"):
        read_pod(pod)


def test_room_holds_batch_resources_against_the_nodes_batch_capacity_as_the_kubelet_does() -> None:
    node = read_node({"metadata": {"name": "n"}, "status": {"allocatable": {
        "cpu": "4", "memory": "8Gi", "kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": str(8 * 2**30)}}})
    assert (node.batch.batch_cpu_milli, node.batch.batch_memory_mib) == (5000, 8192)
    online = {"metadata": {"name": "web"}, "spec": {"containers": [container("c", "4", "1Gi")]}}
    batch = {"metadata": {"name": "b1"}, "spec": {"containers": [batch_container("3000", str(2**30))]}}
    wants = effective_requests({"containers": [batch_container("2500", str(2**30))]})
    assert room_problem(node, [online], wants, "b2") == "", "online pods hold cpu, not batch-cpu"
    assert "kubernetes.io/batch-cpu: needs 2500m, free 2000m" in room_problem(node, [online, batch], wants, "b2")
    assert "cpu: needs" in room_problem(node, [online, batch], effective_requests({"containers": [container("c", "1")]}), "web2")
    bare = read_node({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}})
    assert "kubernetes.io/batch-cpu: needs 2500m, free 0m" in room_problem(bare, [], wants, "b2"), "nothing advertised: refused"
