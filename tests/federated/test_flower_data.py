"""Regional slices, the experience log format, run config and faults: bad input gets a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from federated.flower import appdir, regions
from federated.flower import teacherdata
from federated.flower.faults import Fault
from federated.flower.runconfig import DEFAULTS, ConfigError, RunConfig
from federated.rollouts import Decisions
from federated.runtime.features import NODE_FEATURES, POD_FEATURES


def decisions(n: int, k: int = 4, seed: int = 0) -> Decisions:
    rng = np.random.default_rng(seed)
    pods = rng.random((n, len(POD_FEATURES)), dtype=np.float32)
    pods[:, POD_FEATURES.index("gpu_sharing")] = rng.integers(0, 2, n)
    fields = {
        "pods": pods, "nodes": rng.random((n, k, len(NODE_FEATURES)), dtype=np.float32),
        "target": rng.random((n, k), dtype=np.float32) * 100, "mask": np.ones((n, k), bool), "top": np.eye(k, dtype=bool)[np.zeros(n, int)],
    }
    return Decisions(**fields)


@pytest.mark.parametrize(("groups", "k", "sizes"), [
    ([0] * 5 + [1] * 3 + [2] * 2, 3, [5, 3, 2]),  # one natural group per region
    ([0] * 6 + [1] * 4, 3, [3, 4, 3]),  # fewer groups than regions: the largest is halved
    ([0] * 4 + [1] * 3 + [2] * 2 + [3] * 1, 2, [5, 5]),  # more groups: whole groups to the smallest region
])
def test_assign_keeps_groups_whole_and_covers_every_row(groups: list[int], k: int, sizes: list[int]) -> None:
    parts = regions.assign(np.array(groups), k)
    assert sorted(p.size for p in parts) == sorted(sizes)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(groups)))


@pytest.mark.parametrize("kind", regions.SPLITS)
def test_split_partitions_decisions(kind: str) -> None:
    data = decisions(30)
    parts = regions.split(data, kind, 3)
    assert sum(len(p) for p in parts) == 30 and all(len(p) for p in parts)
    with pytest.raises(ValueError, match="split must be one of"):
        regions.split(data, "by-moon-phase", 3)


def test_experience_round_trip_file_and_directory(tmp_path: Path) -> None:
    a, b = decisions(5, seed=1), decisions(7, seed=2)
    teacherdata.save(tmp_path / "log" / "0001.npz", a)
    teacherdata.save(tmp_path / "log" / "0002.npz", b)
    got = teacherdata.load(tmp_path / "log")
    assert len(got) == 12
    np.testing.assert_array_equal(got.nodes[5:], b.nodes)
    assert got.mask.dtype == np.bool_ and len(teacherdata.load(tmp_path / "log" / "0001.npz")) == 5


def test_corrupt_or_foreign_experience_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(teacherdata.ExperienceError, match="not an experience log"):
        teacherdata.load(tmp_path / "junk.npz")
    wrong = decisions(3)
    np.savez(tmp_path / "wrong.npz", **{f: getattr(wrong, f) for f in teacherdata.FIELDS} | {"nodes": np.zeros((3, 4, 5), np.float32)})
    with pytest.raises(teacherdata.ExperienceError, match="feature spec"):
        teacherdata.load(tmp_path / "wrong.npz")
    with pytest.raises(teacherdata.ExperienceError, match="no experience log"):
        teacherdata.load(tmp_path / "missing")


def test_run_config_parses_and_refuses_bad_values() -> None:
    paths = {"data-dir": "/d", "registry-dir": "/r", "report-file": "/f.jsonl"}
    config = RunConfig.parse({**paths, "strategy": "median", "clip-median-factor": 1.5, "num-rounds": 4})
    assert (config.rounds, config.strategy.rule, config.strategy.clip_median_factor) == (4, "median", 1.5)
    cases: list[tuple[dict[str, object], str]] = [({"nope": 1}, "unknown run-config keys"), ({"num-rounds": "three"}, "must be a number"),
                       ({"num-rounds": 2.5}, "whole number"), ({"strategy": "fedsgd"}, "strategy must be one of"),
                       ({"num-rounds": 0}, "at least 1"), ({"data-dir": ""}, "must be set")]
    for bad, match in cases:
        with pytest.raises(ConfigError, match=match):
            RunConfig.parse({**paths, **bad})


def test_app_dir_declares_every_run_config_key(tmp_path: Path) -> None:
    import tomllib

    project = tomllib.loads((appdir.write(tmp_path) / "pyproject.toml").read_text())
    assert project["tool"]["flwr"]["app"]["config"] == DEFAULTS
    assert project["tool"]["flwr"]["app"]["components"]["serverapp"] == "federated.flower.serverapp:app"
    with pytest.raises(ValueError, match="unknown run-config keys"):
        appdir.write_overrides(tmp_path / "o.toml", {"rounds": 3})


@pytest.mark.parametrize(("text", "fault"), [("", Fault()), ("none", Fault()), ("scale:-10", Fault("scale", -10.0)),
                                             ("random:0.5", Fault("random", 0.5)), ("crash", Fault("crash"))])
def test_fault_parse(text: str, fault: Fault) -> None:
    assert Fault.parse(text) == fault


@pytest.mark.parametrize("text", ["explode", "scale", "scale:x"])
def test_bad_fault_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="fault"):
        Fault.parse(text)


def test_poisoned_weights() -> None:
    weights = {"a": np.ones(3, np.float32)}
    assert Fault("scale", -10).tamper(weights, 0)["a"].tolist() == [-10.0] * 3
    noise = Fault("random", 2.0).tamper(weights, 0)["a"]
    assert noise.dtype == np.float32 and not np.allclose(noise, 1.0)
    assert Fault().tamper(weights, 0)["a"] is weights["a"]
