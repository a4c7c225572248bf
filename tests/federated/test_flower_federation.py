"""A real Flower federation on loopback: a SuperLink and three SuperNodes as processes, regional data from the traces.

Rounds complete with every client, FedAvg equals the example-weighted mean of the real updates,
each round's global model lands in the registry with verified hashes, a client that crashes
mid-round does not hold its round past the deadline, and stopping the engine leaves no process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import json
import pytest

from federated.flower import datasets, engine, registry, supervisor

pytestmark = pytest.mark.integration

CLIENTS = 3


@pytest.fixture(scope="module")
def data(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three app-based regions recorded on a 120-node slice of the openb fleet (a few seconds)."""
    return datasets.prepare(tmp_path_factory.mktemp("data"), datasets.DataSpec(CLIENTS, "app", fleet=120, traces=str(traces)))


def federation(workdir: Path, data: Path, faults: dict[int, str], **overrides: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Start an engine, run one federation, stop it; returns the report lines and the process groups it had."""
    nodes = [{"partition-id": k, "data-path": str(datasets.region_file(data, k)), **({"fault": faults[k]} if k in faults else {})}
             for k in range(CLIENTS)]
    report = workdir / "rounds.jsonl"
    with engine.start(workdir, nodes) as eng:
        groups = list(eng.groups.values())
        eng.run({"data-dir": str(data), "registry-dir": str(workdir / "registry"), "report-file": str(report),
                 "min-clients": CLIENTS, "local-epochs": 1, **overrides}, timeout_s=240)
    return [json.loads(line) for line in report.read_text().splitlines()], groups


def test_three_supernodes_two_rounds(data: Path, tmp_path: Path) -> None:
    lines, groups = federation(tmp_path, data, {}, **{"num-rounds": 2})
    assert [line["answered"] for line in lines] == [CLIENTS, CLIENTS]
    assert all(line["fedavg_exact"] for line in lines)
    assert sorted(lines[0]["examples"]) == sorted(len(datasets.experience.load(datasets.region_file(data, k))) for k in range(CLIENTS))
    versions = registry.versions(tmp_path / "registry")
    assert [v.name for v in versions] == [line["version"] for line in lines] == ["v000001", "v000002"]
    for line, version in zip(lines, versions, strict=True):
        training = registry.verify(version).manifest["training"]
        assert (training["round"], training["quality"]) == (line["round"], line["quality"])
    assert not any(supervisor.group_alive(g) for g in groups)
    assert not (tmp_path / engine.STATE).exists()


def test_a_crashing_client_does_not_stall_the_round(data: Path, tmp_path: Path) -> None:
    deadline = 25.0
    lines, groups = federation(tmp_path, data, {2: "crash"}, **{"num-rounds": 1, "round-deadline-s": deadline, "strategy": "median"})
    (line,) = lines
    assert line["answered"] == CLIENTS - 1 and line["asked"] == CLIENTS
    assert line["round_s"] < deadline + 5.0
    registry.verify(registry.versions(tmp_path / "registry")[0])
    assert not any(supervisor.group_alive(g) for g in groups)
