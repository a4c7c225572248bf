"""A real control-plane process is killed (SIGKILL) in the middle of a migration and started again:
the journal resumes it, and the workload ends up exactly once, in the target.

Both member clusters are namespaces of one kmock API double (two kubeconfig contexts), so the
clusters outlive the control plane as real ones would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cp_kmock import DEPLOYMENTS, NODES, KubeDouble, kube_double
from cp_waiting import until
from fedapi import client, controlplane_pb2 as cp
from fedcore.loopback import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[KubeDouble, Path]]:
    with kube_double() as double:
        double.put(NODES, None, "n0", {"status": {"allocatable": {"cpu": "8", "memory": "16Gi"},
                                                  "conditions": [{"type": "Ready", "status": "True"}]}})
        config = tmp_path / "kubeconfig"
        contexts = "".join(f"- name: {c}\n  context: {{cluster: double, user: u, namespace: {c}}}\n" for c in ("east", "west"))
        config.write_text(
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster: {{server: '{double.url}'}}\n"
            f"users:\n- name: u\n  user: {{}}\ncontexts:\n{contexts}current-context: east\n"
        )
        yield double, config


def serve(db: Path, kubeconfig: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve", "--db", str(db),
         "--port", str(port), "--agent-port", "0", "--metrics-port", "-1", "--kubeconfig", str(kubeconfig), "--insecure"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "KUBECONFIG": ""},
    )


def test_sigkill_mid_migration_then_restart_resumes_exactly_once(kube: tuple[KubeDouble, Path], tmp_path: Path) -> None:
    double, kubeconfig = kube
    (port,) = free_ports(1)
    db = tmp_path / "cp.db"
    proc = serve(db, kubeconfig, port)
    conn = client.connect(f"127.0.0.1:{port}")
    try:
        until(lambda: sum(c.verdict.health == cp.HEALTH_HEALTHY for c in conn.control.ListClusters(cp.ListClustersRequest()).clusters) == 2,
              30, "both contexts healthy")
        spec = cp.WorkloadSpec(name="web", replicas=3, pod=cp.PodTemplate(cpu_milli=250, memory_mib=128),
                               policy=cp.PlacementPolicy(clusters=["east"]))
        assert conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec)).accepted
        assert double.get(DEPLOYMENTS, "east", "web") is not None
        conn.control.StartMigration(cp.StartMigrationRequest(workload="web", source="east", target="west", force=True))
        # kmock runs no controllers: the target never becomes ready on its own, so the migration waits
        # in TARGET_CREATED, where the process dies.
        until(lambda: double.get(DEPLOYMENTS, "west", "web"), 20, "target created")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

        proc = serve(db, kubeconfig, port)
        until(lambda: conn.control.ListMigrations(cp.ListMigrationsRequest()).migrations, 30, "restarted")
        target = double.get(DEPLOYMENTS, "west", "web")
        assert target is not None and target["spec"]["replicas"] == 3
        target["status"] = {"readyReplicas": 3}  # play the Deployment controller
        double.put(DEPLOYMENTS, "west", "web", target)
        done = until(lambda: [m for m in conn.control.ListMigrations(cp.ListMigrationsRequest()).migrations
                              if m.state == cp.MIGRATION_DONE], 30, "migration done")
        assert len(conn.control.ListMigrations(cp.ListMigrationsRequest()).migrations) == 1 and done[0].epoch == 2
        assert double.get(DEPLOYMENTS, "east", "web") is None
        final = double.get(DEPLOYMENTS, "west", "web")
        assert final is not None and final["metadata"]["annotations"]["fedplane.io/epoch"] == "2"
        placements = conn.control.GetPlacements(cp.GetPlacementsRequest(workload="web")).workloads[0].placements
        assert [(p.cluster, p.replicas, p.epoch) for p in placements] == [("west", 3, 2)]
    finally:
        conn.close()
        proc.terminate()
        proc.wait(10)
