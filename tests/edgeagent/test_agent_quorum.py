"""The quorum rule on the deterministic network: an agent cut off from its peers acts for none of them,
so a heal never evicts a healthy node's pods; the majority re-places the cut agent's pods at a new epoch."""

from __future__ import annotations

from fedcore.nodes import Node
from fedcore.pods import Pod

from edgeagent.clusters import Phase
from edgeagent.config import PlacementSection
from edgeagent.ledger import Ledger
from edgeagent.placing import Placer
from edgeagent.records import NODE_KEY, NodeState, encode_node_state
from edgeagent.scoring import HeuristicScorer
from fedplane.lab.sims.placementsim import PlacementSim


def nodes(n: int) -> list[Node]:
    return [Node(f"n{i:02d}", 16000, 65536) for i in range(n)]


def bound(sim: PlacementSim) -> dict[str, tuple[str, int]]:
    return {uid: (sim.cluster.bound_node(uid), p.epoch) for uid, p in sim.cluster.pods.items() if p.phase is Phase.RUNNING}


def test_a_cut_off_agent_reports_nothing_and_the_heal_evicts_no_healthy_pod() -> None:
    sim = PlacementSim(nodes(5), seed=11, detect=1.0)
    for i in range(30):
        sim.cluster.submit(Pod(f"p{i:03d}", 2000, 4096))
    sim.run(3.0)
    before = bound(sim)
    assert len(before) == 30
    victim = "n00"  # the lowest name: the one that would make itself every dead peer's re-placer
    lost = {uid for uid, (node, _) in before.items() if node == victim}
    assert lost
    sim.cut_off(victim)
    sim.run(8.0)
    assert sim.agents[victim].counters.deferred_replacements == 4, "the cut agent saw 4 deaths and acted on none"
    assert not sim.agents[victim].has_quorum()
    after_cut = bound(sim)
    assert lost <= set(after_cut) and all(after_cut[uid][0] != victim and after_cut[uid][1] == 2 for uid in lost)
    sim.heal(victim, stagger=0.5)  # n01's "alive" restores its quorum while n02..n04 still look dead to it
    sim.run(30.0)  # past placement.quorum_settle: nothing was owed for long
    assert [r for r in sim.reports if r[0] == victim] == [], "the healed agent reported no peer not-ready"
    final = bound(sim)
    healthy = {uid: where for uid, where in before.items() if uid not in lost}
    assert all(final[uid] == where for uid, where in healthy.items()), "no healthy node's pod was moved or re-fenced"
    assert not sim.agents[victim].running, "the healed agent gave up its superseded pods"
    assert {uid for name, uid in sim.evictions if name == victim} == lost
    assert len(final) == 30 and not sim.cluster.evidence.capacity_refusals


def test_a_peer_that_died_while_we_lacked_quorum_is_replaced_once_quorum_has_settled() -> None:
    settings = PlacementSection(quorum_settle=2.0)
    placer = Placer(nodes(1)[0], Ledger.replay("n00", "n00", nodes(1)[0].capacity, []), HeuristicScorer(), settings, 0.0)
    for peer in ("n01", "n02"):
        state = NodeState(peer, nodes(1)[0].capacity, nodes(1)[0].capacity, 0.0, "heuristic", "amd64")
        placer.record(peer, NODE_KEY, encode_node_state(state), 0.0)
    placer.member_suspect("n01", 1.0)
    placer.member_suspect("n02", 1.0)
    assert not placer.has_quorum()
    assert placer.member_dead("n02", 2.0) == [] and placer.counters.deferred_replacements == 1
    placer.member_alive("n01", 3.0)
    assert placer.has_quorum()
    assert placer.next_deadline() <= 5.0
    assert not [e for e in placer.tick(4.9) if type(e).__name__ == "ReportNode"]
    reports = [e for e in placer.tick(5.0) if type(e).__name__ == "ReportNode"]
    assert [(r.node, r.ready) for r in reports] == [("n02", False)], "still dead after quorum settled: re-placed"


def test_own_health_and_the_even_split_tie_breaker() -> None:
    capacity = nodes(1)[0].capacity
    placer = Placer(Node("n01", 16000, 65536), Ledger.replay("n01", "n01", capacity, []), HeuristicScorer(),
                    PlacementSection(), 0.0)
    placer.record("n00", NODE_KEY, encode_node_state(NodeState("n00", capacity, capacity, 0.0, "h", "amd64")), 0.0)
    assert placer.has_quorum()
    placer.member_dead("n00", 1.0)
    assert not placer.has_quorum(), "1 of 2 without the lowest-named agent: the other half decides"
    placer.member_alive("n00", 2.0)
    placer.set_awareness(PlacementSection().max_awareness + 1, 2.0)
    assert placer.has_quorum(), "our own score says nothing of what we see"
    assert not placer.peers.may_act(), "our own probes go unanswered: we may be the problem, so we act for no dead peer"
