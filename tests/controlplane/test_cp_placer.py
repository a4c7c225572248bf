"""Per cluster, who binds the control plane's pods: its agents (schedulerName fedplane) or kube-scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane import convert
from controlplane.registry import BackendKind, ClusterSpec, Placer
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Policy, Template, Workload
from cp_kmock import DEPLOYMENTS, NODES, kube_double
from fedapi import controlplane_pb2 as cp
from fedcore.backends.kubernetes import KubernetesCluster


def test_placer_round_trips_and_defaults_to_the_agents() -> None:
    spec = ClusterSpec("k", "r0", BackendKind.KUBERNETES, kube_context="ctx", placer=Placer.KUBE_SCHEDULER)
    assert ClusterSpec.from_json(spec.to_json()) == spec
    assert convert.cluster_spec(convert.to_cluster_spec(spec)).placer is Placer.KUBE_SCHEDULER
    old = json.loads(spec.to_json())
    del old["placer"]  # a registry written before the field existed
    assert ClusterSpec.from_json(json.dumps(old)).placer is Placer.AGENTS
    assert convert.cluster_spec(cp.ClusterSpec(name="k", region="r0", backend=cp.BACKEND_TWIN)).placer is Placer.AGENTS
    with pytest.raises(ValueError, match="unknown placer 'robots'"):
        convert.cluster_spec(cp.ClusterSpec(name="k", region="r0", backend=cp.BACKEND_TWIN, placer="robots"))


def test_deployments_name_the_agents_scheduler_only_where_agents_place(tmp_path: Path) -> None:
    with kube_double() as a, kube_double() as b:
        backends = Backends(lambda: 0.0)
        for name, double in (("agents", a), ("kube", b)):
            double.put(NODES, None, f"{name}-n0", {"status": {"allocatable": {"cpu": "8", "memory": "16Gi"},
                                                              "conditions": [{"type": "Ready", "status": "True"}]}})
            backends.by_name[name] = KubernetesCluster(name, double.client())
        plane = ControlPlane(tmp_path / "cp.db", backends, lambda: 0.0)
        try:
            plane.register_cluster(ClusterSpec("agents", "r0", BackendKind.KUBERNETES, kube_context="a"))
            plane.register_cluster(ClusterSpec("kube", "r1", BackendKind.KUBERNETES, kube_context="b", placer=Placer.KUBE_SCHEDULER))
            plane.tick(0.0)
            for cluster in ("agents", "kube"):
                assert plane.submit(Workload(f"w-{cluster}", 1, Template(100, 128), Policy(clusters=(cluster,))), dry_run=False).ok
        finally:
            plane.close()
        ours = a.get(DEPLOYMENTS, "default", "w-agents")
        theirs = b.get(DEPLOYMENTS, "default", "w-kube")
        assert ours is not None and ours["spec"]["template"]["spec"]["schedulerName"] == "fedplane"
        assert theirs is not None and "schedulerName" not in theirs["spec"]["template"]["spec"]



def test_a_restore_recreates_with_the_agents_scheduler_and_the_priority(tmp_path: Path) -> None:
    """A workload the cluster lost is re-created by ``restore`` exactly as submitted: schedulerName and priority kept."""
    with kube_double() as a:
        backends = Backends(lambda: 0.0)
        a.put(NODES, None, "agents-n0", {"status": {"allocatable": {"cpu": "8", "memory": "16Gi"},
                                                    "conditions": [{"type": "Ready", "status": "True"}]}})
        backends.by_name["agents"] = cluster = KubernetesCluster("agents", a.client())
        plane = ControlPlane(tmp_path / "cp.db", backends, lambda: 0.0)
        try:
            plane.register_cluster(ClusterSpec("agents", "r0", BackendKind.KUBERNETES, kube_context="a"))
            plane.tick(0.0)
            assert plane.submit(Workload("w", 2, Template(100, 128, priority=7), Policy(clusters=("agents",))), dry_run=False).ok
            first = a.get(DEPLOYMENTS, "default", "w")
            cluster.delete_workload("w")  # the cluster lost it (a reset, a take-over finding it gone)
            assert any("re-created" in line for line in plane.restore(1.0))
            again = cluster.get_workload("w").spec
        finally:
            plane.close()
    assert first is not None and first["spec"]["template"]["spec"]["schedulerName"] == "fedplane"
    assert again.scheduler_name == "fedplane" and again.priority == 7 and again.epoch == 2


def test_every_template_field_reaches_the_cluster_spec() -> None:
    """A field added to the pod template but not carried to the back ends' spec fails here (the restore bug's class)."""
    import dataclasses

    template = Template(250, 512, gpus=1, gpu_model="A100", archs=("arm64",), tolerations=(("k", "v", "NoSchedule"),),
                        node_selector={"zone": "a"}, priority=9, image="example/app:1")
    spec = Workload("w", 3, template).spec(3, 4, scheduler_name="fedplane")
    for f in dataclasses.fields(Template):
        assert getattr(spec, f.name) == getattr(template, f.name), f.name
    assert (spec.replicas, spec.epoch, spec.scheduler_name) == (3, 4, "fedplane")
