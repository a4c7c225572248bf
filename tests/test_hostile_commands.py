"""Ordinary mistakes end with a message naming the bad input and a non-zero exit, never a traceback.

Each case runs the ``fedplane`` command as a user would (a fresh interpreter, the real
entry point), so what is checked is what a user sees.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

OPENB = "alibaba-openb"


def fedplane(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fedplane", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def refused(result: subprocess.CompletedProcess[str], *named: str) -> None:
    """Non-zero, no traceback, and the message names every piece of the bad input given."""
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Traceback (most recent call last)" not in out, out
    flat = " ".join(out.split())  # rich wraps long lines
    for name in named:
        assert name in flat or name in out.replace("\n", ""), f"{name!r} not named in: {out}"


def agent_config(tmp_path: Path, name: str, bind: str = "127.0.0.1:0", key: str = "", data: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    data = data or str(tmp_path / "data")
    path.write_text(
        f"node: n0\ncluster: c0\ndata_dir: {data}\n"
        f'gossip: {{bind: "{bind}", seeds: [], key_file: "{key}"}}\n'
        f'backend: {{kind: twin, address: "127.0.0.1:1", timeout: 0.5}}\nhttp: {{bind: "127.0.0.1:0"}}\n'
    )
    return path


def good_key(tmp_path: Path) -> Path:
    key = tmp_path / "ok.key"
    key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    return key


def test_agent_check_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    refused(fedplane("agent", "--config", str(agent_config(tmp_path, "port", bind="127.0.0.1:99999")), "--check"),
            "gossip.bind", "99999")


def test_agent_check_refuses_a_missing_key_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.key"
    refused(fedplane("agent", "--config", str(agent_config(tmp_path, "nokey", key=str(missing))), "--check"),
            "gossip.key_file", str(missing))


@pytest.mark.parametrize("content", ["not base64 at all\n", base64.b64encode(b"short").decode() + "\n", "# only a comment\n"])
def test_agent_check_refuses_a_malformed_key_file(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text(content)
    refused(fedplane("agent", "--config", str(agent_config(tmp_path, "badkey", key=str(bad))), "--check"),
            "gossip.key_file", str(bad))


def test_agent_check_refuses_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.touch()
    refused(fedplane("agent", "--config", str(agent_config(tmp_path, "datafile", data=str(afile))), "--check"),
            "data_dir", str(afile))


def test_agent_start_refuses_a_bad_key_before_starting(tmp_path: Path) -> None:
    """Not only --check: a plain start stops at the same problem instead of dying in the daemon."""
    bad = tmp_path / "bad.key"
    bad.write_text("!!!\n")
    refused(fedplane("agent", "--config", str(agent_config(tmp_path, "start", key=str(bad))), timeout=60),
            "gossip.key_file", str(bad))


def test_agent_check_passes_a_good_config_and_says_the_back_end_is_unreachable(tmp_path: Path) -> None:
    result = fedplane("agent", "--config", str(agent_config(tmp_path, "good", key=str(good_key(tmp_path)))), "--check")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout and "unreachable" in result.stdout


def _trace_copy(traces: Path, tmp_path: Path, rows: int = 50) -> tuple[Path, list[str]]:
    lines = (traces / OPENB / "openb_pod_list_default.csv").read_text().splitlines()[: rows + 1]
    return tmp_path / "pods.csv", lines


def test_sim_refuses_an_infinite_cpu_field(traces: Path, tmp_path: Path) -> None:
    path, lines = _trace_copy(traces, tmp_path)
    row = lines[1].split(",")
    row[1] = "inf"
    path.write_text("\n".join([*lines, ",".join(row)]) + "\n")
    refused(fedplane("sim", "--nodes", str(traces / OPENB / "openb_node_list_all_node.csv"), "--pods", str(path)),
            f"{path}:{len(lines) + 1}", "cpu_milli")


def test_sim_refuses_a_field_over_the_csv_limit(traces: Path, tmp_path: Path) -> None:
    path, lines = _trace_copy(traces, tmp_path, rows=1)
    row = lines[1].split(",")
    row[0] = "x" * 200_000
    path.write_text(lines[0] + "\n" + ",".join(row) + "\n")
    refused(fedplane("sim", "--nodes", str(traces / OPENB / "openb_node_list_all_node.csv"), "--pods", str(path)),
            f"{path}:2")


def test_sim_names_the_line_of_an_undecodable_byte(traces: Path, tmp_path: Path) -> None:
    path, lines = _trace_copy(traces, tmp_path, rows=3)
    body = ("\n".join(lines) + "\n").encode()
    at = body.index(b"\n", body.index(b"\n") + 1) + 3  # third character of line 3
    path.write_bytes(body[:at] + b"\xff" + body[at:])
    refused(fedplane("sim", "--nodes", str(traces / OPENB / "openb_node_list_all_node.csv"), "--pods", str(path)),
            f"{path}:3", "0xff")


def test_sim_refuses_a_plot_into_a_missing_folder_before_replaying(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.png"
    refused(fedplane("sim", "--synthetic", "100", "--plot", str(target)), str(target.parent))


@pytest.mark.slow
def test_sim_plots_the_openb_protocol(traces: Path, tmp_path: Path) -> None:
    target = tmp_path / "p.png"
    result = fedplane("sim", "--nodes", str(traces / OPENB / "openb_node_list_all_node.csv"),
                      "--pods", str(traces / OPENB / "openb_pod_list_cpu050.csv"), "--plot", str(target))
    assert result.returncode == 0, result.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_federated_run_without_an_engine(tmp_path: Path) -> None:
    refused(fedplane("federated", "run", "--workdir", str(tmp_path / "noengine"), "--rounds", "1"), str(tmp_path / "noengine"))


def test_federated_up_with_missing_traces(tmp_path: Path) -> None:
    refused(fedplane("federated", "up", "--traces", str(tmp_path / "missing"), "--workdir", str(tmp_path / "fw")),
            str(tmp_path / "missing"))


def test_policy_export_of_an_empty_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "empty").mkdir()
    refused(fedplane("policy", "export", str(tmp_path / "empty"), "--out", str(tmp_path / "o")), str(tmp_path / "empty"))


def test_policy_export_of_a_corrupt_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoint.pt").write_bytes(b"PK\x03\x04 not really a zip")
    refused(fedplane("policy", "export", str(tmp_path / "ck"), "--out", str(tmp_path / "o")), "checkpoint.pt")


def shipped_copy(to: Path) -> Path:
    """A copy of the shipped model artifact to spoil (skips where none is shipped)."""
    shipped = ROOT / "federated" / "models" / "default"
    if not (shipped / "manifest.json").is_file():
        pytest.skip("no shipped model artifact")
    shutil.copytree(shipped, to)
    return to


def test_policy_eval_of_a_corrupt_model(tmp_path: Path) -> None:
    corrupt = shipped_copy(tmp_path / "corrupt")
    model = next(corrupt.glob("*int8*.onnx"))
    model.write_bytes(model.read_bytes()[:1000])
    refused(fedplane("policy", "eval", "--model", str(corrupt), "--seeds", "1"), model.name)


def test_policy_queue_refuses_an_artifact_with_an_unreadable_queue_order(tmp_path: Path) -> None:
    import json

    bad = shipped_copy(tmp_path / "bad")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["training"]["queue_search"] = {"kept": {"colour": 1.0}}
    (bad / "manifest.json").write_text(json.dumps(manifest))
    refused(fedplane("policy", "queue", "--model", str(bad), "--out", str(tmp_path / "o")), "colour", "queue_search")


def test_controlplane_submit_refuses_a_cpu_beyond_int64() -> None:
    refused(fedplane("controlplane", "submit", "x", "--cpu", "9223372036854775808", "--target", "127.0.0.1:1"), "--cpu")
