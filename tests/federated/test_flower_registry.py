"""The model registry: versions only grow, every file is hashed, and tampering is caught before loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcore.scheduling.fragmentation import PodTypes
from federated.flower import registry
from federated.model import PlacementScorer
from federated.runtime import artifacts


def model(seed: int) -> PlacementScorer:
    torch.manual_seed(seed)
    return PlacementScorer()


TYPES = PodTypes(np.array([4000]), np.array([1000]), np.array([1]), np.array([1.0]))


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("registry")
    for rnd in (1, 2):
        registry.publish(root, model(rnd), TYPES, {"run": "t", "round": rnd, "quality": 0.5})
    return root


def test_versions_grow_and_manifests_say_what_they_are(published: Path) -> None:
    assert [p.name for p in registry.versions(published)] == ["v000001", "v000002"]
    assert registry.latest(published) == published / "v000002"
    artifact = registry.verify(published / "v000002")
    assert artifact.manifest["training"]["round"] == 2
    assert not [p for p in published.iterdir() if p.name.startswith(".")]


def test_fp32_state_round_trips(published: Path) -> None:
    loaded = registry.load_model(published / "v000001")
    for key, value in model(1).state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value)


@pytest.mark.parametrize("name", [registry.STATE, artifacts.INT8, artifacts.FP32])
def test_a_tampered_file_is_refused(published: Path, tmp_path: Path, name: str) -> None:
    copy = shutil.copytree(published / "v000001", tmp_path / "v000001")
    data = bytearray((copy / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / name).write_bytes(bytes(data))
    with pytest.raises(artifacts.ArtifactError, match="sha256"):
        registry.verify(copy)


def test_a_manifest_without_state_or_unreadable_is_refused(published: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(published / "v000002", tmp_path / "v")
    manifest = json.loads((copy / artifacts.MANIFEST).read_text())
    del manifest["training"]["state"]
    (copy / artifacts.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(artifacts.ArtifactError, match="no state.npz"):
        registry.verify(copy)
    (copy / artifacts.MANIFEST).write_text("{")
    with pytest.raises(artifacts.ArtifactError, match="not valid JSON"):
        registry.verify(copy)
