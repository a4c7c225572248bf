"""The bench command runs end to end at a small size and reports every figure it promises."""

from __future__ import annotations

import json

from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from fedplane.lab.benches.gossipbench import serf_model_rounds
from fedplane.lab.benches.gossipcmd import bench_gossip
from gossip.metrics import Counters, export_prometheus
from gossip.wire import DropReason


def test_bench_gossip_reports_the_promised_figures_as_json() -> None:
    result = CliRunner().invoke(bench_gossip, ["--nodes", "40", "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    for key in ("nodes", "fanout", "probe_interval_s", "rounds_to_99_99", "serf_model_rounds", "digest_bytes_per_node_s",
                "fullstate_bytes_per_node_s", "bytes_ratio", "detect_s_median", "detect_s_p99", "false_deaths_loss10",
                "false_deaths_loss30", "sim_wall_s", "seed"):  # fmt: skip
        assert key in report
    assert report["nodes"] == 40 and report["seed"] == 3
    assert 0 < report["rounds_to_99_99"] <= report["serf_model_rounds"] == serf_model_rounds(40, 3)
    assert report["rounds_counted_as"].startswith("fanout rounds") and "memnet" in report["backend"]
    assert report["interval_rounds_to_99_99"] >= 1
    assert 0 < report["digest_bytes_per_node_s"] < report["fullstate_bytes_per_node_s"]
    assert report["digest_stale_fraction_end"] == report["fullstate_stale_fraction_end"] == 0.0
    assert 0 < report["detect_s_median"] < 5


def test_serf_model_matches_serfs_simulator() -> None:
    """Serf's published simulator gives 11 rounds for fanout 3 at N = 1,000 (its page's default curve)."""
    assert serf_model_rounds(1000, 3) == 11
    assert serf_model_rounds(10_000, 3) == 13
    assert serf_model_rounds(1000, 3, loss=0.5) > serf_model_rounds(1000, 3)
    assert serf_model_rounds(1000, 4) < serf_model_rounds(1000, 3)


def test_the_bench_and_the_agents_share_gossip_defaults() -> None:
    """One home for gossip defaults: the agent's ``gossip:`` section names GossipConfig's."""
    from edgeagent.config import GossipSection
    from gossip.config import GossipConfig

    section, config = GossipSection(), GossipConfig()
    assert section.settings() == config
    for name in ("probe_interval", "gossip_interval", "pushpull_interval", "suspicion_mult", "reap_after",
                 "tombstone_ttl", "retransmit_mult"):
        assert getattr(section, name) == getattr(config, name), name


def test_bench_gossip_help_explains_itself() -> None:
    result = CliRunner().invoke(bench_gossip, ["--help"])
    assert result.exit_code == 0 and "--probe-interval" in result.output and "99.99%" in result.output


def test_counters_export_to_prometheus() -> None:
    counters = Counters(packets_in=3)
    counters.dropped[DropReason.FORGED] = 2
    registry = CollectorRegistry()
    export_prometheus(counters, registry)
    counters.packets_in = 5
    export_prometheus(counters, registry)
    assert registry.get_sample_value("fedplane_gossip_packets_in") == 5
    assert registry.get_sample_value("fedplane_gossip_dropped_forged") == 2


def test_bench_gossip_runs_the_scenarios_asked_for_and_nulls_the_rest() -> None:
    result = CliRunner().invoke(bench_gossip, ["--nodes", "40", "--scenarios", "spread", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["scenarios"] == ["spread"] and report["rounds_to_99_99"] > 0 and report["peak_rss_mib"] > 0
    assert report["bytes_ratio"] is None and report["false_deaths_loss10"] is None
    assert list(report["scenario_cpu_s"]) == ["spread_detect"]
    bad = CliRunner().invoke(bench_gossip, ["--nodes", "40", "--scenarios", "spred"])
    assert bad.exit_code != 0 and "spred" in bad.output and "Traceback" not in bad.output


def test_full_state_bytes_counted_in_the_digest_run_equal_the_full_state_runs() -> None:
    """The count that stands in for the baseline above N = 2,000 matches running the baseline."""
    from fedplane.lab.benches.gossipbench import antientropy_bytes
    from gossip.config import GossipConfig

    config = GossipConfig().replace(probe_interval=0.2, probe_timeout=0.1)
    digest = antientropy_bytes(60, config.replace(count_full_state=True), 2, 4.0, settle=config.pushpull_interval)
    full = antientropy_bytes(60, config.replace(full_state_pushpull=True), 2, 4.0, settle=config.pushpull_interval)
    assert digest.counted_full_state_bytes_per_node_s is not None and full.counted_full_state_bytes_per_node_s is None
    assert abs(digest.counted_full_state_bytes_per_node_s - full.bytes_per_node_s) <= 0.01 * full.bytes_per_node_s
    assert digest.bytes_per_node_s < full.bytes_per_node_s


def test_scenarios_in_processes_give_the_figures_of_one_process() -> None:
    """--jobs runs each scenario in its own process from the same seed: only wall, RSS and the job count may differ."""
    runs = []
    for jobs in ("1", "2"):
        result = CliRunner().invoke(bench_gossip, ["--nodes", "40", "--scenarios", "spread,loss10", "--jobs", jobs, "--json"])
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.output.strip().splitlines()[-1]))
    machine = {"sim_wall_s", "peak_rss_mib", "jobs", "scenario_cpu_s"}
    assert {k: v for k, v in runs[0].items() if k not in machine} == {k: v for k, v in runs[1].items() if k not in machine}
    assert runs[1]["jobs"] == 2 and set(runs[1]["scenario_cpu_s"]) == {"spread_detect", "loss10"}
