"""Drills across real network boundaries: the control plane and each agent in its own network namespace.

One short region-partition run (the 5-run drills of both scenarios are the bench, hosts.sh). Skipped,
with the reason, where namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedplane.lab.drills import netns

REASON = netns.unavailable()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(REASON is not None, reason=f"ip netns unavailable: {REASON}")]


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def test_a_region_cut_off_on_its_own_links_reads_partitioned_and_strands_nothing(tmp_path: Path) -> None:
    before = namespaces()
    done = subprocess.run(
        [sys.executable, "-m", "fedplane", "drill", "failover", "--hosts", "netns", "--scenario", "region-partition",
         "--runs", "1", "--json", "--plot", str(tmp_path / "timeline.png")],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["verdicts"] == ["partitioned"] and out["hosts"].startswith("netns"), out
    assert out["lost"] == out["duplicated"] == out["healthy_evicted"] == out["stranded"] == 0, out
    assert out["success"] == 1.0 and out["unrecovered"] == 0, out  # the timing goal (p99 <= 5 s) is the bench's: hosts.sh
    assert namespaces() == before, "every namespace the run made is gone"


REACH = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=1.0)
except ConnectionRefusedError:
    sys.exit(0)  # the host answered (nothing listens on port 9): reachable
except OSError:
    sys.exit(1)  # no answer: the link is cut
"""


def reaches(namespace: str, address: str) -> bool:
    argv = ["ip", "netns", "exec", namespace, sys.executable, "-c", REACH, address]
    return subprocess.run(argv, capture_output=True, check=False, timeout=30).returncode == 0


def test_the_fabric_cuts_and_heals_a_real_link() -> None:
    with netns.Fabric(["x-n0", "x-n1"], tag=f"fpt{os.getpid() % 10000}") as fabric:
        cp_ns = fabric.control_plane
        assert reaches(cp_ns, fabric.control_address("x-n0")) and reaches(cp_ns, fabric.control_address("x-n1"))
        fabric.cut_off(["x-n0"])
        assert not reaches(cp_ns, fabric.control_address("x-n0")) and reaches(cp_ns, fabric.control_address("x-n1"))
        assert reaches(fabric.hosts["x-n0"][0], fabric.address("x-n1")), "the mesh stays up"
        fabric.heal(["x-n0"])
        assert reaches(cp_ns, fabric.control_address("x-n0"))
        made = {fabric.switch, cp_ns, *(ns for ns, _ in fabric.hosts.values())}
    assert not made & namespaces()
