"""Claims and bindings survive a restart: the journal replays to the same ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import Resources

from crdt.errors import InvalidDelta

from fedcore import framelog
from edgeagent.clusters import Phase
from fedcore.framelog import FrameLog
from edgeagent.ledger import Ledger
from fedplane.lab.sims.placementsim import PlacementSim


def nodes(n: int) -> list[Node]:
    return [Node(f"n{i}", 16000, 65536, gpus=2) for i in range(n)]


def test_journal_replay_rebuilds_the_same_ledger(tmp_path: Path) -> None:
    sim = PlacementSim(nodes(3), seed=11)
    for i in range(12):
        sim.cluster.submit(Pod(f"p{i}", 2000, 2048))
    sim.run(3.0)
    log = FrameLog(tmp_path / "claims.journal")
    log.append(sim.journals["n0"])
    log.sync()
    log.close()
    original = sim.agents["n0"].ledger
    replayed = Ledger.replay("n0", "n0", nodes(3)[0].capacity, (op for batch in FrameLog(tmp_path / "claims.journal").read() for op in batch))
    assert replayed.replica.free() == original.replica.free()
    assert replayed.replica.version() == original.replica.version()
    assert replayed.replica.lamport == original.replica.lamport
    for uid in original.own_pods():
        assert replayed.own_delta(uid) == original.own_delta(uid)


def test_a_snapshot_replays_to_the_same_ledger_and_it_goes_on_alike(tmp_path: Path) -> None:
    """The journal is rewritten as one snapshot op: replaying it must be indistinguishable from the full history."""
    sim = PlacementSim(nodes(3), seed=11)
    for i in range(12):
        sim.cluster.submit(Pod(f"p{i}", 2000, 2048))
    sim.run(3.0)
    for uid in ("p0", "p1", "p2", "p3"):
        sim.cluster.finish(uid)
    sim.run(40.0)  # past compaction
    original = sim.agents["n0"].ledger
    assert original.replica.finished_pods() and any(True for _ in original.own_pods())
    log = FrameLog(tmp_path / "claims.journal")
    log.append(sim.journals["n0"])
    log.replace([[original.snapshot()]])
    log.close()
    frames = list(FrameLog(tmp_path / "claims.journal").read())
    assert [[op[0] for op in batch] for batch in frames] == [["restore"]]
    again = Ledger.replay("n0", "n0", nodes(3)[0].capacity, (op for batch in frames for op in batch))
    assert again.replica.full_state() == original.replica.full_state()
    assert again.replica.finished_pods() == original.replica.finished_pods()
    assert again.replica.free() == original.replica.free() and again.replica.lamport == original.replica.lamport
    assert sorted(again.own_pods()) == sorted(original.own_pods())
    assert all(again.own_delta(uid) == original.own_delta(uid) for uid in original.own_pods())
    assert list(again.reservations()) == list(original.reservations())
    assert again.snapshot() == original.snapshot() and not again.ops
    request = Resources(1000, 1024)
    assert again.claim("fresh", 0, 0.5, request) == original.claim("fresh", 0, 0.5, request)
    assert again.compact() == original.compact()


def test_a_garbled_snapshot_in_the_journal_is_a_clear_error() -> None:
    """A snapshot frame that passed its checksum but holds no claims state stops the replay with InvalidDelta."""
    with pytest.raises(InvalidDelta, match="not a claims delta"):
        Ledger.replay("n0", "n0", nodes(1)[0].capacity, [["restore", b"\x93\x01\x02\x03", [], []]])


def test_replacing_the_journal_leaves_one_file_and_appends_after_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "claims.journal"
    log = FrameLog(path)
    log.append([["bind", "a"]])
    log.append([["bind", "b"]])
    log.replace([[["restore", b"state", [], []]]])
    assert not log.dirty and log.size() == path.stat().st_size
    log.append([["bind", "c"]])
    log.close()
    assert list(FrameLog(path).read()) == [[["restore", b"state", [], []]], [["bind", "c"]]]
    assert [p.name for p in tmp_path.iterdir()] == ["claims.journal"]


def test_a_failed_replace_leaves_the_journal_as_it_was_and_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "claims.journal"
    log = FrameLog(path)
    log.append([["bind", "a"]])
    log.sync()

    def refuse(src: object, dst: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(framelog.os, "replace", refuse)
    with pytest.raises(OSError):
        log.replace([[["restore", b"state", [], []]]])
    log.append([["bind", "b"]])
    log.close()
    assert list(FrameLog(path).read()) == [[["bind", "a"]], [["bind", "b"]]]


def test_torn_tail_is_cut_and_committed_frames_kept(tmp_path: Path) -> None:
    path = tmp_path / "claims.journal"
    log = FrameLog(path)
    log.append([["bind", "a"]])
    log.append([["bind", "b"]])
    log.sync()
    log.close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])
    log = FrameLog(path)
    assert list(log.read()) == [[["bind", "a"]]]
    assert path.stat().st_size < len(whole) - 3
    log.append([["bind", "c"]])
    log.close()
    assert list(FrameLog(path).read()) == [[["bind", "a"]], [["bind", "c"]]]


def test_restarted_agent_neither_loses_nor_doubles_a_placement() -> None:
    sim = PlacementSim(nodes(4), seed=12, detect=30.0)
    for i in range(20):
        sim.at(i * 0.05, lambda i=i: sim.cluster.submit(Pod(f"p{i}", 2000, 2048)))
    sim.run(0.5)
    busy = max(sim.agents, key=lambda n: len(sim.agents[n].running) + sum(1 for _ in sim.agents[n].ledger.reservations()))
    held = set(sim.agents[busy].running)
    sim.kill(busy)  # a crash: no goodbye; peers would only notice after 30 s
    sim.run(0.8)
    sim.revive(busy)
    assert set(sim.agents[busy].running) == held, "bindings survived the restart"
    sim.run(5.0)
    running = {uid: sim.cluster.bound_node(uid) for uid, p in sim.cluster.pods.items() if p.phase is Phase.RUNNING}
    assert len(running) == 20
    owners = {uid: [n for n, p in sim.agents.items() if uid in p.running] for uid in running}
    assert all(owners[uid] == [node] for uid, node in running.items())
    assert sim.cluster.evidence.capacity_refusals == 0


@pytest.mark.parametrize("snapshot", [False, True], ids=["journal", "snapshot"])
def test_a_bind_adopted_after_losing_the_crdt_race_comes_back_at_the_back_ends_epoch(snapshot: bool) -> None:
    """The back end bound our claim while a better rival claim was on its way: we adopt the pod at a higher CRDT
    epoch, but the back end still runs it at the epoch it was bound at, and that is what a restart must restore
    (an eviction is fenced by it). The daemon test saw restarted pods come back at epoch 2 about 1 run in 12."""
    from crdt import wire
    from edgeagent import records
    from edgeagent.clusters import BindOutcome, BindResult, PodUpdate
    from edgeagent.config import PlacementSection
    from edgeagent.effects import Bind
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer

    node, pod = Node("a1", 8000, 16384, gpus=1), Pod("p0", 1000, 1024)
    ledger = Ledger("a1", "a1", node.capacity)
    placer = Placer(node, ledger, HeuristicScorer(), PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(pod, 1, Phase.PENDING), 0.0)
    now, binds = 0.0, []
    while not binds:
        now += 0.05
        binds = [e for e in placer.tick(now) if isinstance(e, Bind)]
    assert binds == [Bind("p0", "a1", 1, ())]
    rival = Ledger("a2", "a2", node.capacity)
    placer.record("a2", records.claim_key("p0"), wire.encode_delta(rival.claim("p0", 1, 1e9, pod.request)), now)
    placer.bind_done("p0", BindResult(BindOutcome.BOUND, "a1", 1), now)
    assert placer.running == {"p0": 1}
    assert [c.epoch for c in ledger.reservations()] == [2], "adopted at a higher CRDT epoch"
    ops = [ledger.snapshot()] if snapshot else ledger.take_ops()
    restarted = Placer(node, Ledger.replay("a1", "a1", node.capacity, ops), HeuristicScorer(), PlacementSection(), 0.0)
    assert restarted.running == {"p0": 1}


def test_a_journal_from_before_bind_epochs_were_recorded_still_replays() -> None:
    ledger = Ledger.replay("n0", "n0", nodes(1)[0].capacity, [["claim", "p", 3, 0.5, [1000, 1024, 0, 0]], ["bind", "p"]])
    (claim,) = ledger.reservations()
    assert ledger.bound_epoch(claim) == 3
