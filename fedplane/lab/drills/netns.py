"""Hosts on one machine: the control plane and each edge agent in its own Linux network namespace.

A drill with ``--hosts netns`` builds this fabric, runs the control plane inside the ``cp``
namespace (the drill process enters it) and starts each agent with ``ip netns exec`` in its own.
Two bridges live in a switch namespace of their own:

* the control network (10.231.0.0/16): the control plane (10.231.0.1) and every agent's
  ``ctl`` interface — the twin link (watch, binds, reports) and the agents' HTTP endpoints;
* the mesh (10.232.0.0/16): every agent's ``mesh`` interface — cluster gossip and the
  federation pool.

``cut_off`` sets the switch side of the nodes' control links down: a real partition (packets
vanish, connections stall, connects time out) between them and the control plane, while they
keep gossiping over the mesh; ``isolate`` cuts every link of the hosts (control, agent link and
mesh: a whole-host cut); ``heal`` sets them all up again. Every address exists only inside
namespaces this object creates, and :meth:`Fabric.close` deletes them all (the root namespace
gets nothing). Loss, delay and duplication cannot come from the kernel here (no netem, no
iptables): see :mod:`gossip.lossy` for the user-space wrapper.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

CLONE_NEWNET = 0x40000000
CONTROL_NET, MESH_NET = "10.231", "10.232"
CONTROL_PLANE_ADDRESS = f"{CONTROL_NET}.0.1"
DESCRIPTION = ("netns: the control plane and each agent in its own network namespace; control network and agent mesh on "
               "two bridges; a region partition sets the region's control links down, a host partition every link of the host")


class NetnsError(RuntimeError):
    """The fabric could not be built or entered (not root, no ``ip``, a kernel without namespaces)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def unavailable() -> str | None:
    """Why network namespaces cannot be used here (None: they can): root, ``ip`` and a test namespace."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"fpprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "br0", "type", "bridge")
    except NetnsError as exc:
        return f"cannot create a network namespace with a bridge: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _setns(path: str) -> None:
    """Move the calling thread into the network namespace at ``path`` (threads it starts later follow)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


class Fabric:
    """The namespaces, bridges and links for ``nodes`` (one agent host each) and the control plane.

    Implements :class:`fedplane.lab.drills.agentfleet.Hosts`. Use as a context manager: ``with
    Fabric(nodes) as fabric: fabric.enter()`` — leaving returns the thread to its namespace and
    deletes everything.
    """

    def __init__(self, nodes: Sequence[str], tag: str = "") -> None:
        if len(nodes) > 250:
            raise ValueError(f"at most 250 agent hosts, got {len(nodes)}")
        self.tag = tag or f"fp{os.getpid() % 100000}"
        self.switch, self.control_plane = f"{self.tag}-sw", f"{self.tag}-cp"
        self.hosts = {node: (f"{self.tag}-a{i}", i) for i, node in enumerate(nodes)}
        self._created: list[str] = []
        self._home: int | None = None

    # -- Hosts -----------------------------------------------------------------------------------
    def address(self, node: str) -> str:
        """The node's mesh address (gossip, federation pool)."""
        return f"{MESH_NET}.1.{self.hosts[node][1] + 1}"

    def control_address(self, node: str) -> str:
        """The node's control-network address (twin link client, HTTP endpoints)."""
        return f"{CONTROL_NET}.1.{self.hosts[node][1] + 1}"

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[node][0], *argv]

    def cut_off(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            _ip("-n", self.switch, "link", "set", f"c{self.hosts[node][1]}", "down")

    def isolate(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            for link in ("c", "m"):
                _ip("-n", self.switch, "link", "set", f"{link}{self.hosts[node][1]}", "down")

    def heal(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            for link in ("c", "m"):
                _ip("-n", self.switch, "link", "set", f"{link}{self.hosts[node][1]}", "up")

    # -- building and tearing down ------------------------------------------------------------------
    def __enter__(self) -> Fabric:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def enter(self) -> None:
        """Move this thread into the control plane's namespace (where the drill then serves and measures)."""
        if self._home is None:
            self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        _setns(f"/run/netns/{self.control_plane}")

    def close(self) -> None:
        """Return to the original namespace and delete every namespace (and so every link and address) made here."""
        if self._home is not None:
            try:
                libc = ctypes.CDLL("libc.so.6", use_errno=True)
                libc.setns(self._home, CLONE_NEWNET)
            finally:
                os.close(self._home)
                self._home = None
        for name in reversed(self._created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self._created.clear()

    def _add(self, name: str) -> None:
        if Path(f"/run/netns/{name}").exists():
            raise NetnsError(f"network namespace {name} already exists (another run, or one left behind)")
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _link(self, host: str, switch_side: str, host_side: str, bridge: str, address: str) -> None:
        _ip("-n", self.switch, "link", "add", switch_side, "type", "veth", "peer", "name", host_side, "netns", host)
        _ip("-n", self.switch, "link", "set", switch_side, "master", bridge, "up")
        _ip("-n", host, "addr", "add", f"{address}/16", "dev", host_side)
        _ip("-n", host, "link", "set", host_side, "up")

    def _build(self) -> None:
        self._add(self.switch)
        for bridge in ("brc", "brm"):
            _ip("-n", self.switch, "link", "add", bridge, "type", "bridge")
            _ip("-n", self.switch, "link", "set", bridge, "up")
        self._add(self.control_plane)
        self._link(self.control_plane, "ccp", "ctl", "brc", CONTROL_PLANE_ADDRESS)
        for node, (name, i) in self.hosts.items():
            self._add(name)
            self._link(name, f"c{i}", "ctl", "brc", self.control_address(node))
            self._link(name, f"m{i}", "mesh", "brm", self.address(node))
