"""Node isolation between online and batch pods: the cgroup settings the agent writes, v2 or v1.

Two groups under one parent: ``online`` at the highest CPU weight, ``batch`` at the lowest, with a CPU
quota and a memory ceiling the auction sets (:mod:`controlplane.auctions` grants the batch quota; under
online pressure it shrinks). The parent gets the highest weight too: a nested group competes with the rest of
the host only through its parent's weight (left at the default, online would get a default share). Which files: the cgroup version that holds each controller here —
v2 ``cpu.weight``/``cpu.max``/``memory.high`` where the unified hierarchy has ``cpu``/``memory``, else the
v1 ``cpu.shares``/``cpu.cfs_quota_us``/``memory.limit_in_bytes`` (v1 has no soft ``memory.high``: the hard
limit is the closest). Cache and memory-bandwidth partitioning (Intel RDT through ``/sys/fs/resctrl``) is
reported when mounted and otherwise named absent: on machines without it batch still shares the LLC.

:func:`settings` is pure (what to write); :func:`apply` does the writes; :func:`detect` reads the tree.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

PARENT = "fedplane"
ONLINE, BATCH = "online", "batch"
PERIOD_US = 100_000
"""The CFS period the quota is expressed in (the kernel's default)."""
V1_SHARES = (262_144, 2)
"""Online, batch ``cpu.shares``: the v1 extremes (online wins every contended tick)."""
V2_WEIGHTS = (10_000, 1)
"""Online, batch ``cpu.weight``: the v2 extremes."""


class Version(enum.Enum):
    V1 = "v1"
    V2 = "v2"


class IsolationError(RuntimeError):
    """The cgroup tree cannot be used (absent, read-only, controller missing): run without isolation or fix the host."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each controller lives: its version and the directory the ``fedplane`` parent goes under."""

    cpu: tuple[Version, Path]
    memory: tuple[Version, Path] | None
    resctrl: bool

    def describe(self) -> dict[str, str]:
        return {"cpu": f"cgroup {self.cpu[0].value} at {self.cpu[1]}",
                "memory": f"cgroup {self.memory[0].value} at {self.memory[1]}" if self.memory else "absent",
                "cache_partitioning": "resctrl mounted" if self.resctrl else "absent (no /sys/fs/resctrl): batch shares the LLC and memory bandwidth"}


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What batch may use now: CPU in millicores (None: no quota) and memory in bytes (None: no ceiling)."""

    cpu_milli: int | None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.cpu_milli is not None and self.cpu_milli < 0 or self.memory_bytes is not None and self.memory_bytes < 0:
            raise ValueError(f"batch limits must be >= 0, got cpu {self.cpu_milli}, memory {self.memory_bytes}")


def _controllers_v2(root: Path) -> set[str]:
    for unified in (root, root / "unified"):
        f = unified / "cgroup.controllers"
        if f.is_file():
            return {c for c in f.read_text().split()}
    return set()


def _v2_root(root: Path) -> Path:
    return root if (root / "cgroup.controllers").is_file() else root / "unified"


def detect(root: Path = Path("/sys/fs/cgroup"), resctrl: Path = Path("/sys/fs/resctrl")) -> Layout:
    """The layout of this host's cgroups: v2 for a controller the unified tree holds, else its v1 mount."""
    v2 = _controllers_v2(root)

    def where(controller: str, v1_file: str) -> tuple[Version, Path] | None:
        if controller in v2:
            return Version.V2, _v2_root(root)
        for name in (controller, f"{controller},cpuacct", f"cpu,{controller}"):
            if (root / name / v1_file).is_file():
                return Version.V1, root / name
        return None

    cpu = where("cpu", "cpu.shares")
    if cpu is None:
        raise IsolationError(f"no cpu controller under {root}: neither cgroup v2 (cgroup.controllers) nor a v1 cpu mount")
    return Layout(cpu, where("memory", "memory.limit_in_bytes"), (resctrl / "schemata").is_file())


def settings(layout: Layout, batch: BatchLimits) -> list[tuple[Path, str]]:
    """The writes, in order, that give online the node first and cap batch at ``batch``."""
    out: list[tuple[Path, str]] = []
    version, base = layout.cpu
    online, low = base / PARENT / ONLINE, base / PARENT / BATCH
    if version is Version.V2:
        enable = "+cpu" + (" +memory" if layout.memory else "")
        out += [(base / "cgroup.subtree_control", enable), (base / PARENT / "cgroup.subtree_control", enable)]
        out.append((base / PARENT / "cpu.weight", str(V2_WEIGHTS[0])))
        out.append((online / "cpu.weight", str(V2_WEIGHTS[0])))
        out.append((low / "cpu.weight", str(V2_WEIGHTS[1])))
        quota = "max" if batch.cpu_milli is None else str(max(1000, batch.cpu_milli * PERIOD_US // 1000))
        out.append((low / "cpu.max", f"{quota} {PERIOD_US}"))
    else:
        out.append((base / PARENT / "cpu.shares", str(V1_SHARES[0])))
        out.append((online / "cpu.shares", str(V1_SHARES[0])))
        out.append((low / "cpu.shares", str(V1_SHARES[1])))
        out.append((low / "cpu.cfs_period_us", str(PERIOD_US)))
        out.append((low / "cpu.cfs_quota_us", "-1" if batch.cpu_milli is None else str(max(1000, batch.cpu_milli * PERIOD_US // 1000))))
    if layout.memory:
        mversion, mbase = layout.memory
        mlow = mbase / PARENT / BATCH
        if mversion is Version.V2:
            out.append((mlow / "memory.high", "max" if batch.memory_bytes is None else str(batch.memory_bytes)))
        else:
            out.append((mlow / "memory.limit_in_bytes", "-1" if batch.memory_bytes is None else str(batch.memory_bytes)))
    return out


def apply(layout: Layout, batch: BatchLimits) -> list[tuple[Path, str]]:
    """Create the groups (idempotent) and write :func:`settings`; returns what was written."""
    writes = settings(layout, batch)
    try:
        for group in groups(layout):
            group.mkdir(parents=True, exist_ok=True)
        for path, value in writes:
            path.write_text(value)
    except OSError as exc:
        raise IsolationError(f"cannot write cgroup settings ({exc.strerror or exc}: {exc.filename})") from None
    return writes


def online_usage_ns(layout: Layout) -> int:
    """CPU time the ``online`` group used since it was made (ns): v2 ``cpu.stat`` usage_usec, v1 ``cpuacct.usage``
    (the ``cpu,cpuacct`` mount holds it beside the cpu files)."""
    version, base = layout.cpu
    group = base / PARENT / ONLINE
    try:
        if version is Version.V2:
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
            raise IsolationError(f"{group / 'cpu.stat'} has no usage_usec line")
        return int((group / "cpuacct.usage").read_text().strip())
    except OSError as exc:
        raise IsolationError(f"cannot read the online group's CPU use ({exc.strerror or exc}: {exc.filename})") from None
    except ValueError:
        raise IsolationError(f"the online group's CPU use under {group} is not a number") from None


def groups(layout: Layout) -> list[Path]:
    """Every group directory the settings touch (cpu's, then memory's)."""
    out = [layout.cpu[1] / PARENT / ONLINE, layout.cpu[1] / PARENT / BATCH]
    if layout.memory and layout.memory[1] != layout.cpu[1]:
        out.append(layout.memory[1] / PARENT / BATCH)
    return out


def attach(layout: Layout, cls: str, pid: int) -> None:
    """Move a process into its class's groups (``online`` or ``batch``) in every controller."""
    if cls not in (ONLINE, BATCH):
        raise ValueError(f"unknown class {cls!r}; choose online or batch")
    targets = [layout.cpu[1] / PARENT / cls]
    if layout.memory and cls == BATCH and layout.memory[1] != layout.cpu[1]:
        targets.append(layout.memory[1] / PARENT / cls)
    try:
        for t in targets:
            (t / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        raise IsolationError(f"cannot move pid {pid} into {cls} ({exc.strerror or exc}: {exc.filename})") from None


def remove(layout: Layout) -> None:
    """Remove the groups (after their processes left): best effort, a busy group stays."""
    for g in [*groups(layout), layout.cpu[1] / PARENT] + ([layout.memory[1] / PARENT] if layout.memory else []):
        try:
            os.rmdir(g)
        except OSError:
            pass
