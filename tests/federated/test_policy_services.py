"""Service replicas' settings: chosen on training windows cut before the hold-out, re-set on an artifact without
touching any score of a pod that is not a replica."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from policy_data import fleet, pods

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from fedcore.nodes import Node  # noqa: E402
from fedcore.nodetable import NodeTable  # noqa: E402
from fedcore.pods import Pod  # noqa: E402
from fedcore.scheduling.filters import resources_fit  # noqa: E402
from fedcore.scheduling.fragmentation import PodTypes  # noqa: E402
from fedcore.traces.dlrm import Instance  # noqa: E402
from federated import evaluating, exporting, services, splits  # noqa: E402
from federated.runtime import artifacts, scorer  # noqa: E402
from federated.runtime.features import NODE_FEATURES, FeatureBuilder, pod_features  # noqa: E402
from policy_models import fgd_like_model  # noqa: E402


def trace() -> list[Instance]:
    """A 1,110 s trace that grows: a long-running replica every 80 s, arrivals every 10 s living 120 s; the cut is at 888 s."""
    out = [Instance(Pod(f"base{i}", 2000, 4096, workload="svc"), 80.0 * i, None) for i in range(12)]
    out += [Instance(Pod(f"p{i}", 1000 + 1000 * (i % 3), 2048, workload="svc"), float(10 * i), float(10 * i + 120)) for i in range(1, 100)]
    return sorted(out, key=lambda i: i.created)


def test_training_windows_have_the_held_out_length_end_by_the_cut_and_fill_their_fleet_as_the_cut() -> None:
    nodes = [Node(f"n{i}", 8000, 32768) for i in range(12)]
    instances = trace()
    cut = splits.dlrm_cut(instances)
    length = 1110.0 - cut
    windows = services.training_windows(nodes, instances, starts=(1.0, 2.0))
    assert len(windows) == 2
    target = services.running_share(nodes, splits.dlrm_train(instances), cut)
    for k, (fleet_k, held) in zip((1.0, 2.0), windows):
        start = cut - k * length
        assert held.end == pytest.approx(length)
        assert all(i.created <= held.end and (i.deleted is None or i.deleted <= held.end) for i in held.instances)
        assert all(i.pod.uid.startswith(("base", "p")) for i in held.instances)
        originals = {i.pod.uid: i for i in instances}
        assert all(originals[i.pod.uid].created < start + held.end for i in held.instances)  # nothing from the hold-out
        assert set(fleet_k) <= set(nodes) and len(fleet_k) < len(nodes)
        # The window's running pods ask about as much of its fleet as the cut's ask of the whole fleet (one node's worth).
        assert services.running_share(fleet_k, splits.dlrm_train(instances), start) == pytest.approx(target, rel=0.25)
    with pytest.raises(ValueError, match="before the trace"):
        services.training_windows(nodes, instances, starts=(5.0,))


def test_thinned_keeps_an_even_share_of_the_node_list() -> None:
    nodes = [Node(f"n{i}", 1000 * (1 + i % 2), 1024) for i in range(100)]
    kept = services.thinned(nodes, 0.75)
    assert len(kept) == 74 and sum(n.cpu_milli == 2000 for n in kept) == 37  # each kind thinned alike, even when the list alternates
    assert services.thinned(nodes, 1.0) == nodes
    with pytest.raises(ValueError, match="keep"):
        services.thinned(nodes, 0.0)


def test_search_keeps_the_fewest_never_placed_then_the_lowest_wait_and_records_every_point() -> None:
    def result(never: int, wait: float) -> evaluating.WindowResult:
        return evaluating.WindowResult("learned", 10, 0, 0, never, 0, wait, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)

    figures = {(0.0, 0.0): [(5, 10.0), (5, 10.0)], (1.0, 0.0): [(2, 50.0), (3, 50.0)], (1.0, 1.0): [(4, 1.0), (1, 5.0)]}
    best, record = services.search(list(figures), lambda p: [result(*f) for f in figures[p]])
    assert best == (1.0, 1.0)  # 5 never placed, like (1, 0), but a lower mean wait
    assert record["kept"] == {"pack": 1.0, "reserve": 1.0}
    assert record["dlrm_training_windows"]["pack=0,reserve=0"] == {"never_placed": 10, "wait_s_mean": 10.0}


def test_retune_moves_only_the_replicated_terms(tmp_path: Path) -> None:
    types = PodTypes.from_pods([*pods(300), Pod("slot", 4000, 8192), Pod("slot2", 4000, 8192)])
    exporting.export(fgd_like_model(), tmp_path / "a", types, {"purpose": "test", "kept": "imitation, temperature 2"})
    manifest = services.retune(tmp_path / "a", tmp_path / "b", (100.0, 450.0))
    assert manifest["training"]["service_search"]["kept"] == {"pack": 100.0, "reserve": 450.0}
    assert manifest["training"]["kept"] == "imitation, temperature 2, service pack 100, reserve 450"
    assert services.kept(artifacts.load(tmp_path / "b").manifest) == (100.0, 450.0)  # hashes verified on load
    builder = FeatureBuilder(types)
    table = NodeTable(fleet(40))
    bestfit, slots = NODE_FEATURES.index("bestfit"), NODE_FEATURES.index("slots_lost")
    for precision in ("fp32", "int8"):
        before = scorer.OnnxScorer(artifacts.load(tmp_path / "a").model_file(precision), "a")
        after = scorer.OnnxScorer(artifacts.load(tmp_path / "b").model_file(precision), "b")
        for job in pods(20, 1):
            rows = np.flatnonzero(resources_fit(job, table))
            replica = Pod(job.uid + "-r", job.cpu_milli, job.memory_mib, gpu=job.gpu, workload="svc")
            x = np.ascontiguousarray(builder(job, table, rows))
            np.testing.assert_array_equal(after(pod_features(job), x), before(pod_features(job), x))  # not a replica: bitwise
            extra = 100.0 * x[:, bestfit] - 450.0 * x[:, slots]
            np.testing.assert_allclose(after(pod_features(replica), x), before(pod_features(replica), x) + extra, atol=1e-3)
    back = services.retune(tmp_path / "b", tmp_path / "c", (0.0, 0.0))
    assert back["training"]["service_search"]["kept"] == {"pack": 0.0, "reserve": 0.0}
    assert back["training"]["kept"] == "imitation, temperature 2"
    x = np.ascontiguousarray(builder(pods(1, 2)[0], table, np.arange(len(table))))
    replica = pod_features(Pod("r", 1000, 1024, workload="svc"))
    original = scorer.OnnxScorer(tmp_path / "a" / artifacts.FP32, "a")(replica, x)
    np.testing.assert_allclose(scorer.OnnxScorer(tmp_path / "c" / artifacts.FP32, "c")(replica, x), original, atol=1e-3)


def test_window_profiles_learn_shapes_from_the_pods_running_at_its_start_only() -> None:
    nodes = [Node("a", 64000, 262144)]
    running = [Instance(Pod(f"old{i}", 2000, 4096, workload="svc"), 0.0, None) for i in range(3)]
    future = [Instance(Pod(f"new{i}", 7000, 9000, workload="svc"), 100.0 + i, None) for i in range(9)]
    held = evaluating.Window.of(nodes, running + future, start=50.0)
    with evaluating.model_override(scorer.default_model_dir()):
        replay = evaluating.WindowReplay(nodes, held.instances, "learned", 0, workload=[i.pod for i in held.instances[: held.preplaced]])
    plugin = replay.scheduler.profile.scores[0][0]
    assert plugin.runtime.features.types.slots.tolist() == [[2000, 4096]]  # the arrivals' 7-core shape is the future: not seen


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "{tmp}/none"], "no manifest.json"),
    (["--points", "1:2:3"], "PACK:RESERVE"),
    (["--points", " , "], "at least one"),
])
def test_services_command_refuses_bad_input_clearly(tmp_path: Path, args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from federated.commands import policy

    result = CliRunner().invoke(policy, ["services", "--out", str(tmp_path / "out"), *[a.format(tmp=tmp_path) for a in args]])
    assert result.exit_code == 2 and message in " ".join(result.output.split()) and "Traceback" not in result.output
