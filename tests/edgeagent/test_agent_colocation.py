"""The agent's side of colocation on fake cgroup trees: the online group's CPU use as a rate, the plane's offer into the
batch group's quota and the placer's reclaimed CPU, and what ``--check`` says."""

from __future__ import annotations

from pathlib import Path

from fedcore.nodes import Node
from fedcore.pods import Pod, QoS

from edgeagent import colocation
from edgeagent.colocation import NodeColocation
from edgeagent.config import IsolationSection
from fedplane.lab.sims.placementsim import PlacementSim

from test_agent_isolation import v1_tree, v2_tree


def test_v1_meter_reads_the_online_group_as_a_rate_and_the_offer_caps_batch(tmp_path: Path) -> None:
    root = v1_tree(tmp_path / "cg")
    node = NodeColocation(IsolationSection(enabled=True, root=str(root), resctrl=str(tmp_path / "none"), batch_memory_mib=256))
    node.start()
    batch = root / "cpu" / "fedplane" / "batch"
    assert (batch / "cpu.cfs_quota_us").read_text() == "-1" and (root / "memory" / "fedplane" / "batch" / "memory.limit_in_bytes").read_text() == str(256 << 20)
    usage = root / "cpu" / "fedplane" / "online" / "cpuacct.usage"
    usage.write_text("1000000000")
    assert node.measure(10.0) is None  # the first reading starts the meter
    usage.write_text("2500000000")  # 1.5 s of CPU in 2 s
    assert node.measure(12.0) == 750
    assert node.take({"colocated": True, "reclaimed_milli": 1200, "quota_milli": 1500}) == 1200
    assert (batch / "cpu.cfs_quota_us").read_text() == "150000"
    assert node.take({"colocated": True, "reclaimed_milli": -1, "quota_milli": 5}) == 0  # malformed: ignored, quota kept
    assert (batch / "cpu.cfs_quota_us").read_text() == "150000"
    assert node.take({"colocated": False, "reclaimed_milli": 0, "quota_milli": 0}) == 0  # no batch in the cluster: uncapped
    assert (batch / "cpu.cfs_quota_us").read_text() == "-1"


def test_v2_meter_reads_cpu_stat_and_off_measures_nothing(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg")
    node = NodeColocation(IsolationSection(enabled=True, root=str(root)))
    node.start()
    stat = root / "fedplane" / "online" / "cpu.stat"
    stat.write_text("usage_usec 0\nuser_usec 0\n")
    node.measure(0.0)
    stat.write_text("usage_usec 500000\nuser_usec 0\n")
    assert node.measure(1.0) == 500
    node.take({"colocated": True, "reclaimed_milli": 0, "quota_milli": 2000})
    assert (root / "fedplane" / "batch" / "cpu.max").read_text() == "200000 100000"
    off = NodeColocation(IsolationSection(root=str(root)))
    off.start()
    assert off.measure(5.0) is None and off.take({"colocated": True, "reclaimed_milli": 700, "quota_milli": 0}) == 700


def test_check_says_what_isolation_would_write_and_names_an_unusable_tree(tmp_path: Path) -> None:
    root = v1_tree(tmp_path / "cg")
    problem, summary = colocation.check(IsolationSection(enabled=False, root=str(root), resctrl=str(tmp_path / "none")))
    assert problem is None and "isolation off" in summary and "cgroup v1" in summary and "absent (no /sys/fs/resctrl)" in summary
    problem, summary = colocation.check(IsolationSection(enabled=True, root=str(tmp_path / "nothing")))
    assert problem is not None and problem.startswith("isolation: no cpu controller") and "unavailable" in summary
    assert colocation.check(IsolationSection(enabled=False, root=str(tmp_path / "nothing")))[0] is None  # off: only said


def test_a_batch_pod_larger_than_any_escrow_binds_once_on_the_node_offering_reclaimed_cpu() -> None:
    sim = PlacementSim([Node(f"n{i:02d}", 4000, 16384) for i in range(3)], seed=3)
    sim.run(0.5)
    for name, placer in sim.agents.items():  # the plane's offers, as the acks carry them: only n01 reclaims
        placer.offer_reclaimed(2500 if name == "n01" else 0, sim.now)
    sim.cluster.submit(Pod("online", 100, 256, qos=QoS.LATENCY_SENSITIVE))
    sim.cluster.submit(Pod("batch", 6000, 1024, qos=QoS.BEST_EFFORT))
    sim.run(4.0)
    bound = {uid: sim.cluster.bound_node(uid) for uid in ("online", "batch")}
    assert bound["batch"] == "n01" and bound["online"]  # one winner for each, the batch pod where reclaimed CPU is offered
    holder = sim.agents["n01"]
    part = holder.reclaimed.held["batch"]  # what n01's escrow lacked (2 cores, or 2.1 with the online pod there first)
    assert part in (2000, 2100) and sim.cluster.pods["batch"].booked.cpu_milli == 6000 - part  # type: ignore[union-attr]
    assert [n for n, p in sim.agents.items() if "batch" in p.running] == ["n01"] and sim.cluster.evidence.capacity_refusals == 0
