"""A real Prometheus scrapes a real ``fedplane controlplane serve`` process; the test asks Prometheus's HTTP API.

Needs the ``prometheus`` binary (Debian package ``prometheus``); skipped with a reason when absent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedcore.loopback import free_ports

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus binary not installed (apt-get install -y prometheus)"),
]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what} not seen in {timeout}s (last: {last!r})")


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[tuple[int, int]]:
    grpc_port, metrics_port, prom_port = free_ports(3)
    serve = subprocess.Popen(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve", "--twin-clusters", "2", "--port", str(grpc_port),
         "--agent-port", "0", "--metrics-port", str(metrics_port), "--db", str(tmp_path / "cp.db"), "--insecure"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: fedplane\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    prom = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield prom_port, serve.pid
    finally:
        for proc in (prom, serve):
            proc.terminate()
        for proc in (prom, serve):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def query(prom_port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = get_json(url)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def test_prometheus_scrapes_the_control_plane(processes: tuple[int, int]) -> None:
    prom_port, _pid = processes
    targets = wait_for(
        lambda: [t for t in get_json(f"http://127.0.0.1:{prom_port}/api/v1/targets")["data"]["activeTargets"] if t["health"] == "up"],
        60, "an up scrape target",
    )
    assert targets[0]["labels"]["job"] == "fedplane"
    failed = wait_for(lambda: query(prom_port, "fedplane_cluster_failed"), 30, "fedplane_cluster_failed series")
    assert sorted(r["metric"]["cluster"] for r in failed) == ["c0", "c1"]
    assert all(r["value"][1] == "0" for r in failed)
    healthy = query(prom_port, 'fedplane_cluster_health{health="healthy"} == 1')
    assert len(healthy) == 2
    ticks = wait_for(lambda: [r for r in query(prom_port, "fedplane_tick_seconds_count") if float(r["value"][1]) > 0], 30, "ticks")
    assert float(ticks[0]["value"][1]) > 0
