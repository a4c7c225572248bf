"""One contract suite for every cluster back end: the twin, Kubernetes over HTTP against the kmock
API double, and (opt-in, when KUBECONFIG is set) a real Kubernetes cluster.

Each back end comes with a harness that can make pending pods appear for a workload (the twin's
own controller does it; against kmock the harness plays the ReplicaSet controller) and break the
API server, so the same assertions run everywhere.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from cp_kmock import NODES, PODS, KubeDouble, kube_double
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend
from fedcore.backends.kubernetes import KubernetesCluster
from fedcore.backends.model import BindOutcome, EventKind, Phase, WorkloadSpec
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedcore.kubeobjects import EPOCH_ANNOTATION, WORKLOAD_LABEL


class Harness(Protocol):
    backend: ClusterBackend
    can_fabricate: bool

    def pending_pods(self, spec: WorkloadSpec) -> list[str]: ...

    def break_api(self, status: int) -> None: ...


class TwinHarness:
    can_fabricate = True

    def __init__(self) -> None:
        self.backend = TwinCluster("twin-a", make_nodes("twin-a", "r0", 2, 4000, 8192), clock=lambda: 0.0, binder=Binder.EXTERNAL)

    def pending_pods(self, spec: WorkloadSpec) -> list[str]:
        return sorted(p.name for p in self.backend.list_pods(spec.name))

    def break_api(self, status: int) -> None:
        self.backend.partition()


class KmockHarness:
    can_fabricate = True

    def __init__(self, double: KubeDouble) -> None:
        self.double = double
        self.backend = KubernetesCluster("kube-a", double.client())
        for i in range(2):
            double.put(NODES, None, f"kube-a-n{i}", {
                "metadata": {"labels": {"kubernetes.io/arch": "amd64"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}, "conditions": [{"type": "Ready", "status": "True"}]},
            })

    def pending_pods(self, spec: WorkloadSpec) -> list[str]:
        """Play the ReplicaSet controller: one pending pod per replica, labelled and annotated."""
        names = []
        for i in range(spec.replicas):
            name = f"{spec.name}-{i}"
            self.double.put(PODS, "default", name, {
                "metadata": {"labels": {WORKLOAD_LABEL: spec.name}, "annotations": {EPOCH_ANNOTATION: str(spec.epoch)}},
                "spec": {"schedulerName": "fedplane", "containers": [{"name": "main", "image": spec.image,
                         "resources": {"requests": {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}}}]},
                "status": {"phase": "Pending"},
            })
            names.append(name)
        return names

    def break_api(self, status: int) -> None:
        self.double.fail(1000, status)


class RealHarness:
    """A real cluster: no fabricated pods (its controllers make them; binding needs a fedplane scheduler)."""

    can_fabricate = False

    def __init__(self) -> None:
        import kubernetes

        _contexts, active = kubernetes.config.list_kube_config_contexts()
        ns = os.environ.get("FEDPLANE_TEST_NAMESPACE", "default")
        self.backend = KubernetesCluster.from_kubeconfig(active["name"], namespace=ns, name="real")

    def pending_pods(self, spec: WorkloadSpec) -> list[str]:
        raise NotImplementedError

    def break_api(self, status: int) -> None:
        raise NotImplementedError


@pytest.fixture(scope="module")
def double() -> Iterator[KubeDouble]:
    with kube_double() as d:
        yield d


BACKENDS = ["twin", "kmock", pytest.param("real", marks=pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="opt-in: set KUBECONFIG to run the contract against a real cluster"))]
names = (f"w{i}" for i in itertools.count())


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "twin":
        yield TwinHarness()
    elif request.param == "kmock":
        d: KubeDouble = request.getfixturevalue("double")
        d.fail(0)
        yield KmockHarness(d)
        d.fail(0)
    else:
        h = RealHarness()
        yield h


def spec(replicas: int = 2, epoch: int = 1) -> WorkloadSpec:
    return WorkloadSpec(next(names), replicas, 250, 256, epoch=epoch)


class TestClusterBackendContract:
    def test_workload_lifecycle(self, harness: Harness) -> None:
        b, s = harness.backend, spec(replicas=2, epoch=3)
        created = b.create_workload(s)
        assert (created.spec.name, created.spec.replicas, created.spec.epoch) == (s.name, 2, 3)
        got = b.get_workload(s.name)
        assert (got.spec.cpu_milli, got.spec.memory_mib, got.spec.epoch) == (250, 256, 3)
        assert s.name in [w.spec.name for w in b.list_workloads()]
        assert b.scale_workload(s.name, 4).spec.replicas == 4
        assert b.get_workload(s.name).spec.replicas == 4
        b.delete_workload(s.name)
        with pytest.raises(errors.NotFound):
            b.get_workload(s.name)
        assert s.name not in [w.spec.name for w in b.list_workloads()]
        b_created_again = b.create_workload(s)  # a deleted name can be reused
        assert b_created_again.spec.name == s.name
        b.delete_workload(s.name)

    def test_create_twice_is_a_conflict_and_delete_twice_not_found(self, harness: Harness) -> None:
        b, s = harness.backend, spec()
        b.create_workload(s)
        with pytest.raises(errors.Conflict) as conflict:
            b.create_workload(s)
        assert conflict.value.temporary
        b.delete_workload(s.name)
        with pytest.raises(errors.NotFound) as missing:
            b.delete_workload(s.name)
        assert not missing.value.temporary

    def test_nodes_report_capacity_and_readiness(self, harness: Harness) -> None:
        nodes = harness.backend.list_nodes()
        assert nodes and all(n.capacity.cpu_milli > 0 and n.capacity.memory_mib > 0 for n in nodes)
        if harness.can_fabricate:
            assert sorted((n.capacity.cpu_milli, n.capacity.memory_mib, n.ready) for n in nodes) == [(4000, 8192, True)] * 2

    def test_pods_are_listed_per_workload_with_epoch(self, harness: Harness) -> None:
        if not harness.can_fabricate:
            pytest.skip("needs fabricated pods")
        b, s, other = harness.backend, spec(replicas=2, epoch=5), spec(replicas=1)
        b.create_workload(s)
        b.create_workload(other)
        names_ = harness.pending_pods(s)
        harness.pending_pods(other)
        pods = b.list_pods(s.name)
        assert sorted(p.name for p in pods) == names_
        assert all(p.workload == s.name and p.epoch == 5 and p.phase is Phase.PENDING and not p.node for p in pods)
        assert {p.workload for p in b.list_pods()} >= {s.name, other.name}

    def test_pods_and_nodes_carry_their_scheduling_spec(self, harness: Harness) -> None:
        """The plane weighs taints, selectors and devices with the scheduler's filters (controlplane.colocating)."""
        nodes = harness.backend.list_nodes()
        assert all(n.spec is not None and (n.spec.name, n.spec.cpu_milli) == (n.name, n.capacity.cpu_milli) for n in nodes)
        if not harness.can_fabricate:
            return
        s = spec(replicas=1)
        harness.backend.create_workload(s)
        harness.pending_pods(s)
        pods = harness.backend.list_pods(s.name)
        assert pods and all(p.spec is not None and (p.spec.cpu_milli, p.spec.memory_mib) == (250, 256) for p in pods)

    def test_bind_is_fenced_by_epoch(self, harness: Harness) -> None:
        if not harness.can_fabricate:
            pytest.skip("needs fabricated pods")
        b, s = harness.backend, spec(replicas=1, epoch=2)
        b.create_workload(s)
        pod = harness.pending_pods(s)[0]
        node_a, node_b = sorted(n.name for n in b.list_nodes())
        assert b.bind_pod(pod, node_a, 1).outcome is BindOutcome.STALE_EPOCH
        first = b.bind_pod(pod, node_a, 2)
        assert first.ok and first.outcome is BindOutcome.BOUND
        again = b.bind_pod(pod, node_a, 2)
        assert again.ok and again.outcome is BindOutcome.ALREADY_BOUND
        dup = b.bind_pod(pod, node_b, 2)
        assert not dup.ok and dup.outcome is BindOutcome.DUPLICATE and dup.node == node_a
        assert [p.node for p in b.list_pods(s.name)] == [node_a]

    def test_watch_starts_with_current_pods(self, harness: Harness) -> None:
        if not harness.can_fabricate:
            pytest.skip("needs fabricated pods")
        b, s = harness.backend, spec(replicas=2)
        b.create_workload(s)
        wanted = set(harness.pending_pods(s))
        seen: set[str] = set()
        for event in b.watch_pods(timeout_s=1.0):
            assert event.kind in (EventKind.ADDED, EventKind.MODIFIED)
            seen.add(event.pod.name)
            if wanted <= seen:
                break
        assert wanted <= seen

    def test_missing_objects_are_not_found(self, harness: Harness) -> None:
        with pytest.raises(errors.NotFound):
            harness.backend.get_workload("does-not-exist")
        with pytest.raises(errors.NotFound):
            harness.backend.scale_workload("does-not-exist", 2)

    def test_broken_api_is_a_temporary_error(self, harness: Harness) -> None:
        if not harness.can_fabricate:
            pytest.skip("cannot break a real API server")
        harness.break_api(503)
        with pytest.raises(errors.TemporaryError):
            harness.backend.list_nodes()
        with pytest.raises(errors.TemporaryError):
            harness.backend.create_workload(spec())


@pytest.mark.parametrize("bad", [
    dict(name="Bad_Name", replicas=1, cpu_milli=1, memory_mib=1),
    dict(name="ok", replicas=-1, cpu_milli=1, memory_mib=1),
    dict(name="ok", replicas=1, cpu_milli=-5, memory_mib=1),
    dict(name="ok", replicas=1, cpu_milli=1, memory_mib=1, epoch=0),
])
def test_invalid_manifest_is_refused_before_any_call(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="workload"):
        WorkloadSpec(**bad)


def test_kubernetes_maps_status_codes(double: KubeDouble) -> None:
    backend = KubernetesCluster("kube-b", double.client())
    for status, kind in ((409, errors.Conflict), (422, errors.InvalidRequest), (500, errors.ServerError), (404, errors.NotFound)):
        double.fail(1, status)
        with pytest.raises(kind):
            backend.list_nodes()
    double.fail(0)


def test_kubernetes_manifest_is_a_valid_deployment(double: KubeDouble) -> None:
    import kubernetes_validate

    backend = KubernetesCluster("kube-c", double.client())
    manifest = backend.manifest(WorkloadSpec("web", 3, 500, 1024, gpus=1, epoch=7, scheduler_name="fedplane",
                                             archs=("arm64",), tolerations=(("edge", "", "NoSchedule"),)))
    kubernetes_validate.validate(manifest, "1.30", strict=True)
    template = manifest["spec"]["template"]
    assert template["metadata"]["annotations"][EPOCH_ANNOTATION] == "7"
    assert template["spec"]["schedulerName"] == "fedplane"
    assert template["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1024Mi", "nvidia.com/gpu": "1"}


def qos_class(container: dict[str, Any]) -> str:
    """kubelet's QoS rule (only ``cpu`` and ``memory`` count): none asked is BestEffort."""
    resources = container.get("resources") or {}
    asked = {k for part in ("requests", "limits") for k in (resources.get(part) or {}) if k in ("cpu", "memory")}
    return "BestEffort" if not asked else "Burstable or Guaranteed"


def test_kubernetes_batch_workload_asks_batch_resources_runs_best_effort_and_reads_back_the_same(double: KubeDouble) -> None:
    import kubernetes_validate

    backend = KubernetesCluster("kube-e", double.client())
    sent = WorkloadSpec("train", 2, 1500, 3000, gpus=1, epoch=4, scheduler_name="fedplane", qos="batch")
    manifest = backend.manifest(sent)
    kubernetes_validate.validate(manifest, "1.30", strict=True)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    asked = {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": str(3000 * 2**20), "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": asked, "limits": asked}
    assert qos_class(container) == "BestEffort"
    assert manifest["spec"]["template"]["spec"]["priorityClassName"] == "fedplane-batch"
    assert backend._workload(manifest).spec == sent
    online = backend.manifest(dataclasses.replace(sent, qos="online"))["spec"]["template"]["spec"]["containers"][0]
    assert qos_class(online) != "BestEffort" and backend._workload(backend.manifest(dataclasses.replace(sent, qos="online"))).spec.qos == "online"


def test_unreachable_api_server_is_unreachable() -> None:
    import kubernetes

    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: nothing listens
    cfg.retries = False
    backend = KubernetesCluster("kube-d", kubernetes.client.ApiClient(cfg))
    with pytest.raises(errors.Unreachable, match="unreachable"):
        backend.list_nodes()


def test_unknown_kube_context_is_a_clear_error(tmp_path: Any) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: a, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: east, context: {cluster: a, user: u}}]\ncurrent-context: east\n"
    )
    with pytest.raises(errors.UnknownCluster, match="no context 'west'"):
        KubernetesCluster.from_kubeconfig("west", str(cfg))
    assert KubernetesCluster.from_kubeconfig("east", str(cfg)).name == "east"
