"""Node isolation: which cgroup files the agent writes, on fake v1 and v2 trees (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeagent import isolation
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
