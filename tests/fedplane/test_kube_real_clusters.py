"""Opt-in: the end-to-end scenario on real Kubernetes clusters (kind, k3d), as on the API doubles.

Set ``KUBECONFIG`` and ``FEDPLANE_KUBE_CONTEXTS`` (two or more contexts, comma-separated); see
README "Kubernetes end to end on kind or k3d". Each context is reached through a loopback TCP
gate that the scenario cuts to make that cluster dark; the agents run in this process, one per
schedulable node, and bind pods with ``schedulerName: fedplane`` through the real API server.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import pytest

CONTEXTS = [c for c in os.environ.get("FEDPLANE_KUBE_CONTEXTS", "").split(",") if c]
pytestmark = pytest.mark.integration


@pytest.mark.skipif(not os.environ.get("KUBECONFIG") or len(CONTEXTS) < 2,
                    reason="opt-in: set KUBECONFIG and FEDPLANE_KUBE_CONTEXTS=ctx-a,ctx-b (two or more real clusters)")
def test_the_scenario_on_real_clusters(tmp_path: Path) -> None:
    from fedplane.lab.benches.kubebench import KubeScenario, run_scenario
    from fedplane.lab.doubles.kubeclusters import RealCluster

    namespace = os.environ.get("FEDPLANE_TEST_NAMESPACE", "default")
    prefix = f"fp{secrets.token_hex(3)}-w"
    scenario = KubeScenario(clusters=len(CONTEXTS), pods=4, replicas=2, pod_cpu_milli=10, pod_memory_mib=16,
                            timeout_s=300, prefix=prefix)
    clusters = [RealCluster(f"c{i}", ctx, namespace=namespace) for i, ctx in enumerate(CONTEXTS)]
    try:
        f = asyncio.run(run_scenario(scenario, tmp_path, clusters))  # type: ignore[arg-type]
    finally:
        for i, ctx in enumerate(CONTEXTS):
            leftover = RealCluster(f"c{i}", ctx, namespace=namespace)
            leftover.remove_leftovers([f"{prefix}{k:03d}" for k in range(2)])
            leftover.close()
    assert f.pods == 4 and f.bound_by_agents == 4 and f.bound_by_other == 0
    assert f.lost == 0 and f.duplicated == 0
    assert f.evictions_requested >= 2 and f.evictions_done == f.evictions_requested
    assert f.stale_pods_left == 0


def test_the_real_cluster_path_through_its_tcp_gates_on_api_doubles(tmp_path: Path) -> None:
    """What the opt-in suite runs, minus TLS: kubeconfig contexts, the TCP gates that make a cluster dark,
    binders read from schedulerName, waits from the pods' timestamps; API doubles stand in for the clusters."""
    pytest.importorskip("kmock")
    from fedplane.lab.benches.kubebench import KubeScenario, _node, run_scenario
    from fedplane.lab.doubles.kubeclusters import RealCluster
    from fedplane.lab.doubles.kubedouble import NODES, kube_double

    scenario = KubeScenario(clusters=2, agents=2, pods=8, replicas=4, timeout_s=90)
    with kube_double(controllers=True) as a, kube_double(controllers=True) as b:
        lines = ["apiVersion: v1", "kind: Config", "users: [{name: u, user: {}}]", "clusters:"]
        lines += [f"- {{name: {n}, cluster: {{server: '{d.url}'}}}}" for n, d in (("a", a), ("b", b))]
        lines += ["contexts:"] + [f"- {{name: {n}, context: {{cluster: {n}, user: u}}}}" for n in ("a", "b")]
        lines += ["current-context: a"]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text("\n".join(lines) + "\n")
        for n, d in (("a", a), ("b", b)):
            for i in range(2):
                d.put(NODES, None, f"{n}-n{i}", _node(f"{n}-n{i}", scenario))
            d.put(NODES, None, f"{n}-control-plane", {**_node(f"{n}-control-plane", scenario), "spec": {
                "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}})
        clusters = [RealCluster(f"c{i}", ctx, str(kubeconfig)) for i, ctx in enumerate(("a", "b"))]
        assert clusters[0].nodes() == ["a-n0", "a-n1"], "no agent for a tainted control-plane node"
        f = asyncio.run(run_scenario(scenario, tmp_path, clusters))  # type: ignore[arg-type]
    assert f.pods == 8 and f.bound_by_agents == 8 and f.lost == 0 and f.duplicated == 0
    assert f.evictions_requested >= 4 and f.evictions_done == f.evictions_requested and f.stale_pods_left == 0
    assert 0 <= f.placed_s_p50 <= f.placed_s_p99 < 60, "waits read from creation and PodScheduled timestamps"
