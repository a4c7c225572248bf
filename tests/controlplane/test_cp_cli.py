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
