"""Node isolation: which cgroup files the agent writes, on fake v1 and v2 trees (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeagent import colocation, isolation
from edgeagent.config import IsolationSection
from edgeagent.isolation import BatchLimits, Version


def v1_tree(root: Path) -> Path:
    for controller, probe in (("cpu", "cpu.shares"), ("memory", "memory.limit_in_bytes")):
        (root / controller).mkdir(parents=True)
        (root / controller / probe).write_text("1024\n")
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")  # a hybrid host: v2 holds only hugetlb
    return root


def v2_tree(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return root


def test_v1_holds_cpu_and_memory_on_a_hybrid_host(tmp_path: Path) -> None:
    layout = isolation.detect(v1_tree(tmp_path / "cg"), tmp_path / "resctrl")
    assert layout.cpu == (Version.V1, tmp_path / "cg" / "cpu")
    assert layout.memory == (Version.V1, tmp_path / "cg" / "memory")
    assert "absent" in layout.describe()["cache_partitioning"]
    isolation.apply(layout, BatchLimits(1500, 256 << 20))
    cpu, mem = tmp_path / "cg" / "cpu" / "fedplane", tmp_path / "cg" / "memory" / "fedplane"
    assert (cpu / "cpu.shares").read_text() == (cpu / "online" / "cpu.shares").read_text() == "262144"
    assert (cpu / "batch" / "cpu.shares").read_text() == "2"
    assert (cpu / "batch" / "cpu.cfs_quota_us").read_text() == "150000"  # 1.5 cores of a 100 ms period
    assert (mem / "batch" / "memory.limit_in_bytes").read_text() == str(256 << 20)
    isolation.apply(layout, BatchLimits(None, None))
    assert (cpu / "batch" / "cpu.cfs_quota_us").read_text() == "-1"
    assert (mem / "batch" / "memory.limit_in_bytes").read_text() == "-1"


def test_v2_writes_weight_max_and_memory_high(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg")
    (tmp_path / "resctrl").mkdir()
    (tmp_path / "resctrl" / "schemata").write_text("L3:0=fff\n")
    layout = isolation.detect(root, tmp_path / "resctrl")
    assert layout.cpu == layout.memory == (Version.V2, root)
    assert layout.describe()["cache_partitioning"] == "resctrl mounted"
    isolation.apply(layout, BatchLimits(500, 1 << 30))
    group = root / "fedplane"
    assert (group / "cgroup.subtree_control").read_text() == "+cpu +memory"
    assert (group / "online" / "cpu.weight").read_text() == "10000"
    assert (group / "batch" / "cpu.weight").read_text() == "1"
    assert (group / "batch" / "cpu.max").read_text() == "50000 100000"
    assert (group / "batch" / "memory.high").read_text() == str(1 << 30)
    isolation.apply(layout, BatchLimits(0))
    assert (group / "batch" / "cpu.max").read_text() == "1000 100000"  # the kernel's least quota: 1 ms a period
    assert (group / "batch" / "memory.high").read_text() == "max"


def test_attach_and_errors(tmp_path: Path) -> None:
    layout = isolation.detect(v1_tree(tmp_path / "cg"), tmp_path / "resctrl")
    isolation.apply(layout, BatchLimits(1000))
    isolation.attach(layout, "batch", 4242)
    assert (tmp_path / "cg" / "cpu" / "fedplane" / "batch" / "cgroup.procs").read_text() == "4242"
    assert (tmp_path / "cg" / "memory" / "fedplane" / "batch" / "cgroup.procs").read_text() == "4242"
    with pytest.raises(ValueError, match="unknown class"):
        isolation.attach(layout, "gold", 1)
    with pytest.raises(isolation.IsolationError, match="no cpu controller"):
        isolation.detect(tmp_path / "empty")
    with pytest.raises(ValueError):
        BatchLimits(-1)


def kubelet_tree(root: Path, version: Version, driver: str) -> tuple[Path, Path, Path]:
    """A node's cgroups as kubelet leaves them: its pod parent and BestEffort parent per controller (none of ours); returns
    the root and the cpu controller's pod and BestEffort directories."""
    pods, besteffort = {"systemd": ("kubepods.slice", "kubepods.slice/kubepods-besteffort.slice"),
                        "cgroupfs": ("kubepods", "kubepods/besteffort")}[driver]
    if version is Version.V2:
        bases = {"cpu": v2_tree(root)}
    else:
        bases = {"cpu": root / "cpu,cpuacct", "memory": root / "memory"}
        for probe, base in (("cpu.shares", bases["cpu"]), ("memory.limit_in_bytes", bases["memory"])):
            base.mkdir(parents=True)
            (base / probe).write_text("1024\n")
    for base in bases.values():
        (base / besteffort).mkdir(parents=True)
        (base / pods / "kubepods-burstable.slice" if driver == "systemd" else base / pods / "burstable").mkdir()
    return root, bases["cpu"] / pods, bases["cpu"] / besteffort


def use(group: Path, version: Version, ns: int) -> None:
    if version is Version.V2:
        (group / "cpu.stat").write_text(f"usage_usec {ns // 1000}\nuser_usec 0\nsystem_usec 0\n")
    else:
        (group / "cpuacct.usage").write_text(f"{ns}\n")


@pytest.mark.parametrize("version", [Version.V1, Version.V2])
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_on_kubernetes_batch_is_capped_in_kubelets_besteffort_group_and_online_metered_as_the_rest(
        tmp_path: Path, version: Version, driver: str) -> None:
    root, pods, besteffort = kubelet_tree(tmp_path / "cg", version, driver)
    layout = isolation.detect(root, tmp_path / "resctrl", kubelet=True)
    assert layout.groups.kubelet == driver and layout.cpu[1] / layout.groups.batch == besteffort
    written = dict(isolation.apply(layout, BatchLimits(1500, 256 << 20)))
    if version is Version.V2:
        assert written == {besteffort / "cpu.weight": "1", besteffort / "cpu.max": "150000 100000", besteffort / "memory.high": str(256 << 20)}
    else:
        memory = root / "memory" / layout.groups.batch
        assert written == {besteffort / "cpu.shares": "2", besteffort / "cpu.cfs_period_us": "100000",
                           besteffort / "cpu.cfs_quota_us": "150000", memory / "memory.limit_in_bytes": str(256 << 20)}
    assert not list(root.rglob(isolation.PARENT)) and not (pods / "cpu.weight").exists()  # kubelet's weights stay kubelet's
    use(pods, version, 9_000_000_000)
    use(besteffort, version, 4_000_000_000)
    assert isolation.online_usage_ns(layout) == 5_000_000_000  # burstable and guaranteed: all pods less BestEffort
    with pytest.raises(isolation.IsolationError, match="kubelet places pods"):
        isolation.attach(layout, "batch", 4242)
    isolation.remove(layout)
    assert besteffort.is_dir()
    problem, summary = colocation.check(IsolationSection(enabled=True, root=str(root), resctrl=str(tmp_path / "resctrl")), kubelet=True)
    assert problem is None and f"kubelet's ({driver} driver): batch in {layout.groups.batch}" in summary


def test_on_kubernetes_without_kubelets_groups_isolation_says_what_it_looked_for(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg")
    with pytest.raises(isolation.IsolationError, match="neither kubepods.slice/kubepods-besteffort.slice.*nor kubepods/besteffort"):
        isolation.detect(root, tmp_path / "resctrl", kubelet=True)
    problem, _ = colocation.check(IsolationSection(enabled=True, root=str(root), resctrl=str(tmp_path / "resctrl")), kubelet=True)
    assert problem is not None and "no kubelet QoS cgroups" in problem
    assert "fedplane/online and fedplane/batch (made here)" in colocation.check(IsolationSection(root=str(root)))[1]
