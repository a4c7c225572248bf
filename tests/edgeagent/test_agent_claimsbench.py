"""``fedplane bench claims`` runs the agents' own placement cores and says so in its figures."""

from __future__ import annotations

import json

from click.testing import CliRunner

from edgeagent.claimsbench import ClaimsBench, replay_merges, run
from edgeagent.commands import bench_claims


def test_agents_place_every_pod_safely_through_their_own_cores() -> None:
    report = run(ClaimsBench(agents=8, pods=150, seed=3, rate=50.0, life=2.0))
    assert report["policy"] == "agents" and report["oracle"] is False
    assert "edgeagent.placing.Placer" in report["placement_core"]
    assert report["double_bookings"] == report["overcommits"] == report["stale_epoch_wins"] == 0
    assert report["unplaced"] == 0 and report["binds"] >= 150
    assert report["merges"] > 0 and report["merges_per_s"] > 0 and report["replay_rejected"] == 0
    assert report["delta_bytes_per_claim"] * 10 <= report["fullstate_bytes_per_claim"]


def test_the_killed_agents_pods_are_re_placed_at_a_new_epoch() -> None:
    """A third of the way through one agent dies; its peers re-place what it ran, and it returns stale."""
    report = run(ClaimsBench(agents=6, pods=240, seed=5, rate=20.0, life=30.0))
    assert report["replaced_pods"] > 0
    assert report["double_bookings"] == report["stale_epoch_wins"] == 0


def test_replaying_nothing_is_no_rate() -> None:
    assert replay_merges([]) == (0.0, 0)


def test_the_command_labels_the_oracle_variant() -> None:
    result = CliRunner().invoke(bench_claims, ["--agents", "4", "--pods", "40", "--rate", "40", "--life", "1",
                                               "--oracle-variant", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["policy"] == "agents" and report["oracle"] is False
    variant = report["variants"]["crdt-sim-quorum-oracle"]
    assert variant["oracle"] is True and variant["policy"].startswith("toy")
