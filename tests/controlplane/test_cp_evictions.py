"""A returning cluster's stale copy is retired by evictions that respect its PodDisruptionBudgets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.registry import BackendKind, ClusterSpec, Placement, PlacementState
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Template, Workload
from cp_kmock import DEPLOYMENTS, NODES, PDBS, PODS, KubeDouble, kube_double
from fedcore.backends.kubernetes import KubernetesCluster
from fedcore.kubeobjects import EPOCH_ANNOTATION, WORKLOAD_LABEL


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with kube_double(controllers=True) as d:
        d.put(NODES, None, "n0", {"status": {"allocatable": {"cpu": "8", "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}})
        yield d


def pod(name: str, epoch: int) -> dict[str, object]:
    return {"metadata": {"labels": {WORKLOAD_LABEL: "web"}, "annotations": {EPOCH_ANNOTATION: str(epoch)}, "uid": name},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_stale_pods_are_evicted_once_their_budget_allows_and_newer_ones_stay(tmp_path: Path, double: KubeDouble) -> None:
    now = [0.0]
    backends = Backends(lambda: now[0])
    backends.by_name["k"] = KubernetesCluster("k", double.client())
    plane = ControlPlane(tmp_path / "cp.db", backends, lambda: now[0])
    try:
        plane.register_cluster(ClusterSpec("k", "r0", BackendKind.KUBERNETES, kube_context="kmock"))
        plane.registry.put_workload(Workload("web", 2, Template(100, 128)))
        plane.registry.set_placement(Placement("web", "k", 0, 1, PlacementState.STALE))  # failed away from while k was dark
        double.put(DEPLOYMENTS, "default", "web", {"spec": {"replicas": 2, "template": {"metadata": {"labels": {WORKLOAD_LABEL: "web"}}}}})
        for name in ("web-a", "web-b"):
            double.put(PODS, "default", name, pod(name, 1))
        double.put(PODS, "default", "web-new", pod("web-new", 2))  # a newer copy placed here since: not ours to stop
        double.put(PDBS, "default", "web", {"spec": {"minAvailable": 3, "selector": {"matchLabels": {WORKLOAD_LABEL: "web"}}}})
        plane.tick(now[0])
        assert double.get(DEPLOYMENTS, "default", "web") is None, "the Deployment went first, orphaning its pods"
        assert {p["metadata"]["name"] for p in double.items(PODS)} == {"web-a", "web-b", "web-new"}, "the budget held them"
        assert [p.state for p in plane.registry.placements("web")] == [PlacementState.STALE]
        sample = plane.metrics.registry.get_sample_value
        assert sample("fedplane_evictions_blocked_total", {"cluster": "k"}) == 2
        double.put(PDBS, "default", "web", {"spec": {"maxUnavailable": 1, "selector": {"matchLabels": {WORKLOAD_LABEL: "web"}}}})
        now[0] += 0.2
        plane.tick(now[0])
        assert {p["metadata"]["name"] for p in double.items(PODS)} == {"web-new"}
        assert plane.registry.placements("web") == []
        assert sample("fedplane_evictions_requested_total", {"cluster": "k"}) == 2, "each pod asked for once"
        assert sample("fedplane_evictions_done_total", {"cluster": "k", "outcome": "evicted"}) == 2
    finally:
        plane.close()
