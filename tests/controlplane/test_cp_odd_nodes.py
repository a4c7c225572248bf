"""The control plane keeps ticking over nodes shaped like real clusters' (arm, arm64, amd64, Windows, GPUs,
unknown arch labels, malformed or missing allocatable), read through the Kubernetes adapter over HTTP."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.registry import BackendKind, ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Template, Workload
from cp_kmock import NODES, KubeDouble, kube_double
from fedcore.backends.kubernetes import KubernetesCluster
from kube_nodes import REAL_NODES


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with kube_double() as d:
        for n in REAL_NODES:
            d.put(NODES, None, n["metadata"]["name"], copy.deepcopy(n))
        yield d


def test_odd_nodes_are_mapped_or_skipped_with_a_metric_and_the_tick_goes_on(tmp_path: Path, double: KubeDouble,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    backends = Backends(lambda: now[0])
    backends.by_name["real"] = KubernetesCluster("real", double.client())
    plane = ControlPlane(tmp_path / "cp.db", backends, lambda: now[0])
    try:
        plane.register_cluster(ClusterSpec("real", "r0", BackendKind.KUBERNETES, kube_context="kmock"))
        for _ in range(3):
            plane.tick(now[0])
            now[0] += 0.2
        (view,) = plane.views()
        assert sorted(view.pools) == ["amd64", "arm64", "armv7"]
        assert view.pools["amd64"].cpu_milli == 3920 + 95000, "EKS node + GPU node; Windows, s390x, unreadable left out"
        assert view.pools["amd64"].gpu_milli == 8000
        skipped = plane.metrics.registry.get_sample_value("fedplane_cluster_nodes_skipped", {"cluster": "real"})
        assert skipped == 4
        warned = [r.getMessage() for r in caplog.records if "left out of placement" in r.getMessage()]
        assert len(warned) == 4, "one warning per node, not one per tick"
        pi = Workload("pi", 2, Template(500, 256, archs=("armv7",)))
        assert plane.submit(pi, dry_run=True).counts == {"real": 2}
    finally:
        plane.close()
