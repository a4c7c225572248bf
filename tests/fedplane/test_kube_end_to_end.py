"""Kubernetes end to end on one API double per cluster: the control plane's workloads reach the agents.

The control plane creates Deployments whose pods carry ``schedulerName: fedplane``; the pods wait
pending until that cluster's agents claim and bind them; the control plane sees them ready; the
busiest cluster goes dark and its workloads fail over at a bumped epoch to the other cluster, whose
agents bind the replacements; when it returns, its stale pods are evicted through the Eviction API
(each workload has a PodDisruptionBudget there). Both Kubernetes adapters share each API server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from fedplane.lab.benches.kubebench import KubeScenario, run_scenario  # noqa: E402

pytestmark = pytest.mark.integration


def test_workloads_reach_the_agents_fail_over_and_stale_pods_are_evicted(tmp_path: Path) -> None:
    scenario = KubeScenario(clusters=2, agents=2, pods=20, replicas=5, timeout_s=90)
    f = asyncio.run(run_scenario(scenario, tmp_path))
    assert f.pods == 20 and f.bound_by_agents == 20 and f.bound_by_other == 0, "every running pod was bound by an agent"
    assert f.lost == 0 and f.duplicated == 0
    assert f.dark_cluster and f.detect_s > 0 and f.failover_recovery_s >= f.detect_s
    assert f.evictions_requested >= 5 and f.evictions_done == f.evictions_requested, "every stale pod was evicted"
    assert f.stale_pods_left == 0
    assert "tick_errors" not in f.phases, "no control-plane tick raised"
