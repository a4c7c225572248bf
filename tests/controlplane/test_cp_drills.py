"""Failover drills through the real service: outage, region partition, agent crash and a control-plane
crash mid-failover, each judged by ground truth (nothing lost, nothing duplicated), plus the CLI's JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fedplane.lab.drills import failoverdrill
from cp_feeder import EVIDENCE, EvidenceFeeder
from fedplane.cli import main

KEYS = ["scenario", "runs", "detect_s_median", "recovery_s_p50", "recovery_s_p99", "success_rate", "pods_lost", "pods_duplicated"]


def run(scenario: str, runs: int, seed: int = 0) -> tuple[dict[str, object], list[failoverdrill.RunResult]]:
    """The control plane's side of a drill, fast: stand-in agents report, the twin binds the pods."""
    config = failoverdrill.DrillConfig(agents_bind=False)
    return asyncio.run(failoverdrill.run_drill(scenario, runs, seed, config, source=EvidenceFeeder, evidence=EVIDENCE))


@pytest.mark.integration
def test_cluster_outage_fails_over_fast_with_nothing_lost_or_doubled() -> None:
    summary, results = run("cluster-outage", 2)
    assert summary["success_rate"] == 1.0 and summary["pods_lost"] == 0 and summary["pods_duplicated"] == 0
    assert all(r.detect_s is not None and r.recovery_s is not None for r in results)
    assert all(0 < r.detect_s < r.recovery_s < 10.0 for r in results)  # type: ignore[operator]
    assert all(r.failovers > 0 for r in results)


@pytest.mark.integration
def test_region_partition_is_judged_a_partition_and_cleaned_up_after_the_heal() -> None:
    summary, results = run("region-partition", 1, seed=3)
    assert summary["success_rate"] == 1.0 and summary["pods_duplicated"] == 0
    assert results[0].stale_copies_max > 0, "pods kept running behind the partition"


@pytest.mark.integration
def test_agent_crash_alone_triggers_no_failover() -> None:
    summary, results = run("agent-crash", 1)
    assert summary["success_rate"] == 1.0 and results[0].failovers == 0 and results[0].detect_s is not None


@pytest.mark.integration
@pytest.mark.parametrize("seed", [0, 1])
def test_control_plane_crash_mid_failover_resumes_from_the_journal(seed: int) -> None:
    summary, results = run("control-plane-crash", 1, seed)
    assert summary["success_rate"] == 1.0 and summary["pods_lost"] == 0 and summary["pods_duplicated"] == 0
    assert results[0].crash_point


def test_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        asyncio.run(failoverdrill.run_drill("meteor", 1))
    with pytest.raises(ValueError, match="runs must be"):
        asyncio.run(failoverdrill.run_drill("cluster-outage", 0))


@pytest.mark.integration
def test_drill_cli_prints_the_agreed_json_and_writes_a_timeline(tmp_path: Path) -> None:
    png = tmp_path / "timeline.png"
    result = CliRunner().invoke(main, ["drill", "failover", "--scenario", "cluster-outage", "--runs", "1", "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data)[: len(KEYS)] == KEYS
    assert data["pods_lost"] == 0 and data["pods_duplicated"] == 0 and data["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
