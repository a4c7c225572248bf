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
