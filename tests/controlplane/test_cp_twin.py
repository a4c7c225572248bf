"""The twin back end's own behaviour: readiness on an injected clock, faults, node loss with epoch bumps."""

from __future__ import annotations

import pytest

from fedcore.backends import errors
from fedcore.backends.model import BindOutcome, Phase, WorkloadSpec
from fedcore.backends.twin import Binder, TwinCluster, make_nodes


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def twin(binder: Binder = Binder.INTERNAL, nodes: int = 2) -> tuple[TwinCluster, Clock]:
    clock = Clock()
    return TwinCluster("t1", make_nodes("t1", "r0", nodes, 2000, 4096), clock, ready_delay_s=1.0, binder=binder), clock


def test_pods_become_ready_after_the_delay_on_the_injected_clock() -> None:
    t, clock = twin()
    t.create_workload(WorkloadSpec("web", 3, 500, 512))
    assert [p.phase for p in t.list_pods("web")] == [Phase.RUNNING] * 3
    assert t.get_workload("web").ready_replicas == 0
    clock.t = 0.99
    assert t.get_workload("web").ready_replicas == 0
    clock.t = 1.0
    assert t.get_workload("web").ready_replicas == 3


def test_internal_binder_never_overcommits_and_leaves_the_rest_pending() -> None:
    t, _ = twin()
    t.create_workload(WorkloadSpec("big", 6, 900, 512))  # 2 nodes x 2000m: two fit per node
    phases = sorted(p.phase.value for p in t.list_pods("big"))
    assert phases == ["Pending", "Pending", "Running", "Running", "Running", "Running"]
    t.scale_workload("big", 2)
    assert len(t.list_pods("big")) == 2


def test_outage_makes_the_api_unreachable_and_stops_pods() -> None:
    t, clock = twin()
    t.create_workload(WorkloadSpec("web", 2, 500, 512))
    t.outage()
    with pytest.raises(errors.Unreachable):
        t.list_pods()
    assert all(p.phase is Phase.PENDING and not p.node for p in t.snapshot())
    t.heal()
    clock.t = 5.0
    assert t.get_workload("web").ready_replicas == 0  # re-bound at t=5, ready at t=6
    clock.t = 6.0
    assert t.get_workload("web").ready_replicas == 2


def test_partition_keeps_pods_running_behind_an_unreachable_api() -> None:
    t, clock = twin()
    t.create_workload(WorkloadSpec("web", 2, 500, 512))
    clock.t = 2.0
    t.partition()
    with pytest.raises(errors.Unreachable):
        t.get_workload("web")
    assert all(p.ready for p in t.snapshot("web"))


def test_lost_node_frees_its_pods_with_a_bumped_epoch_and_fences_the_old_bind() -> None:
    t, _ = twin(Binder.EXTERNAL)
    t.create_workload(WorkloadSpec("web", 1, 500, 512, epoch=4))
    assert t.bind_pod("web-0", "t1-n0", 4).outcome is BindOutcome.BOUND
    cursor = t.cursor()
    assert t.mark_node("t1-n0", ready=False) == 1
    pod = t.list_pods("web")[0]
    assert (pod.epoch, pod.node, pod.phase) == (5, "", Phase.PENDING)
    events, _ = t.events_since(cursor)
    assert [(e.pod.name, e.pod.epoch, e.pod.phase) for e in events] == [("web-0", 5, Phase.PENDING)], "watchers hear of the unbind"
    assert t.bind_pod("web-0", "t1-n0", 4).outcome is BindOutcome.STALE_EPOCH  # the returning node cannot run it
    assert t.bind_pod("web-0", "t1-n0", 5).outcome is BindOutcome.REJECTED      # node not ready
    assert t.bind_pod("web-0", "t1-n1", 5).outcome is BindOutcome.BOUND
    assert t.safety.stale_binds == 1 and t.safety.duplicate_binds == 0


def test_duplicate_bind_is_refused_and_counted() -> None:
    t, _ = twin(Binder.EXTERNAL)
    t.create_workload(WorkloadSpec("web", 1, 500, 512))
    t.bind_pod("web-0", "t1-n0", 1)
    result = t.bind_pod("web-0", "t1-n1", 1)
    assert result.outcome is BindOutcome.DUPLICATE and result.node == "t1-n0"
    assert t.safety.duplicate_binds == 1


def test_bind_refusals_are_clear() -> None:
    t, _ = twin(Binder.EXTERNAL)
    t.create_workload(WorkloadSpec("web", 1, 500, 512))
    missing = t.bind_pod("nope", "t1-n0", 1)
    assert missing.outcome is BindOutcome.REJECTED and "pod nope" in missing.reason
    unknown = t.bind_pod("web-0", "t1-n9", 1)
    assert unknown.outcome is BindOutcome.REJECTED and "node t1-n9" in unknown.reason
    ahead = t.bind_pod("web-0", "t1-n0", 9)
    assert ahead.outcome is BindOutcome.STALE_EPOCH and ahead.epoch == 1
    too_big = t.create_workload(WorkloadSpec("huge", 1, 5000, 512))
    assert t.bind_pod("huge-0", "t1-n0", too_big.spec.epoch).outcome is BindOutcome.REJECTED


def test_completion_is_fenced_and_events_are_ordered() -> None:
    t, _ = twin(Binder.EXTERNAL)
    start = t.cursor()
    t.create_workload(WorkloadSpec("job", 1, 500, 512, epoch=2))
    t.bind_pod("job-0", "t1-n0", 2)
    assert t.complete_pod("job-0", 1, True).outcome is BindOutcome.STALE_EPOCH
    assert t.complete_pod("job-0", 2, True).ok
    events, _ = t.events_since(start)
    assert [(e.kind.value, e.pod.phase.value) for e in events] == [
        ("ADDED", "Pending"), ("MODIFIED", "Running"), ("MODIFIED", "Succeeded")]


def test_a_registered_twin_clusters_nodes_carry_the_gpus_its_capacity_names() -> None:
    """RegisterCluster's twin_node_capacity.gpu_milli gives every twin node whole GPUs (``bench agent`` places
    GPU pods on them); a registry row written before the field existed reads as GPU-less."""
    import json

    from controlplane import convert
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends
    from fedapi import common_pb2
    from fedapi import controlplane_pb2 as cp

    wire = cp.ClusterSpec(name="g", region="r0", backend=cp.BACKEND_TWIN, twin_nodes=2,
                          twin_node_capacity=common_pb2.ResourceVector(cpu_milli=96000, memory_mib=393216, gpu_milli=8000))
    spec = convert.cluster_spec(wire)
    assert spec.twin_gpus == 8 and convert.to_cluster_spec(spec).twin_node_capacity.gpu_milli == 8000
    twin = Backends(lambda: 0.0).ensure(spec)
    assert [twin.describe_node(f"g-n{i}").gpus for i in range(2)] == [8, 8]  # type: ignore[attr-defined]
    old = json.loads(spec.to_json())
    del old["twin_gpus"]
    assert ClusterSpec.from_json(json.dumps(old)).twin_gpus == 0
    with pytest.raises(ValueError, match="0..64 GPUs"):
        ClusterSpec("g", "r0", twin_gpus=1000)


def test_pod_names_are_never_reused_so_a_recreated_pod_is_a_new_pod_to_agents() -> None:
    """Agents key claims by pod name and a completed claim is over for good: a workload moved away and back
    (rebalance, then a failover into the same cluster) must come back under new names, as a ReplicaSet's do."""
    t, _ = twin(Binder.EXTERNAL)
    t.create_workload(WorkloadSpec("web", 3, 500, 512))
    assert sorted(p.name for p in t.list_pods("web")) == ["web-0", "web-1", "web-2"]
    t.scale_workload("web", 2)
    assert sorted(p.name for p in t.list_pods("web")) == ["web-0", "web-1"], "the newest pod goes first"
    t.scale_workload("web", 3)
    assert sorted(p.name for p in t.list_pods("web")) == ["web-0", "web-1", "web-3"]
    t.delete_workload("web")
    t.create_workload(WorkloadSpec("web", 2, 500, 512, epoch=4))
    assert sorted((p.name, p.epoch) for p in t.list_pods("web")) == [("web-4", 4), ("web-5", 4)]
