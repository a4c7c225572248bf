"""The twin's commands: bad input gets a clear error and a non-zero exit; good input prints what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fedplane.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sim", "--nodes", "/nonexistent/nodes.csv", "--synthetic", "10"], "cannot read trace"),
        (["sim", "--synthetic", "10", "--profile", "nope", "--nodes", "x.csv"], "unknown profile 'nope'"),
        (["sim", "--synthetic", "5", "--dlrm", "d.csv"], "choose one workload"),
        (["sim", "--synthetic", "5", "--fault", "meteor:c0@1"], "bad fault 'meteor:c0@1'"),
        (["bench", "schedule", "--profiles", "random,zzz"], "unknown profile 'zzz'"),
        (["sim", "--traces", "/nonexistent-dir", "--synthetic", "3"], "no such traces directory"),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    code, out = run(*args)
    assert code == 2 and message in out.replace("\n", " ")


def test_nonsensical_load(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\n")
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time\np0,1000,1024,1,500,,LS,0\n")
    code, out = run("sim", "--nodes", str(nodes), "--pods", str(pods), "--arrived-load", "7")
    assert code == 2 and "arrived load must be in" in out


def test_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,abc,1,0,\n")
    code, out = run("sim", "--nodes", str(nodes), "--synthetic", "5")
    assert code == 2 and f"{nodes}:3: column 'cpu_milli'" in out.replace("\n", "")


def test_sim_json_and_plot(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,65536,4,T4\n" for i in range(4)))
    png = tmp_path / "t.png"
    code, out = run(
        "sim", "--nodes", str(nodes), "--synthetic", "200", "--json", "--plot", str(png),
        "--fault", "node-crash:n1@20+30", "--seed", "2",
    )
    assert code == 0, out
    summary = json.loads(out[out.index("{"):])
    assert summary["events"] == 400 and summary["nodes"] == 4
    assert {"wait_s_p50", "wait_s_p99", "unscheduled", "cpu_alloc_ratio_mean", "events_per_s", "sim_wall_s"} <= set(summary)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_every_command_has_help() -> None:
    for args in (["--help"], ["sim", "--help"], ["bench", "--help"], ["bench", "schedule", "--help"]):
        code, out = run(*args)
        assert code == 0 and "Usage:" in out
