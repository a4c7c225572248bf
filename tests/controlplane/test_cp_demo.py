"""``fedplane demo`` end to end as a user runs it: a real process with real agent processes, a short run.

Judged by its own report (nothing lost, nothing duplicated, the outage detected and recovered), the
PNG it promises, and the processes it leaves: none (the agents' work directories live under the
test's TMPDIR, so any process still naming it is a leak).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from fedplane.cli import main


def test_demo_has_help() -> None:
    result = CliRunner().invoke(main, ["demo", "--help"])
    assert result.exit_code == 0 and "--traces" in result.output and "--out" in result.output


def _ours(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


@pytest.mark.integration
def test_short_demo_recovers_safely_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedplane", "demo", "--pods", "60", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp)}, start_new_session=True,
    )
    try:
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, output
    report = json.loads((out / "demo-report.json").read_text())
    drill = report["drill"]
    assert drill["pods_lost"] == 0 and drill["pods_duplicated"] == 0 and drill["verdict"] == "PASS", drill
    assert drill["detect_s"] is not None and drill["recovery_s"] is not None
    assert report["fleet"]["agent_processes"] == 9 and report["workload"]["pods"] == 60
    assert sum(p["ready_at_recovery"] for p in report["placements"]) == 60
    assert next(p for p in report["placements"] if p["cluster"] == drill["victim"])["ready_at_recovery"] == 0
    png = Path(report["png"])
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "cluster-outage drill" in output and "evidence: verdict:down" in " ".join(output.split())
    scaled = report["autoscale"]   # one workload autoscaled by the control plane, its decisions journaled
    assert scaled["fallback"] is None and scaled["scaling_decisions"] >= 3 and scaled["replicas_max"] > scaled["replicas_min"]
    assert all("replicas:" in r for r in scaled["reasons"]) and Path(scaled["png"]).stat().st_size > 10_000
    assert "autoscale decision:" in output
    assert _ours(str(tmp)) == [], "agent processes outlived the demo"
