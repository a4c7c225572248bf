"""The drills of the world as it is (issue #35): what they measure, from canned observations (fast), and one run of
each netns scenario behind FEDPLANE_NETNS_DRILLS=1 (minutes each; root and iproute2)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedplane.lab.drills import agentfleet, hostfaults, netns, planefaults

KEYS = {"runs", "agents", "pods", "timings", "lost", "duplicated", "healthy_evicted", "stranded", "unfenced_copy_s_max",
        "recovery_s_p99", "acknowledged_lost"}
HA_KEYS = {"takeover_s_p99", "placement_resumed_s_p99", "stale_writes", "client_failover_s_p99"}


def test_the_drill_agents_run_the_shipped_timings() -> None:
    assert agentfleet.AGENT_SETTINGS["gossip"] == {} and agentfleet.AGENT_SETTINGS["backend"] == {}
    assert agentfleet.TIMINGS == "defaults"


def test_every_scenario_reports_the_issue_keys() -> None:
    host = hostfaults.summarise("host-partition", [hostfaults.HostRun("host-partition", "c0-n1", recovery_s=6.0)],
                                hostfaults.HostDrillConfig())
    assert KEYS <= host.keys() and host["timings"] == "defaults" and host["agents"] >= 5 and host["pods"] >= 200
    assert host["success"] == 1.0


def test_a_host_run_succeeds_only_when_it_recovered_with_nothing_wrong() -> None:
    runs = [hostfaults.HostRun("agent-crash", "c0-n1", recovery_s=6.0), hostfaults.HostRun("agent-crash", "c0-n2"),
            hostfaults.HostRun("agent-crash", "c0-n3", recovery_s=5.0, healthy_evicted=2),
            hostfaults.HostRun("agent-crash", "c0-n4", recovery_s=5.0, silent_at_end=["c0-n4"])]
    assert [r.success for r in runs] == [True, False, False, False]
    assert hostfaults.summarise("agent-crash", runs, hostfaults.HostDrillConfig())["success"] == 0.25
    plane = planefaults.summarise("leader-crash", [planefaults.PlaneRun("leader-crash", "m0", recovery_s=9.0, takeover_s=3.0)],
                                  planefaults.PlaneDrillConfig())
    assert KEYS | HA_KEYS <= plane.keys()
    assert plane["takeover_s_p99"] == 3.0 and plane["client_failover_s_p99"] == float("inf"), "a run that never measured it fails the goal"


def test_a_copy_is_unfenced_from_when_its_agent_could_know(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fleet:
        def __init__(self) -> None:
            self.held = {"a": {"p1": 1, "p2": 2}, "b": {"p1": 2}}

        def endpoint(self, node: str) -> tuple[str, int]:
            return node, 0

    fleet = Fleet()

    async def get(port: int, path: str, timeout: float, host: str) -> tuple[int, bytes]:
        return 200, json.dumps(fleet.held[host]).encode()

    copies = planefaults.Copies()
    copies.knowable_from = 10.0
    monkeypatch.setattr(agentfleet, "http_get", get)
    for now in (8.0, 10.0, 12.5):
        asyncio.run(copies.poll(fleet, ["a", "b"], now, 0.5))  # type: ignore[arg-type]
    assert copies.unfenced_max == 2.5 and set(copies.stale) == {("a", "p1")}, "a's epoch-1 copy of p1, counted from 10 s"
    fleet.held["a"] = {"p2": 2}
    asyncio.run(copies.poll(fleet, ["a", "b"], 13.0, 0.5))  # type: ignore[arg-type]
    assert not copies.stale and copies.unfenced_max == 2.5


def test_freed_pods_are_read_from_the_agents_reports(tmp_path: Path) -> None:
    (tmp_path / "c0-n0").mkdir()
    (tmp_path / "c0-n0" / "agent.log").write_text("x INFO reported node c0-n3 not ready: the cluster freed 16 pods\nother\n")
    assert planefaults.freed_by_reports(tmp_path) == 16


NETNS = netns.unavailable() or ("" if os.environ.get("FEDPLANE_NETNS_DRILLS") == "1" else "set FEDPLANE_NETNS_DRILLS=1 (minutes per scenario)")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(bool(NETNS), reason=f"netns drills: {NETNS}")
@pytest.mark.parametrize("scenario, extra", [("host-partition", []), ("agent-crash", []), ("control-plane-crash", ["--ha", "1"]),
                                             ("leader-crash", ["--ha", "3"]), ("leader-partition", ["--ha", "3"])])
def test_one_run_of_each_netns_scenario_meets_the_goals(scenario: str, extra: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "fedplane", "drill", "failover", "--hosts", "netns", "--scenario", scenario, *extra,
                           "--runs", "1", "--json"], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert KEYS <= out.keys() and out["timings"] == "defaults", out
    assert out["lost"] == out["duplicated"] == out["healthy_evicted"] == out["stranded"] == out["acknowledged_lost"] == 0, out
    assert out["unfenced_copy_s_max"] <= 5, out
