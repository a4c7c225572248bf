"""Export -> quantize -> load round trips, and artifacts the runtime must refuse (keeping the model it has)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from policy_data import fleet, pods

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from fedcore.nodetable import NodeTable  # noqa: E402
from fedcore.scheduling.filters import resources_fit  # noqa: E402
from fedcore.scheduling.fragmentation import PodTypes  # noqa: E402
from federated import exporting  # noqa: E402
from federated.model import PlacementScorer  # noqa: E402
from federated.runtime import artifacts, scorer  # noqa: E402
from federated.runtime.features import FeatureBuilder, pod_features  # noqa: E402
from policy_models import fgd_like_model  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[PlacementScorer, Path]:
    model = fgd_like_model()
    path = tmp_path_factory.mktemp("artifact")
    exporting.export(model, path, PodTypes.from_pods(pods(300)), {"train_wall_s": 0.0, "purpose": "test"})
    return model, path


def decisions(n: int = 120):
    types = PodTypes.from_pods(pods(300))
    builder = FeatureBuilder(types)
    table = NodeTable(fleet(60))
    rng = np.random.default_rng(0)
    for pod in pods(n, 1):
        rows = np.flatnonzero(resources_fit(pod, table))
        if rows.size == 0:
            continue
        yield pod_features(pod), np.ascontiguousarray(builder(pod, table, rows))
        table.allocate(pod, int(rows[rng.integers(rows.size)]))


def test_fp32_matches_torch_and_int8_picks_the_same_node(exported: tuple[PlacementScorer, Path]) -> None:
    model, path = exported
    fp32 = scorer.OnnxScorer(path / artifacts.FP32, "fp32")
    int8 = scorer.OnnxScorer(path / artifacts.INT8, "int8")
    same = total = 0
    for pod_x, node_x in decisions():
        with torch.no_grad():
            expected = model(torch.from_numpy(pod_x), torch.from_numpy(node_x).T).numpy()
        np.testing.assert_allclose(fp32(pod_x, node_x), expected, atol=1e-3)
        a, b = fp32(pod_x, node_x), int8(pod_x, node_x)
        same += int(np.argmax(np.floor(a)) == np.argmax(np.floor(b)))
        total += 1
    assert same / total >= 0.95


def test_manifest_and_sizes(exported: tuple[PlacementScorer, Path]) -> None:
    _, path = exported
    loaded = artifacts.load(path)
    files = loaded.manifest["files"]
    assert files[artifacts.INT8]["bytes"] <= 0.3 * files[artifacts.FP32]["bytes"]
    assert loaded.manifest["feature_spec"] == "fedplane-features/5"
    assert len(loaded.version) == 12


def test_exported_files_carry_no_names_onnx_does_not_require(exported: tuple[PlacementScorer, Path]) -> None:
    """Every byte counts against the size goal (int8 <= 0.3 x fp32): no producer, no node names, a one-letter graph name."""
    onnx = pytest.importorskip("onnx")
    _, path = exported
    for name in (artifacts.FP32, artifacts.INT8):
        proto = onnx.load(str(path / name))
        assert (proto.producer_name, proto.producer_version, proto.graph.name) == ("", "", "g")
        assert not any(node.name for node in proto.graph.node)
        onnx.checker.check_model(proto, full_check=True)


@pytest.mark.parametrize(("key", "value"), [
    *(("pinned", v) for v in ("abc", 2.0, -0.1, float("nan"), [0.1], None)),
    *(("cpu_pressure", v) for v in ("abc", -0.1, float("nan"), float("inf"), [1.0], None)),
])
def test_manifest_with_an_unreadable_workload_share_is_refused(tmp_path: Path, key: str, value: object) -> None:
    dst = copy_artifact(scorer.default_model_dir(), tmp_path / "a")
    manifest = json.loads((dst / artifacts.MANIFEST).read_text())
    manifest["pod_types"][key] = value
    (dst / artifacts.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(artifacts.ArtifactError, match="pod_types unreadable"):
        artifacts.load(dst)


def copy_artifact(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def corrupt(path: Path) -> None:
    data = bytearray((path / artifacts.INT8).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / artifacts.INT8).write_bytes(bytes(data))


def wrong_spec(path: Path) -> None:
    manifest = json.loads((path / artifacts.MANIFEST).read_text())
    manifest["feature_spec"] = "fedplane-features/0"
    (path / artifacts.MANIFEST).write_text(json.dumps(manifest))


def no_manifest(path: Path) -> None:
    (path / artifacts.MANIFEST).unlink()


@pytest.mark.parametrize(("damage", "message"), [(corrupt, "sha256"), (wrong_spec, "feature spec"), (no_manifest, "manifest.json")])
def test_bad_artifacts_are_refused_and_the_old_model_kept(exported: tuple[PlacementScorer, Path], tmp_path: Path, damage, message: str) -> None:
    _, good = exported
    runtime = scorer.PolicyRuntime(good, "int8")
    before = runtime.version
    bad = copy_artifact(good, tmp_path / "bad")
    damage(bad)
    with pytest.raises(artifacts.ArtifactError, match=message):
        runtime.swap(bad)
    assert runtime.version == before and runtime.artifact is not None and runtime.artifact.path == good
    pod_x, node_x = next(decisions(5))
    assert np.isfinite(runtime.scorer(pod_x, node_x)).all()


def test_hot_swap_to_a_new_model(exported: tuple[PlacementScorer, Path], tmp_path: Path) -> None:
    _, good = exported
    runtime = scorer.PolicyRuntime(good, "int8")
    other = tmp_path / "other"
    exporting.export(fgd_like_model(seed=7), other, PodTypes.from_pods(pods(300)), {"purpose": "test"})
    assert runtime.swap(other) != "" and runtime.artifact is not None and runtime.artifact.path == other


def test_heuristic_fallback_without_onnxruntime(monkeypatch: pytest.MonkeyPatch, exported: tuple[PlacementScorer, Path]) -> None:
    _, good = exported
    monkeypatch.setattr(scorer, "onnxruntime_available", lambda: False)
    runtime = scorer.PolicyRuntime(good, "int8", PodTypes.from_pods(pods(300)))
    assert runtime.version == scorer.HEURISTIC
    table = NodeTable(fleet(20))
    pod = pods(1)[0]
    rows = np.flatnonzero(resources_fit(pod, table))
    assert runtime.scores(pod, table, rows).shape == rows.shape


def test_heuristic_fallback_scores_on_the_shipped_models_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """An armv7 agent (no onnxruntime) scores openb-like pods as its ONNX peers do: same temperature and preferences."""
    shipped = scorer.default_model_dir()
    model = scorer.PolicyRuntime(shipped, "int8")
    monkeypatch.setattr(scorer, "onnxruntime_available", lambda: False)
    fallback = scorer.PolicyRuntime(shipped, "int8")
    assert fallback.version == scorer.HEURISTIC
    table = NodeTable(fleet(30))
    for pod in pods(40, 5):
        rows = np.flatnonzero(resources_fit(pod, table))
        if rows.size == 0:
            continue
        ours, theirs = fallback.scores(pod, table, rows), model.scores(pod, table, rows)
        np.testing.assert_allclose(ours, theirs, atol=0.05)  # the fit's residual terms (hundredths of a point), not the reshape
        table.allocate(pod, int(rows[np.argmax(theirs)]))
