"""What the agent knows of its own node: capacity and labels once, load over time.

Two probes behind :class:`NodeProbe`: :class:`RealProbe` reads this machine (cgroup v2
limits first, because in a container or a systemd slice they are the real capacity,
then psutil and /proc), :class:`TwinProbe` asks the twin cluster for the node's
description and reports the share of it the agent has reserved as its load.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from fedcore.nodes import Arch, Node

from edgeagent.clusters import ClusterAPI

CGROUP = Path("/sys/fs/cgroup")
_ARCHS = {"x86_64": Arch.AMD64, "amd64": Arch.AMD64, "aarch64": Arch.ARM64, "arm64": Arch.ARM64,
          "armv7l": Arch.ARMV7, "armv7": Arch.ARMV7}


class NodeProbe(Protocol):
    async def describe(self) -> Node: ...

    def load(self) -> float:
        """Recent CPU utilisation of the node, 0-1 (may exceed 1 when over-subscribed)."""
        ...


def detect_arch(override: str = "") -> Arch:
    machine = override or platform.machine().lower()
    return _ARCHS.get(machine, Arch.AMD64)


def cgroup_cpu_milli(root: Path = CGROUP) -> int | None:
    """The cgroup v2 CPU limit in milli-cores, or None when unlimited or not on cgroup v2."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(int(quota) * 1000 / int(period))


def cgroup_memory_mib(root: Path = CGROUP) -> int | None:
    try:
        raw = (root / "memory.max").read_text().strip()
    except OSError:
        return None
    return None if raw == "max" else int(raw) // 2**20


class RealProbe:
    """This machine, as seen from inside its cgroup."""

    def __init__(self, name: str, cluster: str, data_dir: Path, arch: str = "", labels: dict[str, str] | None = None,
                 cgroup: Path = CGROUP) -> None:
        self.name, self.cluster, self.data_dir = name, cluster, data_dir
        self.arch = detect_arch(arch)
        self.labels = dict(labels or {})
        self.cgroup = cgroup
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(None)  # primes the counter: the next call reports usage since now

    async def describe(self) -> Node:
        cpu = cgroup_cpu_milli(self.cgroup) or (os.cpu_count() or 1) * 1000
        memory = cgroup_memory_mib(self.cgroup) or self._psutil.virtual_memory().total // 2**20
        fs = os.statvfs(self.data_dir)
        disk = fs.f_blocks * fs.f_frsize // 2**20  # shutil.disk_usage's total, without importing shutil (and its archivers)
        labels = {"kubernetes.io/arch": self.arch.value, **self.labels}
        return Node(self.name, cpu, memory, disk, arch=self.arch, cluster=self.cluster, labels=labels)

    def load(self) -> float:
        return float(self._psutil.cpu_percent(None)) / 100.0


class TwinProbe:
    """A twin node: described by the cluster, loaded by what the agent has reserved on it."""

    def __init__(self, name: str, cluster: ClusterAPI, reserved_share: Callable[[], float]) -> None:
        self.name = name
        self.cluster = cluster
        self.reserved_share = reserved_share

    async def describe(self) -> Node:
        return await self.cluster.describe_node(self.name)

    def load(self) -> float:
        return self.reserved_share()
