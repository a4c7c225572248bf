"""Node isolation between online and batch pods: the cgroup settings the agent writes, v2 or v1.

Two groups under one parent: ``online`` at the highest CPU weight, ``batch`` at the lowest, with a CPU
quota and a memory ceiling the auction sets (:mod:`controlplane.auctions` grants the batch quota; under
online pressure it shrinks). The parent gets the highest weight too: a nested group competes with the rest of
the host only through its parent's weight (left at the default, online would get a default share). Which files: the cgroup version that holds each controller here —
v2 ``cpu.weight``/``cpu.max``/``memory.high`` where the unified hierarchy has ``cpu``/``memory``, else the
v1 ``cpu.shares``/``cpu.cfs_quota_us``/``memory.limit_in_bytes`` (v1 has no soft ``memory.high``: the hard
limit is the closest). Cache and memory-bandwidth partitioning (Intel RDT through ``/sys/fs/resctrl``) is
reported when mounted and otherwise named absent: on machines without it batch still shares the LLC.

On Kubernetes the pods are kubelet's to place in cgroups, not ours: its QoS parents (``kubepods/besteffort`` with the
cgroupfs driver, ``kubepods.slice/kubepods-besteffort.slice`` with systemd's, under v1 or v2). There batch is capped in
the BestEffort parent and online is metered as all pods less BestEffort (burstable and guaranteed); kubelet makes the
groups and weights the others, so nothing is made, weighted or removed but that parent's quota and ceiling.

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
class Groups:
    """Where online and batch run, relative to each controller's directory: ours (``fedplane/online``, ``fedplane/batch``),
    or kubelet's (``kubelet`` names its cgroup driver): batch in its BestEffort parent, online metered as ``online`` (all
    its pods) less ``less`` (BestEffort)."""

    online: str = f"{PARENT}/{ONLINE}"
    batch: str = f"{PARENT}/{BATCH}"
    less: str = ""
    kubelet: str = ""

    def describe(self) -> str:
        if not self.kubelet:
            return f"{self.online} and {self.batch} (made here)"
        return f"kubelet's ({self.kubelet} driver): batch in {self.batch}, online metered as {self.online} less {self.less}"


KUBELET = (("systemd", "kubepods.slice", "kubepods.slice/kubepods-besteffort.slice"), ("cgroupfs", "kubepods", "kubepods/besteffort"))
"""Kubelet's pod parent and BestEffort parent per cgroup driver (the same names under v1 and v2)."""


def kubelet_groups(base: Path) -> Groups:
    """Kubelet's QoS groups under ``base`` (a controller's directory), whichever driver made them."""
    for driver, pods, besteffort in KUBELET:
        if (base / besteffort).is_dir():
            return Groups(pods, besteffort, besteffort, driver)
    raise IsolationError(f"no kubelet QoS cgroups under {base} (neither kubepods.slice/kubepods-besteffort.slice, systemd driver, "
                         "nor kubepods/besteffort, cgroupfs): is kubelet running on this node with cgroupsPerQOS?")


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each controller lives: its version and the directory the ``fedplane`` parent goes under."""

    cpu: tuple[Version, Path]
    memory: tuple[Version, Path] | None
    resctrl: bool
    groups: Groups = Groups()

    def describe(self) -> dict[str, str]:
        return {"groups": self.groups.describe(), "cpu": f"cgroup {self.cpu[0].value} at {self.cpu[1]}",
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


def detect(root: Path = Path("/sys/fs/cgroup"), resctrl: Path = Path("/sys/fs/resctrl"), kubelet: bool = False) -> Layout:
    """The layout of this host's cgroups: v2 for a controller the unified tree holds, else its v1 mount; ``kubelet``:
    the pods run in kubelet's QoS groups (the agent's back end is Kubernetes)."""
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
    memory = where("memory", "memory.limit_in_bytes")
    if not kubelet:
        return Layout(cpu, memory, (resctrl / "schemata").is_file())
    groups = kubelet_groups(cpu[1])
    if memory and not (memory[1] / groups.batch).is_dir():
        memory = None  # kubelet made no BestEffort group there: no ceiling to set
    return Layout(cpu, memory, (resctrl / "schemata").is_file(), groups)


def settings(layout: Layout, batch: BatchLimits) -> list[tuple[Path, str]]:
    """The writes, in order, that give online the node first and cap batch at ``batch``."""
    out: list[tuple[Path, str]] = []
    version, base = layout.cpu
    ours = not layout.groups.kubelet  # kubelet's groups: kubelet enables controllers and weights all but BestEffort
    online, low = base / layout.groups.online, base / layout.groups.batch
    if version is Version.V2:
        enable = "+cpu" + (" +memory" if layout.memory else "")
        if ours:
            out += [(base / "cgroup.subtree_control", enable), (base / PARENT / "cgroup.subtree_control", enable)]
            out.append((base / PARENT / "cpu.weight", str(V2_WEIGHTS[0])))
            out.append((online / "cpu.weight", str(V2_WEIGHTS[0])))
        out.append((low / "cpu.weight", str(V2_WEIGHTS[1])))
        quota = "max" if batch.cpu_milli is None else str(max(1000, batch.cpu_milli * PERIOD_US // 1000))
        out.append((low / "cpu.max", f"{quota} {PERIOD_US}"))
    else:
        if ours:
            out.append((base / PARENT / "cpu.shares", str(V1_SHARES[0])))
            out.append((online / "cpu.shares", str(V1_SHARES[0])))
        out.append((low / "cpu.shares", str(V1_SHARES[1])))
        out.append((low / "cpu.cfs_period_us", str(PERIOD_US)))
        out.append((low / "cpu.cfs_quota_us", "-1" if batch.cpu_milli is None else str(max(1000, batch.cpu_milli * PERIOD_US // 1000))))
    if layout.memory:
        mversion, mbase = layout.memory
        mlow = mbase / layout.groups.batch
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
            if layout.groups.kubelet and not group.is_dir():
                raise IsolationError(f"kubelet's BestEffort group {group} is gone (kubelet not running, or its driver changed)")
            group.mkdir(parents=True, exist_ok=True)
        for path, value in writes:
            path.write_text(value)
    except OSError as exc:
        raise IsolationError(f"cannot write cgroup settings ({exc.strerror or exc}: {exc.filename})") from None
    return writes


def online_usage_ns(layout: Layout) -> int:
    """CPU time online pods used since their group was made (ns): the ``online`` group's, less the ``less`` group's (kubelet's
    BestEffort, inside its pod parent); only differences between two reads mean anything."""
    version, base = layout.cpu
    less = _usage_ns(version, base / layout.groups.less) if layout.groups.less else 0
    return _usage_ns(version, base / layout.groups.online) - less


def _usage_ns(version: Version, group: Path) -> int:
    """A group's CPU time (ns): v2 ``cpu.stat`` usage_usec, v1 ``cpuacct.usage`` (the ``cpu,cpuacct`` mount holds it
    beside the cpu files)."""
    try:
        if version is Version.V2:
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
            raise IsolationError(f"{group / 'cpu.stat'} has no usage_usec line")
        return int((group / "cpuacct.usage").read_text().strip())
    except OSError as exc:
        raise IsolationError(f"cannot read online pods' CPU use ({exc.strerror or exc}: {exc.filename})") from None
    except ValueError:
        raise IsolationError(f"the CPU use under {group} is not a number") from None


def groups(layout: Layout) -> list[Path]:
    """Every group directory the settings touch (cpu's, then memory's)."""
    g = layout.groups
    out = [layout.cpu[1] / g.batch] if g.kubelet else [layout.cpu[1] / g.online, layout.cpu[1] / g.batch]
    if layout.memory and layout.memory[1] != layout.cpu[1]:
        out.append(layout.memory[1] / g.batch)
    return out


def attach(layout: Layout, cls: str, pid: int) -> None:
    """Move a process into its class's groups (``online`` or ``batch``) in every controller."""
    if cls not in (ONLINE, BATCH):
        raise ValueError(f"unknown class {cls!r}; choose online or batch")
    if layout.groups.kubelet:
        raise IsolationError("kubelet places pods in its own cgroups: nothing is attached by hand")
    targets = [layout.cpu[1] / PARENT / cls]
    if layout.memory and cls == BATCH and layout.memory[1] != layout.cpu[1]:
        targets.append(layout.memory[1] / PARENT / cls)
    try:
        for t in targets:
            (t / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        raise IsolationError(f"cannot move pid {pid} into {cls} ({exc.strerror or exc}: {exc.filename})") from None


def remove(layout: Layout) -> None:
    """Remove the groups (after their processes left): best effort, a busy group stays; kubelet's are kubelet's."""
    if layout.groups.kubelet:
        return
    for g in [*groups(layout), layout.cpu[1] / PARENT] + ([layout.memory[1] / PARENT] if layout.memory else []):
        try:
            os.rmdir(g)
        except OSError:
            pass
