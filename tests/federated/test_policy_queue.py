"""The learned queue order: carried by the artifact, used by the learned profile, chosen on training windows only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import queues
from fedcore.scheduling.framework import OldestFirst, Waiting
from fedcore.traces.dlrm import Instance
from federated import evaluating, queuesearch
from federated.runtime import artifacts
from federated.runtime.scorer import default_model_dir


@pytest.fixture()
def artifact(tmp_path: Path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(default_model_dir(), out)
    return out


def set_queue(path: Path, kept: object) -> None:
    manifest = json.loads((path / artifacts.MANIFEST).read_text())
    manifest["training"]["queue_search"] = {"kept": kept}
    (path / artifacts.MANIFEST).write_text(json.dumps(manifest))


def test_the_manifest_carries_the_queue_order_and_bad_ones_are_refused(artifact: Path) -> None:
    set_queue(artifact, {"cpu_fill": -1.0, "fills": 2.0})
    order = artifacts.load(artifact).queue
    assert isinstance(order, queues.LinearQueue) and order.as_dict()["fills"] == 2.0 and order.as_dict()["gpu"] == 0.0
    manifest = json.loads((artifact / artifacts.MANIFEST).read_text())
    del manifest["training"]["queue_search"]
    (artifact / artifacts.MANIFEST).write_text(json.dumps(manifest))
    assert isinstance(artifacts.load(artifact).queue, OldestFirst)  # an artifact from before queue orders
    for bad, says in (({"colour": 1.0}, "unknown feature"), ({"gpu": "high"}, "must map"), ([1, 2], "must map")):
        set_queue(artifact, bad)
        with pytest.raises(artifacts.ArtifactError, match=says):
            artifacts.load(artifact)


def test_the_learned_profile_retries_in_the_artifact_order_and_follows_a_swap(artifact: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from fedcore.scheduling.profiles import ProfileContext
    from federated.runtime import plugin

    set_queue(artifact, {"cpu_fill": -1.0})
    profile = plugin.make_profile(ProfileContext(0, [Pod("w", 1000, 1024)]), artifact)
    table = NodeTable([Node("a", 8000, 16384)])
    w = Waiting(np.array([4000, 1000]), np.array([1024, 1024]), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64), np.array([50.0, 10.0]))
    assert profile.queue.priority(w, table, 0).tolist() == [-0.5, -0.125]
    other = tmp_path / "other"
    shutil.copytree(artifact, other)
    set_queue(other, {"cpu_fill": 1.0})
    runtime = profile.queue.runtime  # type: ignore[attr-defined]
    runtime.swap(other)
    assert profile.queue.priority(w, table, 0).tolist() == [0.5, 0.125]


def test_search_baseline_is_the_best_heuristic_in_any_non_learned_order() -> None:
    """Queue order is part of a policy (#42): the order search is judged against heuristics in every fixed order."""
    nodes = [Node(f"n{i}", 8000, 32768) for i in range(3)]
    instances = [Instance(Pod(f"p{i}", 1000 + 1500 * (i % 4), 4096), float(7 * i), float(7 * i + 60 + 20 * (i % 3))) for i in range(60)]
    windows = [(nodes, evaluating.Window.of(nodes, instances))]
    runs: list[None] = []
    name, figures = queuesearch.best_heuristic(windows, on_run=lambda: runs.append(None))
    assert len(runs) == queuesearch.BASELINE_RUNS
    every = {
        (h if q == "oldest-first" else f"{h}+{q}"): queuesearch.judge([evaluating.dlrm_holdout(nodes, (), h, held=windows[0][1], queue=queues.named(q))])
        for h in queuesearch.HEURISTICS for q in queues.NAMED
    }
    assert figures == every[name] == min(every.values())


def test_with_queue_keeps_every_model_file_and_records_the_search(artifact: Path, tmp_path: Path) -> None:
    seen = {(-1.0,) * 7: (10, 100.0), (0.0,) * 7: (12, 90.0)}
    record = queuesearch.record((-1.0,) * 7, seen, "bestfit", (11, 95.0))
    out = tmp_path / "out"
    manifest = queuesearch.with_queue(artifact, out, record)
    before = artifacts.load(artifact).manifest
    assert manifest["files"] == before["files"]  # no score changes
    assert manifest["training"]["service_search"] == before["training"]["service_search"]
    loaded = artifacts.load(out)
    assert loaded.queue.as_dict() == dict.fromkeys(queues.QUEUE_FEATURES, -1.0)  # type: ignore[attr-defined]
    assert loaded.manifest["training"]["queue_search"]["baseline"] == {"profile": "bestfit", "never_placed": 11, "wait_s_mean": 95.0}
    with pytest.raises(ValueError, match="unknown feature"):
        queuesearch.with_queue(artifact, tmp_path / "bad", {"kept": {"colour": 1.0}})


def test_search_judges_by_the_worse_ratio_keeps_moves_that_help_and_respects_its_budget() -> None:
    calls = []

    def replay(w: tuple[float, ...]) -> tuple[int, float]:
        calls.append(w)
        return 100 + int(10 * abs(w[0] - 1.0)), 50.0 + 5 * abs(w[2] + 1.0)

    best, seen = queuesearch.search(replay, (100, 50.0), start=(0.0,) * 7, budget=60)
    assert len(calls) == len(seen) <= 60 and len(set(calls)) == len(calls)
    assert best[0] == 1.0 and best[2] == -1.0
    assert queuesearch.objective(seen[best], (100, 50.0)) == 1.0
    assert queuesearch.objective((90, 60.0), (100, 50.0)) == pytest.approx(1.2)


def test_a_window_reports_its_queue_order_and_never_placed_large_pods_by_shape() -> None:
    nodes = [Node("a", 100_000, 600 * 1024)]
    instances = [
        Instance(Pod("runner", 96_000, 480 * 1024), 0.0, 100.0),
        Instance(Pod("big", 96_000, 480 * 1024), 150.0, None),
        Instance(Pod("small1", 8000, 40 * 1024), 160.0, None),
        Instance(Pod("small2", 8000, 40 * 1024), 170.0, None),
        Instance(Pod("end", 1000, 1024), 1000.0, None),
    ]
    held = evaluating.Window.of(nodes, instances, start=50.0)
    oldest = evaluating.dlrm_holdout(nodes, instances, "bestfit", held=held)
    small = evaluating.dlrm_holdout(nodes, instances, "bestfit", held=held, queue=queues.SMALLEST_FIRST)
    assert oldest.queue == "oldest-first" and small.queue == "smallest-first"
    # The runner leaves at 100, before any arrival: big takes the whole node at once under either order, the small ones wait.
    assert oldest.never_placed_by_shape == small.never_placed_by_shape == {}
    assert oldest.never_placed == 2


def test_bench_judges_learned_against_heuristics_in_every_order_and_keeps_non_heuristics_apart() -> None:
    """Queue order is part of a policy (#42): the best heuristic is chosen among every heuristic in every non-learned order;
    what is not a heuristic (a heuristic with the learned order, learned with another order) sits apart, labelled."""
    pytest.importorskip("onnxruntime")
    from fedplane.lab.benches import policybench

    nodes = [Node(f"n{i}", 8000, 32768) for i in range(3)]
    instances = [Instance(Pod(f"p{i}", 3000 + 500 * (i % 3), 4096), float(10 * i), float(10 * i + 75)) for i in range(40)]
    traces = evaluating.Traces(nodes, [], instances, nodes, [])
    held = evaluating.Window.of(nodes, instances)
    learned_order = artifacts.load(default_model_dir()).queue.name
    section = policybench.dlrm_window(default_model_dir(), traces, lambda label: None, held)
    heuristics = {h: "oldest-first" for h in policybench.HEURISTICS} | {f"{h}+{q}": q for h in policybench.HEURISTICS for q in policybench.VARIANT_QUEUES}
    assert {k: v["queue"] for k, v in section.items() if isinstance(v, dict) and k != "learned"} == heuristics
    assert section["learned"]["queue"] == learned_order
    assert section["best_heuristic"] == min(heuristics, key=lambda k: (section[k]["never_placed"], section[k]["wait_s_mean"]))
    assert section["best_heuristic_oldest_first"] in policybench.HEURISTICS
    out = policybench.queue_variants(default_model_dir(), traces, held, "fgd+youngest-first", lambda label: None)
    assert set(out) == {"fgd+learned-queue", "learned+oldest-first", "best"} | {f"learned+{q}" for q in policybench.VARIANT_QUEUES}
    assert out["fgd+learned-queue"]["queue"] == learned_order and out["learned+youngest-first"]["queue"] == "youngest-first"


def write_traces(folder: Path) -> None:
    """A tiny traces folder: four CPU nodes (x4 for DLRM), a short openb list, and a 1,000 s DLRM trace that fills them."""
    openb = folder / "alibaba-openb"
    openb.mkdir(parents=True)
    (openb / "openb_node_list_all_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},16000,65536,0,\n" for i in range(4)))
    (openb / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        + "".join(f"p{i},2000,4096,0,0,,LS,Running,{i},{i + 100},{i}\n" for i in range(10))
    )
    dlrm = folder / "alibaba-dlrm"
    dlrm.mkdir()
    head = "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
    rows = [f"i{k},CN,app{k % 3},{(4, 8, 12)[k % 3]},0,0,0,0,0,{(16, 32, 48)[k % 3]},0,1,0,0,{k * 10},,{k * 10 + 150 + 40 * (k % 5)}\n" for k in range(100)]
    (dlrm / "disaggregated_DLRM_trace.csv").write_text(head + "".join(rows))


def test_policy_queue_chooses_an_order_on_training_windows_and_the_learned_profile_runs_it(artifact: Path, tmp_path: Path) -> None:
    """The path a user runs: `fedplane policy queue` on a traces folder writes an artifact whose order the learned profile uses."""
    pytest.importorskip("onnxruntime")
    from click.testing import CliRunner

    from fedplane.cli import main

    write_traces(tmp_path / "traces")
    out = tmp_path / "queued"
    result = CliRunner().invoke(main, ["policy", "queue", "--model", str(artifact), "--out", str(out), "--budget", "3", "--traces", str(tmp_path / "traces")])
    assert result.exit_code == 0, result.output
    loaded = artifacts.load(out)
    record = loaded.manifest["training"]["queue_search"]
    assert len(record["dlrm_training_windows"]) == 3
    name, _, order = record["baseline"]["profile"].partition("+")
    assert name in evaluating.HEURISTICS and order in ("", *queues.NAMED)
    assert set(record["kept"]) == set(queues.QUEUE_FEATURES) and loaded.manifest["files"] == artifacts.load(artifact).manifest["files"]
    traces = evaluating.Traces.load(str(tmp_path / "traces"))
    with evaluating.model_override(out):
        result_learned = evaluating.dlrm_holdout(traces.dlrm_nodes, traces.dlrm, "learned")
    assert result_learned.queue == "learned"


def test_the_shipped_artifact_carries_its_learned_queue_order() -> None:
    """Re-exporting the shipped model must keep ``training.queue_search`` (the DLRM figures depend on it)."""
    manifest = artifacts.load(default_model_dir()).manifest
    assert isinstance(artifacts.queue_order(manifest), queues.LinearQueue)
    name, _, order = manifest["training"]["queue_search"]["baseline"]["profile"].partition("+")
    assert name in evaluating.HEURISTICS and order in ("", *queues.NAMED)
