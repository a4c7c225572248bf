"""``fedplane bench claims`` runs the agents' own placement cores and says so in its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from click.testing import CliRunner

from crdt.claims import ClaimDelta
from crdt.claims_replica import ClaimsReplica
from fedplane.lab.benches import claimsbench
from fedplane.lab.benches.claimsbench import ClaimsBench, replay_merges, run
from fedplane.lab.benches.commands import bench_claims
from fedcore.resources import Resources


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


def _fleet(n: int) -> tuple[SimpleNamespace, list[ClaimsReplica], list[dict[str, int]]]:
    """What ``_audit`` reads of a PlacementSim: live agents, each with its replica and the pods it runs."""
    replicas = [ClaimsReplica(f"agent-{i}", f"agent-{i}", Resources(4000, 8192)) for i in range(n)]
    running: list[dict[str, int]] = [{} for _ in range(n)]
    agents = {r.agent_id: SimpleNamespace(node=SimpleNamespace(name=r.node), ledger=SimpleNamespace(replica=r),
                                          running=running[i]) for i, r in enumerate(replicas)}
    return SimpleNamespace(agents=agents, down=set()), replicas, running


def _sent(outcome: Any, *to: ClaimsReplica) -> None:
    delta = outcome[1] if isinstance(outcome, tuple) else outcome
    assert isinstance(delta, ClaimDelta), delta
    for replica in to:
        replica.merge(delta)


def test_a_replica_that_has_not_yet_heard_a_newer_epoch_is_lag_not_a_stale_win() -> None:
    """The end state two of 40 seeded runs (8 agents x 400 pods) stopped in: an agent re-raised the epoch of its own
    unbound claim and released it (the back end refused the bind); that record was still on its way to one peer,
    which therefore still named the old claim. The owner knows better and only the owner binds: lag, not a fault."""
    sim, (a, b, c), _ = _fleet(3)
    _sent(a.claim("pod", 1, 1.0, Resources(1000, 1024)), b, c)
    _sent(a.bump_epoch("pod"), b)  # lost on its way to c (push-pull will bring it)
    _sent(a.release("pod"), b)
    assert c.winner("pod") is not None and c.winner("pod").epoch == 1 < b.epoch("pod") == 2
    counts = claimsbench._Counts()
    assert claimsbench._audit(sim, counts) == {"undecided_pods": 1, "lagging_pods": 1}  # type: ignore[arg-type]
    assert counts.stale_epoch_wins == 0 and not counts.double_bookings
    c.merge(a.state_delta_since(c.version()))  # anti-entropy: c catches up, and nothing is behind any more
    counts = claimsbench._Counts()
    assert claimsbench._audit(sim, counts) == {"undecided_pods": 1, "lagging_pods": 0}  # type: ignore[arg-type]
    assert counts.stale_epoch_wins == 0 and not counts.double_bookings


def test_running_a_pod_under_a_claim_ones_own_replica_has_seen_superseded_is_a_stale_win() -> None:
    sim, (a, b, _), running = _fleet(3)
    _sent(a.claim("pod", 1, 1.0, Resources(1000, 1024)), b)
    _sent(a.bind("pod"), b)
    running[0]["pod"] = 1
    _sent(b.bump_epoch("pod"), a)  # a re-placer raised the epoch and a heard it, yet a still runs the pod
    counts = claimsbench._Counts()
    claimsbench._audit(sim, counts)  # type: ignore[arg-type]
    assert counts.stale_epoch_wins == 1


def test_two_agents_running_one_pod_is_a_double_booking_whatever_their_replicas_say() -> None:
    sim, (a, b, c), running = _fleet(3)
    _sent(a.claim("pod", 1, 1.0, Resources(1000, 1024)), b, c)
    _sent(a.bind("pod"), b, c)
    running[0]["pod"] = running[1]["pod"] = 1
    counts = claimsbench._Counts()
    claimsbench._audit(sim, counts)  # type: ignore[arg-type]
    assert counts.double_bookings == {"pod"}


def test_a_run_is_a_function_of_its_seed_not_of_the_processs_hash_seed() -> None:
    """Two processes with different PYTHONHASHSEED place the same pods the same way (set iteration order once
    decided what agents republished and reopened first, so a seed replayed differently from run to run)."""
    script = ("import json; from fedplane.lab.benches.claimsbench import ClaimsBench, run; "
              "r = run(ClaimsBench(agents=6, pods=240, seed=5, rate=20.0, life=8.0)); "
              "print(json.dumps({k: v for k, v in r.items() if not k.startswith(('merges_per_s', 'sim_'))}))")
    reports = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert reports[0] == reports[1] and json.loads(reports[0])["binds"] > 0


def test_replicas_that_each_miss_the_others_claim_are_lagging_not_undecided() -> None:
    sim, (a, b), _ = _fleet(2)
    a.claim("pod", 1, 1.0, Resources(1000, 1024))
    b.claim("pod", 1, 2.0, Resources(1000, 1024))  # neither claim has reached the other replica yet
    counts = claimsbench._Counts()
    assert claimsbench._audit(sim, counts) == {"undecided_pods": 0, "lagging_pods": 1}  # type: ignore[arg-type]
    assert counts.stale_epoch_wins == 0 and not counts.double_bookings
