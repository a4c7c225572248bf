"""``fedplane bench generalize``: learned vs every heuristic on pod lists and fleets it never saw, and its fleet re-cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from policy_data import fleet

from fedcore.nodes import Node
from fedcore.traces import openb
from fedplane.lab.benches import generalizebench
from fedplane.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def error_line(out: str) -> str:
    """The one ``error:`` line a refused command prints (errors are never hard-wrapped, whatever the path's length)."""
    lines = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, out
    return lines[0]


def test_one_and_eight_keeps_every_gpu_model_and_the_cpu_and_memory_per_gpu() -> None:
    nodes = [
        Node("a", 104000, 524288, gpus=2, gpu_model="T4"),
        Node("b", 96000, 393216, gpus=8, gpu_model="G2"),
        Node("c", 32000, 131072, gpus=4, gpu_model="V100M16"),
        Node("d", 64000, 262144),
        Node("e", 8000, 61440, gpus=1, gpu_model="P100"),
    ]
    cut = generalizebench.one_and_eight(nodes)
    assert {n.gpus for n in cut} == {0, 1, 8}
    assert sum(n.gpus for n in cut) == sum(n.gpus for n in nodes)
    assert [n.name for n in cut] == ["a-g0", "a-g1", "b", "c-g0", "c-g1", "c-g2", "c-g3", "d", "e-g0"]
    assert [(n.gpu_model, n.cpu_milli, n.memory_mib) for n in cut if n.name.startswith("a-")] == [("T4", 52000, 262144)] * 2
    assert cut[2] is nodes[1] and cut[7] is nodes[3]
    assert generalizebench.one_and_eight(nodes) == cut  # deterministic


@pytest.mark.parametrize(("path", "name"), [("x/openb_pod_list_gpushare40.csv", "gpushare40"), ("mine.csv", "mine"), ("openb_pod_list_.csv", "openb_pod_list_")])
def test_list_name(path: str, name: str) -> None:
    assert openb.list_name(Path(path)) == name


def write_case(tmp: Path) -> tuple[Path, Path]:
    nodes = tmp / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"{n.name},{n.cpu_milli},{n.memory_mib},{n.gpus},{n.gpu_model}\n" for n in fleet(24, seed=3)))
    pods = tmp / "openb_pod_list_five.csv"  # the five-column shape of the official multigpu lists
    shapes = ((4000, 16384, 1, 500), (8000, 32768, 1, 1000), (32000, 131072, 2, 1000), (4000, 8192, 0, 0), (8000, 30000, 1, 250))
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},{c},{m},{g},{k}\n" for i, (c, m, g, k) in enumerate(shapes * 30)))
    return nodes, pods


def test_cli_judges_a_five_column_list_on_both_fleets_with_every_heuristic_and_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from federated.runtime import lookahead

    nodes, pods = write_case(tmp_path)
    lookahead._chosen.clear()
    selections: list[int] = []
    real = lookahead.select
    monkeypatch.setattr(lookahead, "select", lambda *a: selections.append(len(a[1])) or real(*a))
    code, out = run("bench", "generalize", "--pod-list", str(pods), "--node-list", str(nodes), "--seeds", "2", "--json")
    assert code == 0, out
    assert len(selections) == 2  # one selection per case, not one per bench seed
    got = json.loads(out[out.index("{"):])
    assert [(c["pod_list"], c["fleet"]) for c in got["cases"]] == [("five", "as-is"), ("five", "one-and-eight")]
    for case in got["cases"]:
        profiles = case["per_profile"]
        assert set(profiles) == {"learned", "random", "dotprod", "bestfit", "kube-default", "fgd"}
        assert all(len(v) == 2 for v in case["per_seed"].values())
        assert case["best_heuristic"] == max((k for k in profiles if k != "learned"), key=profiles.__getitem__)
        assert case["learned_minus_best"] == pytest.approx(profiles["learned"] - profiles[case["best_heuristic"]])
        assert 0 <= case["seeds_learned_at_least_best"] <= 2
        if case["upper_bound_gpu_alloc_ratio"] is not None:
            assert max(profiles.values()) <= case["upper_bound_gpu_alloc_ratio"] + 1e-9
    assert got["cases"][1]["gpus"] == got["cases"][0]["gpus"] and got["cases"][1]["gpu_nodes"] >= got["cases"][0]["gpu_nodes"]
    assert got["never_below_best"] == all(c["learned_minus_best"] >= 0 for c in got["cases"])
    # learned+lookahead (default K 4): it runs the profile its selection kept, so it reads exactly that profile's figures
    assert got["lookahead"]["k"] == 4 and got["lookahead"]["candidates"] == ["learned", "fgd", "bestfit"]
    for case in got["cases"]:
        look = case["learned+lookahead"]
        assert look["selection_seeds"] == [5000, 5001, 5002, 5003] and set(look["selection_means"]) == {"learned", "fgd", "bestfit"}
        assert look["chosen"] == max(look["selection_means"], key=look["selection_means"].__getitem__)
        assert look["per_seed"] == case["per_seed"][look["chosen"]]
        assert look["minus_best"] == pytest.approx(look["gpu_alloc_ratio"] - case["best_heuristic_gpu_alloc_ratio"])
    below = got["cases_below_best_heuristic"]
    assert set(below) == {"learned", "learned+lookahead", "random", "dotprod", "bestfit", "kube-default", "fgd"}
    assert below["learned"] == sum(c["learned_minus_best"] < 0 for c in got["cases"])
    assert below[got["cases"][0]["best_heuristic"]] <= 1


def test_cli_prints_tables(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    nodes, pods = write_case(tmp_path)
    code, out = run("bench", "generalize", "--pod-list", str(pods), "--node-list", str(nodes), "--fleet", "one-and-eight", "--seeds", "1")
    assert code == 0, out
    assert "learned vs the best heuristic" in out and "every profile's mean GPU allocation" in out and "one-and-" in out  # an 80-column table may cut the fleet's name
    words = " ".join(out.split())  # titles wrap at 80 columns
    assert "learned+lookahead: K=4" in words and "cases below the best heuristic" in words


def test_lookahead_zero_leaves_the_column_out(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    nodes, pods = write_case(tmp_path)
    code, out = run("bench", "generalize", "--pod-list", str(pods), "--node-list", str(nodes), "--fleet", "as-is", "--seeds", "1", "--lookahead", "0", "--json")
    assert code == 0, out
    got = json.loads(out[out.index("{"):])
    assert "lookahead" not in got and "learned+lookahead" not in got["cases"][0] and "learned+lookahead" not in got["cases_below_best_heuristic"]
    code, out = run("bench", "generalize", "--pod-list", str(pods), "--node-list", str(nodes), "--lookahead", "-1")
    assert code == 2 and "--lookahead" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00garbage\n", "is not UTF-8"),
        (b"name,cpu_milli\np,1\n", "header lacks column(s)"),
        (b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no pods"),
        (b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,-3,500\n", "column 'num_gpu' must be"),
        (b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,abc\n", "column 'gpu_milli'"),
    ],
)
def test_hostile_pod_list_is_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    nodes, _ = write_case(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    code, out = run("bench", "generalize", "--pod-list", str(bad), "--node-list", str(nodes), "--seeds", "1")
    assert code == 2, out
    line = error_line(out)
    assert line.startswith(f"error: {bad}:") and message in line


def test_bad_paths_and_a_fleet_without_gpus_are_clear_errors(tmp_path: Path) -> None:
    nodes, pods = write_case(tmp_path)
    code, out = run("bench", "generalize", "--pod-list", str(tmp_path / "missing.csv"), "--node-list", str(nodes))
    assert code == 2 and error_line(out).startswith(f"error: {tmp_path / 'missing.csv'}: cannot read trace")
    code, out = run("bench", "generalize", "--pod-list", str(tmp_path), "--node-list", str(nodes))
    assert code == 2 and f"Error: Invalid value for '--pod-list': File '{tmp_path}' is a directory." in out.splitlines()  # click's usage error
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,0,\n")
    code, out = run("bench", "generalize", "--pod-list", str(pods), "--node-list", str(cpu_only), "--seeds", "1")
    assert code == 2 and "no node has a GPU" in error_line(out)
    code, out = run("bench", "generalize", "--traces", str(tmp_path), "--node-list", str(nodes))
    assert code == 2 and "no pod lists" in error_line(out)


def test_default_run_takes_every_pod_list_of_the_traces_folder(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    nodes, pods = write_case(tmp_path)
    folder = tmp_path / "traces" / "alibaba-openb"
    folder.mkdir(parents=True)
    (folder / "openb_node_list_all_node.csv").write_bytes(nodes.read_bytes())
    (folder / "openb_pod_list_mine.csv").write_bytes(pods.read_bytes())
    (folder / "not_a_pod_list.csv").write_text("ignored\n")
    code, out = run("bench", "generalize", "--traces", str(tmp_path / "traces"), "--fleet", "as-is", "--seeds", "1", "--json")
    assert code == 0, out
    assert [c["pod_list"] for c in json.loads(out[out.index("{"):])["cases"]] == ["mine"]


def test_policy_train_refuses_a_bad_validation_list_before_training(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli\np,1\n")
    code, out = run("policy", "train", "--validation-list", str(bad), "--out", str(tmp_path / "out"))
    assert code == 2 and "header lacks column(s)" in out
    assert not (tmp_path / "out").exists()


def test_a_learned_run_knows_its_workloads_cpu_pressure_on_the_fleet_it_runs_on() -> None:
    """``workload_cpu_bound`` needs the fleet: the openb protocol hands the profile its GPU nodes with the workload."""
    pytest.importorskip("onnxruntime")
    from fedcore.scheduling import profiles
    from fedcore.scheduling.fragmentation import cpu_pressure
    from fedcore.twin import submission
    from federated.runtime import plugin
    from policy_data import pods

    nodes, workload = fleet(30, seed=2), pods(300, 2)
    seen: list[float] = []

    def learned(ctx: profiles.ProfileContext) -> profiles.Profile:
        made = plugin.make_profile(ctx)
        seen.append(made.scores[0][0].runtime.features.types.cpu_pressure)
        return made

    submission.run(nodes, workload, learned, seed=0)
    assert seen == [pytest.approx(cpu_pressure(workload, submission.gpu_nodes(nodes)))] and seen[0] > 0
    # no fleet (a DLRM window replay, an agent): the artifact's types, pressure 0, the feature neutral
    assert plugin.make_profile(profiles.ProfileContext(0, workload)).scores[0][0].runtime.features.types.cpu_pressure == 0.0
