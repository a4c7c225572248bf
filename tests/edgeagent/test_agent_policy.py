"""Hot swap: the newest verified artifact wins; a broken one is refused and the current model stays."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest

from edgeagent.policy import ModelWatcher


def test_newest_verified_model_wins_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from federated.runtime.scorer import default_model_dir

    shipped = default_model_dir()
    if not (shipped / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    watcher = ModelWatcher(tmp_path)
    assert watcher.scan() is None  # empty directory: the heuristic stays
    shutil.copytree(shipped, tmp_path / "v0001")
    scorer = watcher.scan()
    assert scorer is not None and watcher.current == "v0001"
    table = NodeTable([Node("a", 96000, 393216, gpus=8, gpu_model="G2")])
    assert 0.0 <= scorer.score(Pod("p", 8000, 32768, gpu=GpuRequest(1, 500)), table) <= 100.0
    shutil.copytree(shipped, tmp_path / "v0002")
    (tmp_path / "v0002" / "model.int8.onnx").write_bytes(b"not a model")
    assert watcher.scan() is None and watcher.current == "v0001" and watcher.failures == 1
    assert watcher.scan() is None and watcher.failures == 1, "a refused version is not retried until it changes"


def test_without_onnxruntime_the_agent_scores_on_the_models_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """armv7 has no onnxruntime wheel: the agent takes the model's features and scores them with FGD, the
    heuristic the model imitates, so a mixed fleet's claims stay on one scale (ONNX peers' scores match)."""
    pytest.importorskip("onnxruntime")
    import platform

    from federated.runtime.scorer import default_model_dir

    shutil.copytree(default_model_dir(), tmp_path / "v0001")
    onnx = ModelWatcher(tmp_path).scan()
    monkeypatch.setattr(platform, "machine", lambda: "armv7l")
    with caplog.at_level("WARNING", logger="edgeagent.policy"):
        heuristic = ModelWatcher(tmp_path).scan()
    assert onnx is not None and onnx.version.endswith("-int8")
    assert heuristic is not None and heuristic.version == "heuristic-fgd"
    assert "onnxruntime is not available on this machine (armv7l): heuristic scoring" in caplog.text
    pods = [Pod("p", 8000, 32768, gpu=GpuRequest(1, 500)), Pod("q", 4000, 16384, gpu=GpuRequest(2, 1000)),
            Pod("r", 16000, 65536)]
    for pod in pods:
        table = NodeTable([Node("a", 96000, 393216, gpus=8, gpu_model="G2")])
        assert heuristic.score(pod, table) == pytest.approx(onnx.score(pod, table), abs=0.01)


def test_the_agent_takes_its_queue_order_from_the_artifact(tmp_path: Path) -> None:
    """The order an agent claims pending pods in is the one the twin's learned profile retries them in."""
    import json

    pytest.importorskip("onnxruntime")
    from fedcore.scheduling.framework import OldestFirst
    from federated.runtime import artifacts
    from federated.runtime.scorer import default_model_dir

    shipped = default_model_dir()
    if not (shipped / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    shutil.copytree(shipped, tmp_path / "v0001")
    manifest = json.loads((tmp_path / "v0001" / "manifest.json").read_text())
    manifest["training"]["queue_search"] = {"kept": {"cpu_fill": -1.0}}
    (tmp_path / "v0001" / "manifest.json").write_text(json.dumps(manifest))
    scorer = ModelWatcher(tmp_path).scan()
    assert scorer is not None
    assert scorer.queue.as_dict() == artifacts.load(tmp_path / "v0001").queue.as_dict()  # type: ignore[attr-defined]
    del manifest["training"]["queue_search"]
    (tmp_path / "v0002").mkdir()
    for f in (tmp_path / "v0001").iterdir():
        shutil.copy2(f, tmp_path / "v0002" / f.name)
    (tmp_path / "v0002" / "manifest.json").write_text(json.dumps(manifest))
    newer = ModelWatcher(tmp_path).scan()
    assert newer is not None and isinstance(newer.queue, OldestFirst)


def test_an_empty_models_directory_scores_with_the_shipped_model_until_a_version_arrives(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from federated.runtime.scorer import default_model_dir

    watcher = ModelWatcher(tmp_path, default_model_dir())
    first = watcher.scan()
    assert first is not None and watcher.current == "shipped" and not first.version.startswith("heuristic")
    assert watcher.scan() is None  # loaded once
    assert ModelWatcher(tmp_path).scan() is None  # no shipped model asked for: the heuristic
    shutil.copytree(default_model_dir(), tmp_path / "v0001")
    assert watcher.scan() is not None and watcher.current == "v0001"  # a version in the directory replaces it
