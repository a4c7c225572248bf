"""Every decision the plane records is one log line on the wall clock; --log-format json gives one object per line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import logs
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Template, Workload


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """``logs.configure`` sets the process's root logger (as serve does): put it back for the tests after this one."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_json_lines_carry_the_decision(capsys: pytest.CaptureFixture[str], root_logger: logging.Logger) -> None:
    root_logger.handlers[:] = []  # as in a command's process: nobody set logging up yet
    logs.configure("json")
    logs.decision("failover", "web", "c1", "c0", ("c1 is down", "c0 has room"))
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["time"].endswith("Z") and line["level"] == "info" and line["logger"] == "controlplane.decisions"
    assert (line["kind"], line["workload"], line["source"], line["target"]) == ("failover", "web", "c1", "c0")
    assert line["reasons"] == ["c1 is down", "c0 has room"] and "from=c1" in line["message"]


def test_an_embedding_that_set_logging_up_keeps_it(root_logger: logging.Logger) -> None:
    mine = logging.NullHandler()
    root_logger.handlers[:] = [mine]
    logs.configure("json")
    assert root_logger.handlers == [mine]


def test_the_plane_logs_what_it_records(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plane = ControlPlane(tmp_path / "cp.db", Backends(lambda: 0.0), lambda: 0.0)
    try:
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2))
        with caplog.at_level(logging.INFO, logger="controlplane.decisions"):
            plane.tick(0.0)
            assert plane.submit(Workload("web", 1, Template(100, 64)), dry_run=False).ok
        recorded = [d.kind for d in plane.registry.decisions(50)]
    finally:
        plane.close()
    logged = [r.fields["kind"] for r in caplog.records if r.name == "controlplane.decisions"]  # type: ignore[attr-defined]
    assert "place" in logged and sorted(logged) == sorted(recorded)
