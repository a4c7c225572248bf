"""The gRPC API end to end on loopback: registry, agent evidence, workloads, placements, migrations,
the TwinCluster API agents use (watch, fenced bind, node status), health, reflection, /metrics, mTLS."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from controlplane import server, service as cpservice
from controlplane.auth import INSECURE
from controlplane.runtime import Backends, ControlPlane
from controlplane.verdicts import Timings
from cp_certs import make_pki
from fedapi import client, common_pb2, controlplane_pb2 as cp, controlplane_pb2_grpc, twincluster_pb2 as tw, twincluster_pb2_grpc
from fedapi.tls import TlsFiles
from fedcore.backends.twin import Binder, TwinCluster, make_nodes

FAST = Timings(probe_interval_s=0.05, report_interval_s=0.05, fresh_s=0.5, probe_failures=3)


@dataclass
class Api:
    running: server.Running
    control: controlplane_pb2_grpc.ControlPlaneStub
    twin: twincluster_pb2_grpc.TwinClusterStub
    channel: grpc.aio.Channel


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    backends = Backends(time.monotonic, twin_ready_delay_s=0.1)
    backends.by_name["edge"] = TwinCluster("edge", make_nodes("edge", "r1", 2, 4000, 8192, gpus=1), time.monotonic, 0.1, Binder.EXTERNAL)
    plane = ControlPlane(tmp_path / "cp.db", backends, time.monotonic, FAST)
    running = await server.start(plane, metrics_port=0, auth=INSECURE)
    channel = client.connect_aio(f"127.0.0.1:{running.port}")
    yield Api(running, controlplane_pb2_grpc.ControlPlaneStub(channel), twincluster_pb2_grpc.TwinClusterStub(channel), channel)
    await channel.close()
    await running.stop(0)
    plane.close()


async def register(api: Api, name: str, region: str) -> cp.ClusterStatus:
    spec = cp.ClusterSpec(name=name, region=region, backend=cp.BACKEND_TWIN, twin_nodes=2)
    status: cp.ClusterStatus = await api.control.RegisterCluster(cp.RegisterClusterRequest(cluster=spec))
    return status


async def eventually(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def web(name: str = "web", replicas: int = 2, cpu: int = 500, **policy: object) -> cp.WorkloadSpec:
    return cp.WorkloadSpec(name=name, replicas=replicas, pod=cp.PodTemplate(cpu_milli=cpu, memory_mib=256),
                           policy=cp.PlacementPolicy(**policy))  # type: ignore[arg-type]


async def codes(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value.code()


@pytest.mark.asyncio
async def test_registry_workloads_and_placements(api: Api) -> None:
    assert (await register(api, "c0", "r0")).spec.name == "c0"
    await register(api, "c1", "r1")

    async def healthy() -> bool:
        found = await api.control.ListClusters(cp.ListClustersRequest())
        return sum(c.verdict.health == cp.HEALTH_HEALTHY for c in found.clusters) >= 2

    await eventually(healthy)
    dry = await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web(spread=cp.SPREAD_REGIONS, clusters=["c0", "c1"]), dry_run=True))
    assert dry.accepted and dry.dry_run and {p.cluster for p in dry.placements} == {"c0", "c1"}
    assert dry.reasons and "score" in dry.reasons[0].message
    assert await codes(api.control.GetPlacements(cp.GetPlacementsRequest(workload="web"))) == grpc.StatusCode.NOT_FOUND

    done = await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web(spread=cp.SPREAD_REGIONS, clusters=["c0", "c1"])))
    assert done.accepted and not done.dry_run

    async def ready() -> bool:
        found = await api.control.GetPlacements(cp.GetPlacementsRequest(workload="web"))
        return sum(p.ready for p in found.workloads[0].placements) == 2

    await eventually(ready)
    assert await codes(api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web()))) == grpc.StatusCode.ALREADY_EXISTS
    too_big = await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web("huge", cpu=999_000)))
    assert not too_big.accepted and "NodeResourcesFit" in too_big.reasons[-1].message

    migration = await api.control.StartMigration(cp.StartMigrationRequest(workload="web", source="c0", target="c1"))
    assert migration.kind == "manual" and migration.epoch == 2

    async def moved() -> bool:
        found = await api.control.ListMigrations(cp.ListMigrationsRequest())
        return found.migrations[0].state == cp.MIGRATION_DONE

    await eventually(moved)
    decisions = await api.control.ListDecisions(cp.ListDecisionsRequest(limit=50))
    assert {"place", "manual", "verdict:healthy"} <= {d.kind for d in decisions.decisions}


@pytest.mark.asyncio
@pytest.mark.parametrize("spec, code", [
    (cp.ClusterSpec(name="Bad_Name", region="r0"), grpc.StatusCode.INVALID_ARGUMENT),
    (cp.ClusterSpec(name="ok", region=""), grpc.StatusCode.INVALID_ARGUMENT),
    (cp.ClusterSpec(name="k8s", region="r0", backend=cp.BACKEND_KUBERNETES), grpc.StatusCode.INVALID_ARGUMENT),
    (cp.ClusterSpec(name="k8s", region="r0", backend=cp.BACKEND_KUBERNETES, kube_context="nope", kubeconfig="/nonexistent"),
     grpc.StatusCode.INVALID_ARGUMENT),
])
async def test_bad_cluster_registrations_are_refused_clearly(api: Api, spec: cp.ClusterSpec, code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.control.RegisterCluster(cp.RegisterClusterRequest(cluster=spec))
    assert err.value.code() == code and err.value.details()


@pytest.mark.asyncio
async def test_bad_requests_get_clear_codes(api: Api) -> None:
    c = api.control
    assert await codes(c.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web(replicas=0)))) == grpc.StatusCode.INVALID_ARGUMENT
    assert await codes(c.SubmitWorkload(cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(
        name="x", replicas=1, pod=cp.PodTemplate(archs=["sparc"]))))) == grpc.StatusCode.INVALID_ARGUMENT
    assert await codes(c.StartMigration(cp.StartMigrationRequest(workload="ghost", source="c0"))) == grpc.StatusCode.NOT_FOUND
    assert await codes(c.CancelMigration(cp.CancelMigrationRequest(id="nope"))) == grpc.StatusCode.NOT_FOUND
    assert await codes(c.ReportAgent(cp.AgentReport(cluster="edge"))) == grpc.StatusCode.INVALID_ARGUMENT
    assert await codes(c.RunDrill(cp.RunDrillRequest(scenario="cluster-outage"))) == grpc.StatusCode.INVALID_ARGUMENT
    assert await codes(api.twin.BindPod(tw.BindPodRequest(cluster="mars", pod="p", node="n", epoch=1))) == grpc.StatusCode.NOT_FOUND


@pytest.mark.asyncio
async def test_delete_removes_a_workload_everywhere_and_frees_its_name(api: Api) -> None:
    await register(api, "c0", "r0")
    await register(api, "c1", "r1")

    async def healthy() -> bool:
        found = await api.control.ListClusters(cp.ListClustersRequest())
        return sum(c.verdict.health == cp.HEALTH_HEALTHY for c in found.clusters) >= 2

    await eventually(healthy)
    assert (await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web(spread=cp.SPREAD_REGIONS, clusters=["c0", "c1"])))).accepted
    twins = api.running.plane.backends.twins()
    partitioned = twins["c1"]
    partitioned.partition()  # c1 cannot be reached: its copy is removed once it answers again
    gone = await api.control.DeleteWorkload(cp.DeleteWorkloadRequest(workload="web"))
    assert list(gone.removed_from) == ["c0"] and list(gone.pending) == ["c1"]
    assert not twins["c0"].snapshot("web") and partitioned.snapshot("web")
    assert await codes(api.control.GetPlacements(cp.GetPlacementsRequest(workload="web"))) == grpc.StatusCode.NOT_FOUND
    bad_id = cp.SubmitWorkloadRequest(workload=web(), request_id="x" * 129)
    assert await codes(api.control.SubmitWorkload(bad_id)) == grpc.StatusCode.INVALID_ARGUMENT
    assert await codes(api.control.DeleteWorkload(cp.DeleteWorkloadRequest(workload="web"))) == grpc.StatusCode.NOT_FOUND
    again = await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web(replicas=1, clusters=["c0", "c1"])))
    assert again.accepted and [p.cluster for p in again.placements] == ["c0"]  # not onto the copy still waiting for removal
    partitioned.heal()

    async def cleaned() -> bool:
        return not partitioned.snapshot("web")

    await eventually(cleaned)
    kinds = [d.kind for d in (await api.control.ListDecisions(cp.ListDecisionsRequest(limit=20))).decisions]
    assert "delete" in kinds and "cleanup" in kinds


@pytest.mark.asyncio
async def test_agent_reports_are_sequenced_and_counted_as_evidence(api: Api) -> None:
    await api.control.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name="edge", region="r1")))
    report = cp.AgentReport(cluster="edge", node="edge-n0", agent_id="a1", sequence=7,
                            summary=cp.NodeSummary(node="edge-n0", ready=True),
                            peers=[cp.PeerView(node="edge-n1", cluster="edge", state=cp.PEER_ALIVE)])
    ack = await api.control.ReportAgent(report)
    assert ack.accepted and ack.report_interval_ms == 50 and ack.server_time_ms > 0
    assert ack.takes_heard, "agents send heard_ms only to a plane that says it reads them"
    stale = await api.control.ReportAgent(report)
    assert not stale.accepted and "not newer" in stale.reason
    found = await api.control.ListClusters(cp.ListClustersRequest())
    assert found.clusters[0].agents_reporting == 1


@pytest.mark.asyncio
async def test_twin_cluster_api_for_agents(api: Api) -> None:
    await api.control.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name="edge", region="r1")))
    await asyncio.sleep(0.2)
    gpu = cp.WorkloadSpec(name="train", replicas=1, pod=cp.PodTemplate(cpu_milli=500, memory_mib=256, gpus=1, archs=["amd64"],
                          tolerations=[common_pb2.Toleration(key="edge", effect="NoSchedule")]))
    assert (await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=gpu))).accepted
    stream = api.twin.WatchPods(tw.WatchPodsRequest(cluster="edge", pending_only=True))
    event = await asyncio.wait_for(stream.read(), 5.0)
    stream.cancel()
    pod = event.pod
    assert event.type == tw.EVENT_ADDED and pod.phase == tw.POD_PENDING and pod.epoch == 1
    assert (pod.spec.gpu_count, pod.spec.gpu_milli_each, list(pod.spec.archs)) == (1, 1000, ["amd64"])
    assert pod.spec.tolerations[0].key == "edge"

    node = await api.twin.DescribeNode(tw.DescribeNodeRequest(cluster="edge", node="edge-n0"))
    assert (node.gpus, node.region, node.capacity.cpu_milli, node.ready) == (1, "r1", 4000, True)
    bind = lambda n, e: api.twin.BindPod(tw.BindPodRequest(cluster="edge", pod=pod.name, node=n, epoch=e))  # noqa: E731
    assert (await bind("edge-n0", 0)).outcome == tw.BIND_STALE_EPOCH
    assert (await bind("edge-n0", 1)).outcome == tw.BIND_BOUND
    assert (await bind("edge-n0", 1)).outcome == tw.BIND_ALREADY_BOUND
    dup = await bind("edge-n1", 1)
    assert dup.outcome == tw.BIND_DUPLICATE and dup.node == "edge-n0"
    safety = await api.twin.GetSafety(tw.GetSafetyRequest(cluster="edge"))
    assert (safety.duplicate_binds, safety.stale_binds) == (1, 1)
    released = await api.twin.ReportNodeStatus(tw.NodeStatusReport(cluster="edge", node="edge-n0", ready=False))
    assert released.pods_released == 1
    assert (await bind("edge-n1", 1)).outcome == tw.BIND_STALE_EPOCH  # the pod moved on to epoch 2
    assert (await bind("edge-n1", 2)).outcome == tw.BIND_BOUND
    done = await api.twin.CompletePod(tw.CompletePodRequest(cluster="edge", pod=pod.name, epoch=2, succeeded=True))
    assert done.outcome == tw.BIND_BOUND
    nodes = await api.twin.ListNodes(tw.ListNodesRequest(cluster="edge"))
    assert [n.ready for n in nodes.nodes] == [False, True]


@pytest.mark.asyncio
async def test_a_watch_sees_a_bind_when_it_happens_not_at_its_next_poll(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpservice, "WATCH_POLL_S", 30.0)  # a change must wake the stream, not the poll
    await api.control.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name="edge", region="r1")))
    await asyncio.sleep(0.2)  # its capacity probed
    assert (await api.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=web("one", replicas=1)))).accepted
    stream = api.twin.WatchPods(tw.WatchPodsRequest(cluster="edge"))
    pending = await asyncio.wait_for(stream.read(), 5.0)
    assert pending.pod.phase == tw.POD_PENDING
    await asyncio.sleep(0.2)  # the stream now waits on the twin
    began = time.monotonic()
    bound = await api.twin.BindPod(tw.BindPodRequest(cluster="edge", pod=pending.pod.name, node="edge-n0", epoch=pending.pod.epoch))
    assert bound.outcome == tw.BIND_BOUND
    event = await asyncio.wait_for(stream.read(), 5.0)
    stream.cancel()
    assert event.pod.name == pending.pod.name and event.pod.node == "edge-n0"
    assert time.monotonic() - began < 2.0


@pytest.mark.asyncio
async def test_health_reflection_and_metrics(api: Api) -> None:
    health = health_pb2_grpc.HealthStub(api.channel)
    for service in ("", "fedplane.v1.ControlPlane", "fedplane.v1.TwinCluster"):
        assert (await health.Check(health_pb2.HealthCheckRequest(service=service))).status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    stream = refl.ServerReflectionInfo()
    await stream.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    answer = await stream.read()
    await stream.done_writing()
    names = {s.name for s in answer.list_services_response.service}
    assert {"fedplane.v1.ControlPlane", "fedplane.v1.TwinCluster", "grpc.health.v1.Health"} <= names
    await register(api, "c0", "r0")
    await asyncio.sleep(0.2)
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{api.running.metrics_port}/metrics", timeout=5).read().decode())
    assert 'fedplane_verdicts_total{cluster="c0",health="healthy"} 1.0' in body
    assert "fedplane_tick_seconds_count" in body and "fedplane_migrations_active" in body


@pytest.mark.asyncio
async def test_mtls_refuses_clients_without_certificates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    plane = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic), time.monotonic, FAST)
    running = await server.start(plane, tls=TlsFiles(pki["server_cert"], pki["server_key"], pki["ca"]), auth=INSECURE)
    target = f"127.0.0.1:{running.port}"
    try:
        good = client.connect_aio(target, TlsFiles(pki["client_cert"], pki["client_key"], pki["ca"]))
        assert (await controlplane_pb2_grpc.ControlPlaneStub(good).ListClusters(cp.ListClustersRequest(), timeout=5)).clusters == []
        await good.close()
        plain = grpc.aio.insecure_channel(target)
        assert await codes(controlplane_pb2_grpc.ControlPlaneStub(plain).ListClusters(cp.ListClustersRequest(), timeout=2)) == grpc.StatusCode.UNAVAILABLE
        await plain.close()
        no_cert = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes()))
        assert await codes(controlplane_pb2_grpc.ControlPlaneStub(no_cert).ListClusters(cp.ListClustersRequest(), timeout=2)) == grpc.StatusCode.UNAVAILABLE
        await no_cert.close()
    finally:
        await running.stop(0)
        plane.close()


def test_missing_tls_files_are_a_clear_error(tmp_path: Path) -> None:
    from fedapi.tls import server_credentials

    with pytest.raises(ValueError, match="cannot read TLS file"):
        server_credentials(TlsFiles(tmp_path / "no.crt", tmp_path / "no.key", tmp_path / "ca.crt"))
