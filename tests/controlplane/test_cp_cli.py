"""CLI input errors end with a clear message and exit code 2, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fedplane.cli import main


@pytest.mark.parametrize("args, message", [
    (["controlplane", "clusters", "--register", "x"], "--register needs --region"),
    (["controlplane", "submit", "web", "--toleration", ":NoSchedule", "--target", "127.0.0.1:9"], "bad toleration"),
    (["controlplane", "migrate", "--target", "127.0.0.1:9"], "give --workload and --source"),
    (["controlplane", "clusters", "--tls-cert", "a.pem"], "mTLS needs all of"),
    (["controlplane", "placements", "--target", "127.0.0.1:9"], "GetPlacements at 127.0.0.1:9: UNAVAILABLE"),
])
def test_client_errors_are_clear(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_serve_rejects_an_unusable_score_profile() -> None:
    result = CliRunner().invoke(main, ["controlplane", "serve", "--score-profile", "nope", "--db", ":memory:"])
    assert result.exit_code == 2 and "unknown profile 'nope'" in " ".join(result.output.split())


def test_serve_rejects_a_bad_kubeconfig(tmp_path: object) -> None:
    result = CliRunner().invoke(main, ["controlplane", "serve", "--kubeconfig", "/nonexistent/kubeconfig", "--db", ":memory:"])
    assert result.exit_code == 2 and "cannot read kubeconfig" in " ".join(result.output.split())


@pytest.mark.integration
def test_cli_against_a_served_control_plane(tmp_path: object) -> None:
    import json
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve", "--twin-clusters", "3",
         "--regions", "2", "--port", str(port), "--agent-port", "0", "--metrics-port", "-1", "--db", str(Path(str(tmp_path)) / "cp.db"),
         "--insecure"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    target = ["--target", f"127.0.0.1:{port}", "--json"]
    runner = CliRunner()
    try:
        deadline = time.monotonic() + 30
        while True:
            listed = runner.invoke(main, ["controlplane", "clusters", *target])
            if listed.exit_code == 0 and json.loads(listed.stdout).get("clusters", [{}])[0].get("verdict", {}).get("health") == "healthy":
                break
            assert time.monotonic() < deadline, listed.output
            time.sleep(0.3)
        dry = runner.invoke(main, ["controlplane", "submit", "web", "--replicas", "4", "--spread", "regions", "--dry-run", *target])
        assert dry.exit_code == 0 and json.loads(dry.stdout)["dry_run"]
        done = runner.invoke(main, ["controlplane", "submit", "web", "--replicas", "4", "--spread", "regions", *target])
        assert done.exit_code == 0, done.output
        placed = json.loads(runner.invoke(main, ["controlplane", "placements", *target]).stdout)
        assert sum(p["replicas"] for p in placed["workloads"][0]["placements"]) == 4
        refused = runner.invoke(main, ["controlplane", "submit", "huge", "--cpu", "999", *target])
        assert refused.exit_code == 1 and not json.loads(refused.stdout).get("accepted", False)
        kinds = {d["kind"] for d in json.loads(runner.invoke(main, ["controlplane", "decisions", *target]).stdout)["decisions"]}
        assert {"place", "verdict:healthy"} <= kinds
    finally:
        proc.terminate()
        proc.wait(10)
