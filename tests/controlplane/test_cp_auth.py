"""Authentication with roles: every gRPC method and every call on the agents' link shows a credential of a role
the method table names, agents act for their own cluster and node only, credentials live in the store (a restart
keeps them), ``--insecure`` stays on loopback, and the CLI says what to do in one line."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from click.testing import CliRunner
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from controlplane import auth, server
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.sqlitestore import SqliteStore
from controlplane.verdicts import Timings
from cp_waiting import until
from edgeagent import config
from edgeagent.daemon import Agent
from edgeagent.planeclient import PlaneClient
from edgeagent.clusters import ClusterUnavailable
from fedapi import autoscale_pb2, client, controlplane_pb2 as cp, controlplane_pb2_grpc, credentials, twincluster_pb2, twincluster_pb2_grpc
from fedapi.agentlink import LinkChannel, LinkError
from fedcore.backends.twin import Binder
from fedcore.loopback import free_ports
from fedplane.cli import main

FAST = Timings(probe_interval_s=0.05, report_interval_s=0.05, fresh_s=0.5, probe_failures=3)


@dataclass
class Plane:
    running: server.Running
    auth: auth.Authenticator
    tokens: dict[str, str]

    def stub(self, role: str = "") -> tuple[grpc.aio.Channel, controlplane_pb2_grpc.ControlPlaneStub]:
        channel = client.connect_aio(f"127.0.0.1:{self.running.port}", token=self.tokens.get(role, ""))
        return channel, controlplane_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]


@pytest_asyncio.fixture
async def plane(tmp_path: Path) -> AsyncIterator[Plane]:
    cp_ = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic, 0.1, Binder.EXTERNAL), time.monotonic, FAST)
    cp_.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2))
    cp_.register_cluster(ClusterSpec("c1", "r1", twin_nodes=2))
    checker = auth.Authenticator(cp_.store)
    tokens = {role: checker.issue(role) for role in ("admin", "operator", "viewer")}
    tokens["agent"] = checker.issue("agent", "c0", "c0-n0")
    tokens["agent-c0"] = checker.issue("agent", "c0")
    running = await server.start(cp_, auth=checker)
    yield Plane(running, checker, tokens)
    await running.stop(0)
    cp_.close()


async def code(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value.code(), err.value.details() or ""


def report(cluster: str, node: str) -> cp.AgentReport:
    return cp.AgentReport(cluster=cluster, node=node, agent_id=f"{node}-1", sequence=1, healthy=True,
                          summary=cp.NodeSummary(node=node, ready=True))


@pytest.mark.asyncio
async def test_no_or_unknown_credential_is_unauthenticated_with_a_hint(plane: Plane) -> None:
    for token in ("", "not-a-token-this-plane-issued"):
        channel = client.connect_aio(f"127.0.0.1:{plane.running.port}", token=token)
        stub = controlplane_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]
        status, details = await code(stub.ListClusters(cp.ListClustersRequest()))
        assert status is grpc.StatusCode.UNAUTHENTICATED and "FEDPLANE_CREDENTIALS" in details and "--credentials" in details
        await channel.close()


@pytest.mark.asyncio
async def test_roles_nest_and_a_refusal_names_the_role_needed(plane: Plane) -> None:
    submit = cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(name="w", replicas=1, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64)))
    channel, viewer = plane.stub("viewer")
    assert len((await viewer.ListClusters(cp.ListClustersRequest())).clusters) == 2
    await viewer.GetLeader(cp.GetLeaderRequest())
    status, details = await code(viewer.SubmitWorkload(submit))
    assert status is grpc.StatusCode.PERMISSION_DENIED and "needs role operator" in details
    assert (await code(viewer.IssueCredential(cp.IssueCredentialRequest(role="viewer"))))[0] is grpc.StatusCode.PERMISSION_DENIED
    await channel.close()
    channel, operator = plane.stub("operator")
    assert (await operator.SubmitWorkload(submit)).accepted
    assert len((await operator.GetPlacements(cp.GetPlacementsRequest())).workloads) == 1  # an operator reads too
    status, details = await code(operator.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name="c9", region="r0"))))
    assert status is grpc.StatusCode.PERMISSION_DENIED and "needs role admin" in details
    await channel.close()
    channel, agent = plane.stub("agent")
    assert (await code(agent.ListClusters(cp.ListClustersRequest())))[0] is grpc.StatusCode.PERMISSION_DENIED  # an agent is no viewer
    await channel.close()


@pytest.mark.asyncio
async def test_admin_issues_credentials_and_bad_requests_are_refused(plane: Plane) -> None:
    channel, admin = plane.stub("admin")
    issued = await admin.IssueCredential(cp.IssueCredentialRequest(role="agent", cluster="c1", node="c1-n1"))
    assert plane.auth.authenticate(issued.token) == auth.Principal("agent", "c1", "c1-n1")
    for bad in (cp.IssueCredentialRequest(role="root"), cp.IssueCredentialRequest(role="agent"),
                cp.IssueCredentialRequest(role="viewer", cluster="c0"), cp.IssueCredentialRequest(role="agent", cluster="c 0")):
        assert (await code(admin.IssueCredential(bad)))[0] is grpc.StatusCode.INVALID_ARGUMENT
    await channel.close()


@pytest.mark.asyncio
async def test_an_agent_reports_for_its_own_cluster_and_node_only(plane: Plane) -> None:
    channel, agent = plane.stub("agent")
    assert (await agent.ReportAgent(report("c0", "c0-n0"))).accepted
    for other in (report("c1", "c0-n0"), report("c0", "c0-n1")):
        status, details = await code(agent.ReportAgent(other))
        assert status is grpc.StatusCode.PERMISSION_DENIED and "acts for" in details
    twin = twincluster_pb2_grpc.TwinClusterStub(channel)  # type: ignore[no-untyped-call]
    assert len((await twin.ListNodes(twincluster_pb2.ListNodesRequest(cluster="c0"))).nodes) == 2
    assert (await code(twin.ListNodes(twincluster_pb2.ListNodesRequest(cluster="c1"))))[0] is grpc.StatusCode.PERMISSION_DENIED
    await channel.close()
    channel, viewer = plane.stub("viewer")
    assert (await code(viewer.ReportAgent(report("c0", "c0-n0"))))[0] is grpc.StatusCode.PERMISSION_DENIED
    await channel.close()


@pytest.mark.asyncio
async def test_the_link_binds_a_credential_to_the_connection_and_checks_each_call(plane: Plane) -> None:
    link = f"127.0.0.1:{plane.running.link_port}"
    nobody = LinkChannel(link)
    with pytest.raises(LinkError) as err:
        await nobody.call("ListNodes", {"cluster": "c0"}, 2.0)
    assert err.value.code == "UNAUTHENTICATED" and "backend.credentials" in err.value.details
    await nobody.close()
    node0 = PlaneClient(link, "c0", 2.0, token=plane.tokens["agent"])
    assert (await node0.describe_node("c0-n1")).name == "c0-n1"  # reads of its cluster: any node
    assert await node0.report_node("c0-n0", True) == 0
    assert await node0.report_node("c0-n1", False) == 0  # a peer's node reported down: re-placing a dead peer's pods
    with pytest.raises(ClusterUnavailable, match="PERMISSION_DENIED.*c0-n0"):
        await node0.report_node("c0-n1", True)
    with pytest.raises(ClusterUnavailable, match="PERMISSION_DENIED.*c0-n0"):
        await node0.bind("p", "c0-n1", 1)
    ack = await node0.channel.call("ReportAgent", {"cluster": "c0", "node": "c0-n0", "agent_id": "a", "sequence": 1}, 2.0)
    assert ack["accepted"]
    await node0.close()
    elsewhere = PlaneClient(link, "c1", 2.0, token=plane.tokens["agent-c0"])
    with pytest.raises(ClusterUnavailable, match="PERMISSION_DENIED.*'c0' only"):
        await elsewhere.describe_node("c1-n0")
    await elsewhere.close()
    stranger = PlaneClient(link, "c0", 2.0, token="forged")
    with pytest.raises(ClusterUnavailable, match="UNAUTHENTICATED: unknown credential"):
        await stranger.describe_node("c0-n0")
    await stranger.close()


def test_the_method_table_covers_every_method_of_every_service_served() -> None:
    served = [d.services_by_name[n] for d, n in (
        (cp.DESCRIPTOR, "ControlPlane"), (twincluster_pb2.DESCRIPTOR, "TwinCluster"), (autoscale_pb2.DESCRIPTOR, "Autoscaler"),
        (health_pb2.DESCRIPTOR, "Health"), (reflection_pb2.DESCRIPTOR, "ServerReflection"))]
    assert {s.full_name for s in served[:3]} == set(server.SERVICES)
    methods = {f"/{s.full_name}/{m.name}" for s in served for m in s.methods}
    assert methods == set(auth.NEEDS), "every method needs an entry in controlplane.auth.NEEDS (and no entry may outlive its method)"
    assert {m for m, needs in auth.NEEDS.items() if needs == auth.PUBLIC} == {m for m in methods if "/grpc." in m}
    assert all(set(needs) <= set(credentials.ROLES) for needs in auth.NEEDS.values())


@pytest.mark.asyncio
async def test_a_method_missing_from_the_table_is_refused_to_everyone(plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(auth.NEEDS, "/fedplane.v1.ControlPlane/ListClusters")
    channel, admin = plane.stub("admin")
    status, details = await code(admin.ListClusters(cp.ListClustersRequest()))
    assert status is grpc.StatusCode.PERMISSION_DENIED and "nobody may call it" in details
    await channel.close()


def test_roles_nest_and_agents_stand_apart() -> None:
    admin, operator, viewer, agent = (auth.Principal(r) for r in ("admin", "operator", "viewer", "agent"))
    assert auth.allows(admin, "operator") and auth.allows(admin, "viewer") and auth.allows(operator, "viewer")
    assert not auth.allows(viewer, "operator") and not auth.allows(operator, "admin")
    assert not auth.allows(admin, "agent") and not auth.allows(agent, "viewer") and auth.allows(agent, "agent")


def test_credentials_live_in_the_store_and_survive_a_restart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "cp.db")
    token = auth.Authenticator(store).issue("operator")
    store.close()
    store = SqliteStore(tmp_path / "cp.db")
    again = auth.Authenticator(store)
    assert again.authenticate(token) == auth.Principal("operator") and again.authenticate(token[:-1] + "x") is None
    with store.tx() as t:
        assert token not in str(t.scan("credentials/"))  # only its digest is kept
    store.close()


@pytest.mark.asyncio
async def test_insecure_serves_loopback_only(tmp_path: Path) -> None:
    plane = ControlPlane(":memory:", Backends(time.monotonic), time.monotonic, FAST)
    with pytest.raises(ValueError, match="loopback"):
        await server.start(plane, host="0.0.0.0", auth=auth.INSECURE)
    plane.close()
    out = CliRunner().invoke(main, ["controlplane", "serve", "--insecure", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")])
    assert out.exit_code == 2 and "--insecure refuses" in out.output and not (tmp_path / "x.db").exists()


@pytest.mark.asyncio
async def test_an_agent_daemon_with_its_credential_reports_and_binds(plane: Plane, tmp_path: Path) -> None:
    path = tmp_path / "agent.cred"
    credentials.write(path, credentials.Credential(plane.tokens["agent"], "agent", "c0", "c0-n0"))
    (gossip,) = free_ports(1)
    agent = Agent(config.parse({
        "node": "c0-n0", "cluster": "c0", "data_dir": str(tmp_path / "a"), "log_level": "warning",
        "gossip": {"bind": f"127.0.0.1:{gossip}"}, "probe": {"kind": "twin"}, "http": {"bind": ""}, "report": {"interval": 0.1},
        "backend": {"kind": "twin", "address": f"127.0.0.1:{plane.running.link_port}", "timeout": 1.0, "credentials": str(path)},
    }), handle_signals=False)
    task = asyncio.create_task(agent.run())
    try:
        for _ in range(100):
            (_, _, _, agents), = plane.running.plane.agents("c0")
            if agents:
                break
            await asyncio.sleep(0.1)
        assert [a.report.node for a in agents] == ["c0-n0"], "the agent's reports reach the plane"
        channel, operator = plane.stub("operator")
        await operator.SubmitWorkload(cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(
            name="w", replicas=1, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64), policy=cp.PlacementPolicy(clusters=["c0"]))))
        await channel.close()
        twin = plane.running.plane.backends("c0")
        for _ in range(100):
            if twin.get_workload("w").ready_replicas == 1:
                break
            await asyncio.sleep(0.1)
        assert [p.node for p in twin.list_pods()] == ["c0-n0"], "the agent bound the pod to its own node"
    finally:
        agent.stop()
        await task


def _cli(*args: str, creds: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != credentials.ENV}
    if creds is not None:
        env[credentials.ENV] = str(creds)
    return subprocess.run([sys.executable, "-c", "from fedplane.cli import main; main()", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_serve_writes_the_admin_credential_and_the_cli_says_what_to_do(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    admin, viewer, target = tmp_path / "admin.cred", tmp_path / "viewer.cred", ["--target", f"127.0.0.1:{port}"]
    argv = [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve", "--db", str(tmp_path / "cp.db"),
            "--port", str(port), "--agent-port", "0", "--metrics-port", "-1", "--twin-clusters", "1", "--admin-credentials", str(admin)]
    for attempt in range(2):  # the second start: the same file and store, the credentials issued before still hold
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            first = admin.read_text() if attempt else ""
            until(lambda: _cli("controlplane", "clusters", *target, creds=admin).returncode == 0, timeout=30, what="the plane")
            assert stat.S_IMODE(admin.stat().st_mode) == 0o600 and credentials.read(admin).role == "admin"
            if attempt:
                assert admin.read_text() == first, "a known admin credential is kept"
            else:
                denied = _cli("controlplane", "clusters", *target)
                assert denied.returncode == 2 and "Traceback" not in denied.stderr
                lines = denied.stderr.strip().splitlines()
                assert len(lines) == 1 and "UNAUTHENTICATED" in lines[0] and "FEDPLANE_CREDENTIALS" in lines[0]
                assert _cli("controlplane", "credentials", "--role", "viewer", "--out", str(viewer), *target, creds=admin).returncode == 0
                assert stat.S_IMODE(viewer.stat().st_mode) == 0o600
            assert _cli("controlplane", "clusters", creds=viewer).returncode == 0  # its target is in the file
            refused = _cli("controlplane", "submit", "v", "--cpu", "100m", "--memory", "64Mi", *target, creds=viewer)
            assert refused.returncode == 2 and "needs role operator" in refused.stderr and "Traceback" not in refused.stderr
        finally:
            proc.terminate()
            proc.wait(10)


def test_agent_check_names_a_credential_that_would_be_refused(tmp_path: Path) -> None:
    from edgeagent.preflight import credentials_problem

    path = tmp_path / "agent.cred"
    agent = config.parse({"node": "n1", "cluster": "c0", "backend": {"credentials": str(path)}})
    assert "cannot read" in (credentials_problem(agent) or "")
    path.write_text("{not json")
    assert "not a JSON credential file" in (credentials_problem(agent) or "")
    for found, why in ((credentials.Credential("t0k", "viewer"), "role agent"), (credentials.Credential("t0k", "agent", "c1"), "cluster 'c1'"),
                       (credentials.Credential("t0k", "agent", "c0", "n2"), "node 'n2'")):
        credentials.write(path, found)
        assert why in (credentials_problem(agent) or "")
    credentials.write(path, credentials.Credential("t0k", "agent", "c0", "n1"))
    assert credentials_problem(agent) is None


def test_an_unusable_credential_file_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cred"
    bad.write_text('{"token": "x y", "role": "viewer"}')
    for path in (bad, tmp_path / "missing.cred"):
        out = CliRunner().invoke(main, ["controlplane", "clusters", "--target", "127.0.0.1:1", "--credentials", str(path)])
        assert out.exit_code == 2 and str(path) in out.output and "token" not in out.output.replace("no usable token", "")
