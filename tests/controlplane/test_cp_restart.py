"""A real ``controlplane serve`` process on embedded twin clusters, killed (SIGKILL) or stopped and
started again on the same SQLite file: nothing is half-recorded, retried submits get their first
answer, every workload is ready again (the twins are rebuilt from the store), a migration in
flight finishes, and a second process can share neither the file nor the port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from cp_waiting import until
from fedapi import client, controlplane_pb2 as cp
from fedcore.loopback import free_ports

pytestmark = pytest.mark.integration


def serve(db: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve", "--db", str(db), "--port", str(port),
         "--agent-port", "0", "--metrics-port", "-1", "--twin-clusters", "4", "--regions", "2", "--ready-delay", "0.2",
         "--insecure", *extra],  # credentials: test_cp_auth
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[Path, int, list[subprocess.Popen[bytes]]]]:
    (port,) = free_ports(1)
    procs: list[subprocess.Popen[bytes]] = []
    yield tmp_path / "cp.db", port, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def healthy(conn: client.Connection, n: int = 4) -> bool:
    return sum(c.verdict.health == cp.HEALTH_HEALTHY for c in conn.control.ListClusters(cp.ListClustersRequest()).clusters) == n


def spec(name: str, replicas: int = 2, **policy: Any) -> cp.WorkloadSpec:
    return cp.WorkloadSpec(name=name, replicas=replicas, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64),
                           policy=cp.PlacementPolicy(spread=cp.SPREAD_CLUSTERS, **policy))


def all_ready(conn: client.Connection) -> dict[str, tuple[int, int]]:
    """Workload -> (ready, desired placed replicas)."""
    found = conn.control.GetPlacements(cp.GetPlacementsRequest()).workloads
    return {w.workload: (sum(p.ready for p in w.placements), sum(p.replicas for p in w.placements)) for w in found}


def test_kill_9_during_a_submit_burst_leaves_nothing_half_recorded(plane: tuple[Path, int, list[subprocess.Popen[bytes]]]) -> None:
    db, port, procs = plane
    procs.append(serve(db, port))
    conn = client.connect(f"127.0.0.1:{port}")
    until(lambda: healthy(conn), 30, "clusters healthy")
    ids = {f"w{i}": uuid.uuid4().hex for i in range(120)}
    answers: dict[str, cp.PlacementDecision] = {}

    def submit(name: str) -> None:
        try:
            answers[name] = conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec(name), request_id=ids[name]), timeout=10)
        except grpc.RpcError:
            pass

    with ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(submit, n) for n in ids]
        until(lambda: len(answers) >= 20, 30, "some submits answered")
        procs[0].send_signal(signal.SIGKILL)
        for f in futures:
            f.result()
    procs[0].wait(10)
    assert 20 <= len(answers) < len(ids), "the kill must land inside the burst"

    procs.append(serve(db, port))
    until(lambda: healthy(conn), 30, "clusters healthy after the restart")
    recorded = until(lambda: all_ready(conn), 30, "placements readable")
    decided = {d.workload for d in conn.control.ListDecisions(cp.ListDecisionsRequest(limit=10_000)).decisions if d.kind == "place"}
    assert set(answers) <= set(recorded), "an answered submit was lost"
    assert all(desired == 2 for _, desired in recorded.values()), f"half-recorded: {recorded}"
    assert set(recorded) == decided, "a workload without its decision (or the reverse)"
    until(lambda: all(r == d for r, d in all_ready(conn).values()), 30, "every recorded workload ready again")
    for name, rid in ids.items():  # every client retries: the first answer comes back, nothing is doubled
        again = conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec(name), request_id=rid), timeout=10)
        assert again.accepted
        if name in answers:
            assert [(p.cluster, p.replicas) for p in again.placements] == [(p.cluster, p.replicas) for p in answers[name].placements]
    assert len(all_ready(conn)) == len(ids)
    with pytest.raises(grpc.RpcError) as err:  # a new request id for an existing name is still refused
        conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec("w0"), request_id="fresh"))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    conn.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_restart_rebuilds_the_twins_and_resumes_a_migration(plane: tuple[Path, int, list[subprocess.Popen[bytes]]], stop: int) -> None:
    db, port, procs = plane
    procs.append(serve(db, port, "--ready-delay", "2.0"))  # the migration's target takes 2 s to be ready: the stop lands inside it
    conn = client.connect(f"127.0.0.1:{port}")
    until(lambda: healthy(conn), 30, "clusters healthy")
    for name in ("web", "api"):
        assert conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec(name, 3, clusters=["c0", "c1"]))).accepted
    until(lambda: all(r == d for r, d in all_ready(conn).values()), 30, "ready")
    source = conn.control.GetPlacements(cp.GetPlacementsRequest(workload="web")).workloads[0].placements[0].cluster
    target = "c1" if source == "c0" else "c0"
    m = conn.control.StartMigration(cp.StartMigrationRequest(workload="web", source=source, target=target))
    until(lambda: conn.control.ListMigrations(cp.ListMigrationsRequest()).migrations[0].state == cp.MIGRATION_TARGET_CREATED, 10, "target created")
    procs[0].send_signal(stop)
    procs[0].wait(10)

    procs.append(serve(db, port, "--ready-delay", "2.0"))
    done = until(lambda: [x for x in conn.control.ListMigrations(cp.ListMigrationsRequest()).migrations if x.state == cp.MIGRATION_DONE],
                 40, "migration resumed to done")
    assert done[0].id == m.id
    until(lambda: all(r == d for r, d in all_ready(conn).values()), 30, "every workload ready again, nothing 'placed 0/N'")
    web = conn.control.GetPlacements(cp.GetPlacementsRequest(workload="web")).workloads[0].placements
    assert sum(p.replicas for p in web) == 3 and source not in {p.cluster for p in web if p.replicas == 3 and p.cluster != target}
    conn.close()


def test_a_second_process_shares_neither_the_database_nor_the_port(plane: tuple[Path, int, list[subprocess.Popen[bytes]]], tmp_path: Path) -> None:
    db, port, procs = plane
    procs.append(serve(db, port))
    conn = client.connect(f"127.0.0.1:{port}")
    until(lambda: healthy(conn), 30, "first process serving")
    (other_port,) = free_ports(1)
    same_db = serve(db, other_port)
    err = b" ".join(same_db.communicate(timeout=30)[1].split())  # rich wraps long lines
    assert same_db.returncode == 2 and b"is in use by another control plane (pid" in err and b"Traceback" not in err
    same_port = serve(tmp_path / "other.db", port)
    err = b" ".join(same_port.communicate(timeout=30)[1].split())
    assert same_port.returncode == 2 and f"cannot serve on 127.0.0.1:{port}".encode() in err and b"Traceback" not in err
    assert healthy(conn), "the first process is untouched"
    conn.close()
    assert os.path.exists(str(db) + ".lock")


def test_the_crash_drill_on_one_sqlite_process_keeps_every_goal() -> None:
    """``--ha 1``: the drill's kill -9 mid-burst and mid-migration, then a fresh process on the same file."""
    done = subprocess.run(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "drill", "failover", "--scenario", "control-plane-crash",
         "--ha", "1", "--runs", "1", "--json"], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    j = json.loads(done.stdout)
    assert j["crashes"] == {"SIGKILL": 1, "SIGSTOP": 0} and j["submits_in_flight_at_crash"] > 20 and j["migrations_in_flight_at_crash"] > 0
    assert j["migrations_completed"] + j["migrations_rolled_back"] == j["migrations_total"] == 2
    assert (j["duplicated"], j["lost"], j["half_recorded"]) == (0, 0, 0), j["notes"]


def test_real_agents_bind_the_rebuilt_twin_after_a_kill_9(plane: tuple[Path, int, list[subprocess.Popen[bytes]]]) -> None:
    """Edge agents still run the lost pods at their epoch: the rebuilt twin adopts them where they run, at the same epoch."""
    import asyncio

    from fedplane.lab.drills.agentfleet import AgentFleet

    db, port, procs = plane
    (link,) = free_ports(1)
    args = ("--twin-clusters", "1", "--twin-nodes", "3", "--agents-bind", "--agent-port", str(link))

    async def run() -> None:
        procs.append(serve(db, port, *args))
        conn = client.connect(f"127.0.0.1:{port}")
        until(lambda: healthy(conn, 1), 30, "cluster healthy")
        fleet = AgentFleet({"c0": ["c0-n0", "c0-n1", "c0-n2"]}, time.monotonic)
        await fleet.start(f"127.0.0.1:{port}", f"127.0.0.1:{link}")
        try:
            assert conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec("web", 6))).accepted
            await asyncio.to_thread(until, lambda: all_ready(conn)["web"] == (6, 6), 30, "agents bound every pod")
            before = conn.control.GetPlacements(cp.GetPlacementsRequest(workload="web")).workloads[0].placements[0].epoch
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            procs.append(serve(db, port, *args))
            await asyncio.to_thread(until, lambda: all_ready(conn).get("web") == (6, 6), 40, "agents bound the rebuilt pods")
            after = conn.control.GetPlacements(cp.GetPlacementsRequest(workload="web")).workloads[0].placements[0].epoch
            assert after == before
        finally:
            await fleet.stop()
            conn.close()

    asyncio.run(run())


def test_a_kill_9_right_after_a_submit_strands_nothing(plane: tuple[Path, int, list[subprocess.Popen[bytes]]]) -> None:
    """Killed ~0.5 s after a 50-pod submit was acknowledged (agents mid-way through binding it), restarted after 5 s:
    every pod runs again within 30 s, the copies agents already ran adopted, none twice (before: 13-23 of 50 pending
    for good in 2 of 3 runs, their old copies still running at the old epoch)."""
    import asyncio

    from fedplane.lab.drills.agentfleet import AgentFleet

    db, port, procs = plane
    (link,) = free_ports(1)
    nodes = [f"c0-n{i}" for i in range(5)]
    args = ("--twin-clusters", "1", "--twin-nodes", "5", "--agents-bind", "--agent-port", str(link), "--no-scorer-selection")

    def safety() -> tuple[int, int]:
        from fedapi import twincluster_pb2 as tw

        s = conn.twin.GetSafety(tw.GetSafetyRequest(cluster="c0"))
        return s.duplicate_binds, s.stale_binds

    async def run() -> None:
        procs.append(serve(db, port, *args))
        until(lambda: healthy(conn, 1), 30, "cluster up")
        fleet = AgentFleet({"c0": nodes}, time.monotonic)
        await fleet.start(f"127.0.0.1:{port}", f"127.0.0.1:{link}")
        try:
            assert conn.control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec("web", 50))).accepted
            await asyncio.sleep(0.5)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            await asyncio.sleep(5)
            procs.append(serve(db, port, *args))
            restarted = time.monotonic()
            await asyncio.to_thread(until, lambda: all_ready(conn).get("web") == (50, 50), 30, "every pod running again")
            assert time.monotonic() - restarted < 30
            assert safety()[0] == 0
        finally:
            await fleet.stop()

    conn = client.connect(f"127.0.0.1:{port}")
    try:
        asyncio.run(run())
    finally:
        conn.close()
