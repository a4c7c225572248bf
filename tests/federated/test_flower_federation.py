"""A real Flower federation on loopback: a SuperLink and three SuperNodes as processes, regional data from the traces.

Rounds complete with every client, FedAvg equals the example-weighted mean of the real updates,
each round's global model lands in the registry with verified hashes, a client that crashes
mid-round does not hold its round past the deadline, and stopping the engine leaves no process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from federated.flower import datasets, engine, registry
from federated.flower import teacherdata

pytestmark = pytest.mark.integration

CLIENTS = 3


@pytest.fixture(scope="module")
def data(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three app-based regions recorded on a 120-node slice of the openb fleet (a few seconds)."""
    return datasets.prepare(tmp_path_factory.mktemp("data"), datasets.DataSpec(CLIENTS, "app", fleet=120, traces=str(traces)))


def federation(workdir: Path, data: Path, faults: dict[int, str], **overrides: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Start an engine, run one federation, stop it; returns the report lines and the process groups it had."""
    report = workdir / "rounds.jsonl"
    with engine.start(workdir, datasets.node_configs(data, faults)) as eng:
        eng.run({"data-dir": str(data), "registry-dir": str(workdir / "registry"), "report-file": str(report),
                 "min-clients": CLIENTS, "local-epochs": 1, **overrides}, timeout_s=300)
        processes = [psutil.Process(pid) for pid in eng.groups.values()]
        processes += [child for leader in list(processes) for child in leader.children(recursive=True)]
    return [json.loads(line) for line in report.read_text().splitlines()], processes


def gone(processes: list[psutil.Process]) -> bool:
    """True when none of ``processes`` (the engine's whole tree as it was) is still running."""

    def running(process: psutil.Process) -> bool:
        try:
            return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    return not any(running(p) for p in processes)


def test_three_supernodes_two_rounds(data: Path, tmp_path: Path) -> None:
    lines, processes = federation(tmp_path, data, {}, **{"num-rounds": 2})
    assert [line["answered"] for line in lines] == [CLIENTS, CLIENTS]
    assert all(line["fedavg_exact"] for line in lines)
    assert sorted(lines[0]["examples"]) == sorted(len(teacherdata.load(datasets.region_file(data, k))) for k in range(CLIENTS))
    versions = registry.versions(tmp_path / "registry")
    assert [v.name for v in versions] == [line["version"] for line in lines] == ["v000001", "v000002"]
    for line, version in zip(lines, versions, strict=True):
        training = registry.verify(version).manifest["training"]
        assert (training["round"], training["quality"]) == (line["round"], line["quality"])
    assert gone(processes)
    assert not (tmp_path / engine.STATE).exists()


def test_a_crashing_client_does_not_stall_the_round(data: Path, tmp_path: Path) -> None:
    """The crashed client never answers; the round closes by its deadline with whoever did.

    (On a loaded machine an honest client may miss the deadline too, so only an upper bound on
    who answered is asserted.)"""
    deadline = 45.0
    lines, processes = federation(tmp_path, data, {2: "crash"}, **{"num-rounds": 1, "round-deadline-s": deadline, "strategy": "median"})
    (line,) = lines
    assert line["asked"] == CLIENTS and 1 <= line["answered"] <= CLIENTS - 1
    assert line["round_s"] < deadline + 5.0
    registry.verify(registry.versions(tmp_path / "registry")[0])
    assert gone(processes)


def test_cli_up_and_down_leave_nothing_behind(data: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from federated.flower.commands import federated

    runner = CliRunner()
    started = runner.invoke(federated, ["up", "--clients", str(CLIENTS), "--data", str(data), "--workdir", str(tmp_path)])
    assert started.exit_code == 0, started.output
    leaders = [psutil.Process(pid) for pid in json.loads(started.output)["processes"].values()]
    processes = leaders + [child for leader in leaders for child in leader.children(recursive=True)]
    assert len(leaders) == CLIENTS + 1 and (tmp_path / engine.STATE).exists()
    again = runner.invoke(federated, ["up", "--clients", str(CLIENTS), "--data", str(data), "--workdir", str(tmp_path)])
    assert again.exit_code != 0 and "engine may be running" in str(again.exception)
    stopped = runner.invoke(federated, ["down", "--workdir", str(tmp_path)])
    assert stopped.exit_code == 0 and len(json.loads(stopped.output)["stopped"]) == CLIENTS + 1
    assert gone(processes) and not (tmp_path / engine.STATE).exists()
