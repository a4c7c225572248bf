"""Online and batch on one fleet, end to end: a serving plane and a real agent daemon with isolation on (a fake cgroup v1
tree whose online-group CPU counter the test drives). Batch is placed on reclaimed capacity; online demand rises; the
plane's auction preempts the batch pod, logs the decision, counts it, and the CLI shows it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from controlplane.colocating import ColocationConfig
from controlplane.registry import ClusterSpec
from controlplane.verdicts import Timings
from fedapi import controlplane_pb2 as cp
from fedcore.backends.model import Phase
from fedplane.cli import main

from cp_agentfleet import served_with_agents

pytestmark = pytest.mark.integration
FAST = Timings(probe_interval_s=0.02, report_interval_s=0.1, fresh_s=1.0, probe_failures=3)


class OnlineLoad:
    """The online group's ``cpuacct.usage`` advancing at ``cores`` (what the kernel would count for busy online pods)."""

    def __init__(self, group: Path, cores: float) -> None:
        self.group, self.cores, self.used_ns, self.stop = group, cores, 0.0, threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.005):
            now = time.monotonic()
            self.used_ns += self.cores * 1e9 * (now - last)
            last = now
            self.group.mkdir(parents=True, exist_ok=True)
            (self.group / "cpuacct.usage.tmp").write_text(str(int(self.used_ns)))
            (self.group / "cpuacct.usage.tmp").replace(self.group / "cpuacct.usage")


@pytest.fixture
def cgroups(tmp_path: Path) -> Iterator[tuple[Path, OnlineLoad]]:
    root = tmp_path / "cg"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.shares").write_text("1024\n")
    load = OnlineLoad(root / "cpu" / "fedplane" / "online", 0.3)
    thread = threading.Thread(target=load.run, daemon=True)
    thread.start()
    yield root, load
    load.stop.set()
    thread.join()


async def cli(*args: str) -> str:
    out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", *args])
    assert out.exit_code == 0, out.output
    return out.stdout


async def until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_batch_runs_on_reclaimed_capacity_until_online_demand_preempts_it(tmp_path: Path, cgroups: tuple[Path, OnlineLoad]) -> None:
    root, load = cgroups
    isolation = {"isolation": {"enabled": True, "root": str(root), "resctrl": str(tmp_path / "no-resctrl")}}

    async def scenario() -> None:
        async with served_with_agents(tmp_path, ClusterSpec("c0", "r0", twin_nodes=1, twin_cpu_milli=4000), FAST, isolation) as fleet:
            plane = fleet.plane
            plane.colocation.config = ColocationConfig(stride_s=0.02, round_s=0.0)
            twin = plane.backends.twins()["c0"]
            target = ["--target", fleet.target]
            await cli("submit", "web", "--replicas", "2", "--cpu", "1500m", "--memory", "128Mi", *target)
            bad = cp.WorkloadSpec(name="neg", replicas=1, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64, qos="batch", priority=-1))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await fleet.stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=bad, request_id="neg"))
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "bid" in (refused.value.details() or "")

            def pods(workload: str) -> list[str]:
                return [p.node for p in twin.snapshot(workload) if p.phase is Phase.RUNNING]

            await until(lambda: len(pods("web")) == 2, 60, "the online replicas to run")
            # 3 of 4 cores requested by online pods that use 0.3: once the forecast is calibrated, ~2.6 cores reclaimed

            def reclaimed() -> int:
                offer = plane.colocation.offer("c0", "c0-n0")
                return offer.reclaimed_milli if offer else 0

            await until(lambda: reclaimed() > 2000, 60, "reclaimed capacity offered")
            await cli("submit", "crunch", "--qos", "batch", "--bid", "5", "--cpu", "3", "--memory", "128Mi", *target)
            await until(lambda: pods("crunch") == ["c0-n0"], 60, "the batch pod bound on reclaimed capacity")
            quota = root / "cpu" / "fedplane" / "batch" / "cpu.cfs_quota_us"
            await until(lambda: 300000 <= int(quota.read_text()) <= 400000, 30, "the agent to cap its batch group at batch's supply")
            rows = json.loads(await cli("placements", "--workload", "crunch", "--json", *target))["workloads"][0]
            assert rows["qos"] == "batch" and int(rows["placements"][0]["reclaimed_milli"]) == 2000

            load.cores = 3.9  # online demand rises: batch's supply shrinks below even its suppressed floor
            await until(lambda: not pods("crunch"), 60, "the batch pod preempted")
            await until(lambda: int(quota.read_text()) <= 100000, 30, "the agent to squeeze its batch group")
            assert plane.metrics.preemptions.labels("c0")._value.get() == 1
            found = json.loads(await cli("decisions", "--json", *target))["decisions"]
            preempt = next(d for d in found if d["kind"] == "preempt")
            assert preempt["workload"] == "crunch" and "online demand outbid it" in json.dumps(preempt["reasons"])
            table = await cli("placements", *target)
            assert "reclaimed" in table and "preempted" in table
            rows = json.loads(await cli("placements", "--workload", "crunch", "--json", *target))["workloads"][0]
            assert rows["placements"][0]["preemptions"] == 1
            await asyncio.sleep(0.5)  # its replacement waits: no reclaimed capacity left (a bind on the agent's stale offer
            # is refused by the plane), online needs the node
            assert not pods("crunch") and [p.phase for p in twin.snapshot("crunch")] == [Phase.PENDING]

    asyncio.run(scenario())


@pytest.mark.parametrize(("args", "says"), [
    (["--bid", "3"], "only batch workloads bid"),
    (["--qos", "batch", "--bid", "-1"], "-1"),
    (["--qos", "best"], "'best' is not one of 'online', 'batch'"),
])
def test_bad_bids_and_classes_are_refused_before_anything_is_sent(args: list[str], says: str) -> None:
    out = CliRunner().invoke(main, ["controlplane", "submit", "w", *args, "--target", "127.0.0.1:1"])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output
