"""The placement core on the deterministic in-memory network: one winner, no over-commit, re-placement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.scheduling.queues import LEARNED_AFTER_S

from crdt.claims import Status
from edgeagent.clusters import BindOutcome, BindResult, Phase
from edgeagent.config import PlacementSection
from edgeagent.effects import Publish
from edgeagent.publishing import STATE_EVERY
from fedplane.lab.sims.placementsim import PlacementSim

if TYPE_CHECKING:
    from edgeagent.placing import Placer


def nodes(n: int, cpu: int = 16000, gpus: int = 2) -> list[Node]:
    return [Node(f"n{i:02d}", cpu, 65536, gpus=gpus) for i in range(n)]


def pod(i: int, cpu: int = 2000, gpu: int = 0) -> Pod:
    return Pod(f"p{i:04d}", cpu, 4096, gpu=GpuRequest(1, gpu) if gpu else GpuRequest())


def running(sim: PlacementSim) -> dict[str, str]:
    return {uid: sim.cluster.bound_node(uid) for uid, p in sim.cluster.pods.items() if p.phase is Phase.RUNNING}


def assert_safe(sim: PlacementSim) -> None:
    """Each running pod is held by exactly its node's agent, and no agent reserves beyond its capacity."""
    bound = running(sim)
    for name, placer in sim.agents.items():
        if name in sim.down:
            continue
        assert placer.ledger.replica.free().is_nonnegative()
        for uid in placer.running:
            if uid in bound:
                assert bound[uid] == name, f"{uid} runs on {bound[uid]} but {name} thinks it runs it"
    assert sim.cluster.evidence.capacity_refusals == 0


@pytest.mark.parametrize("agents,seed", [(3, 0), (8, 1), (8, 2)])
def test_one_pod_one_winner_and_losers_release(agents: int, seed: int) -> None:
    sim = PlacementSim(nodes(agents), seed=seed)
    sim.cluster.submit(pod(0))
    sim.run(2.0)
    assert len(running(sim)) == 1
    holders = [n for n, p in sim.agents.items() if "p0000" in p.running]
    assert holders == [running(sim)["p0000"]]
    for name, placer in sim.agents.items():
        if name not in holders:
            assert placer.ledger.replica.free() == placer.node.capacity, f"{name} kept escrow"


@pytest.mark.parametrize("seed,loss,candidates", [(3, 0.0, 3), (4, 0.05, 3), (5, 0.0, 0)])
def test_many_pods_all_placed_once(seed: int, loss: float, candidates: int) -> None:
    settings = PlacementSection(candidates=candidates)
    sim = PlacementSim(nodes(8, cpu=64000, gpus=4), settings, seed=seed, loss=loss)
    for i in range(120):
        sim.at(i * 0.01, lambda i=i: sim.cluster.submit(pod(i, gpu=500 if i % 3 == 0 else 0)))
    sim.run(10.0)
    assert len(running(sim)) == 120
    assert_safe(sim)
    assert sum(len(p.running) for p in sim.agents.values()) == 120


def test_full_cluster_queues_until_a_pod_completes() -> None:
    sim = PlacementSim(nodes(2, cpu=4000, gpus=0), seed=6)
    for i in range(5):
        sim.cluster.submit(pod(i, cpu=2000))
    sim.run(3.0)
    assert len(running(sim)) == 4
    first = next(iter(running(sim)))
    sim.cluster.finish(first)
    sim.run(6.0)
    assert len(running(sim)) == 4 and sim.cluster.pods["p0004"].phase is Phase.RUNNING
    assert_safe(sim)


def test_dead_agent_pods_are_replaced_at_a_bumped_epoch_and_evicted_on_return() -> None:
    sim = PlacementSim(nodes(6), seed=7, detect=0.5)
    for i in range(30):
        sim.cluster.submit(pod(i))
    sim.run(3.0)
    victim = max(sim.agents, key=lambda n: len(sim.agents[n].running))
    lost = set(sim.agents[victim].running)
    assert lost
    sim.kill(victim)
    sim.run(8.0)
    after = running(sim)
    assert lost <= set(after), "every pod of the dead agent runs again"
    assert not {uid for uid in lost if after[uid] == victim}
    assert all(sim.cluster.pods[uid].epoch == 2 for uid in lost)
    sim.revive(victim)
    sim.run(12.0)
    assert not sim.agents[victim].running, "the returning agent gave up its superseded pods"
    assert {uid for name, uid in sim.evictions if name == victim} == lost
    assert_safe(sim)


def test_offline_replacement_waits_for_the_cluster_then_binds_once() -> None:
    sim = PlacementSim(nodes(4), seed=8, detect=0.5)
    for i in range(8):
        sim.cluster.submit(pod(i))
    sim.run(2.0)
    victim = max(sim.agents, key=lambda n: len(sim.agents[n].running))
    lost = set(sim.agents[victim].running)
    sim.cluster.reachable = False
    sim.kill(victim)
    sim.run(4.0)
    sim.cluster.reachable = True
    for name in sim.agents:  # what a watch reconnect delivers
        for held in sim.cluster.pods.values():
            from edgeagent.clusters import PodUpdate

            update = PodUpdate(held.pod, held.epoch, held.phase, sim.cluster.bound_node(held.pod.uid))
            sim.at(sim.now, lambda n=name, u=update: sim._call(n, lambda p: p.pod_update(u, sim.now)))
    sim.run(10.0)
    assert lost <= set(running(sim)) and victim not in running(sim).values()
    assert_safe(sim)


def test_refused_bind_waits_for_the_winner_and_garbage_records_are_dropped() -> None:
    sim = PlacementSim(nodes(2), seed=9)
    placer = sim.agents["n00"]
    assert placer.record("n01", "c/p0001", b"\x00garbage", 0.0) == []
    assert placer.record("n01", "n", {"node": 3}, 0.0) == []
    assert placer.counters.bad_records == 2
    assert placer.bind_done("unknown", BindResult(BindOutcome.DUPLICATE), 0.0) == []


def test_a_refused_bind_is_not_retried_until_something_changes() -> None:
    from edgeagent.effects import Bind
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.clusters import PodUpdate
    from edgeagent.scoring import HeuristicScorer

    node = nodes(1)[0]
    placer = Placer(node, Ledger(node.name, node.name, node.capacity), HeuristicScorer(), PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    binds = [e for e in placer.tick(0.2) if isinstance(e, Bind)]
    assert binds == [Bind("p0001", node.name, 1)]
    placer.bind_done("p0001", BindResult(BindOutcome.DUPLICATE, "other", 1), 0.21)
    for t in (0.22, 0.5, 1.5, 3.0):
        assert not [e for e in placer.tick(t) if isinstance(e, Bind)]
    placer.pod_update(PodUpdate(pod(1), 2, Phase.PENDING), 3.1)  # re-placed at the back end: a fresh chance
    effects = placer.tick(3.1) + placer.tick(3.5)
    assert any(isinstance(e, Bind) and e.epoch == 2 for e in effects)


def _lone_placer(node: Node) -> "Placer":
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer

    return Placer(node, Ledger(node.name, node.name, node.capacity), HeuristicScorer(), PlacementSection(), 0.0)


def _asked_to_bind_once() -> tuple[Node, "Placer"]:
    """A lone placer that claimed its one pending pod and issued the bind (answer not in yet)."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind

    node = nodes(1)[0]
    placer = _lone_placer(node)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    assert [e for e in placer.tick(0.2) if isinstance(e, Bind)]
    return node, placer


def test_a_capacity_refusal_backs_off_even_when_the_release_kicks_the_queue() -> None:
    from edgeagent.effects import Bind

    node, placer = _asked_to_bind_once()
    placer.bind_done("p0001", BindResult(BindOutcome.REJECTED, node.name, 1, "no room"), 0.21)
    for t in (0.22, 0.4, 1.3, 2.5, 5.0):
        assert not [e for e in placer.tick(t) if isinstance(e, Bind)], f"re-bound at {t}"
    assert placer.next_deadline() >= 0.21 + 5 * PlacementSection().retry_interval
    effects = placer.tick(5.3) + placer.tick(5.5)
    assert any(isinstance(e, Bind) for e in effects), "tries again after the back-off"


def test_the_bind_names_the_devices_the_agent_reserved_and_the_cluster_books_them() -> None:
    import asyncio

    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind
    from fedplane.lab.doubles.memcluster import InMemoryCluster

    node = nodes(1, gpus=2)[0]
    placer = _lone_placer(node)
    whole = [Pod(f"g{i}", 1000, 1024, gpu=GpuRequest(1, 1000)) for i in range(2)]
    for p in whole:
        placer.pod_update(PodUpdate(p, 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    binds = {e.pod: e for e in placer.tick(0.2) if isinstance(e, Bind)}
    assert sorted(b.gpus for b in binds.values()) == [(0,), (1,)]
    cluster = InMemoryCluster([node])
    for p in whole:
        cluster.submit(p)
    second = binds["g1"]  # bound first: a cluster picking best-fit would have given it device 0
    assert asyncio.run(cluster.bind(second.pod, node.name, 1, second.gpus)).ok
    assert cluster.pods["g1"].placement is not None and cluster.pods["g1"].placement.gpus == second.gpus
    assert asyncio.run(cluster.bind("g0", node.name, 1, binds["g0"].gpus)).ok
    assert cluster.evidence.capacity_refusals == 0


@pytest.mark.parametrize("gpus", [(2,), (-1,), (0, 0)])
def test_the_cluster_refuses_devices_the_node_does_not_have(gpus: tuple[int, ...]) -> None:
    import asyncio

    from fedplane.lab.doubles.memcluster import InMemoryCluster

    node = nodes(1, gpus=2)[0]
    cluster = InMemoryCluster([node])
    shape = GpuRequest(len(gpus), 1000)
    cluster.submit(Pod("g", 1000, 1024, gpu=shape))
    result = asyncio.run(cluster.bind("g", node.name, 1, gpus))
    assert result.outcome is BindOutcome.REJECTED and cluster.pods["g"].placement is None


def test_node_state_carries_the_gpu_devices_and_reads_peers_that_do_not() -> None:
    from edgeagent import records
    from fedcore.resources import Resources

    state = records.NodeState("n0", Resources(8000, 1024, 0, 8000), Resources(4000, 512, 0, 1570), 0.5, "m", "amd64", 0, 570)
    assert records.decode_node_state(records.encode_node_state(state)) == state
    older = records.encode_node_state(state)
    del older["dev"]
    assert records.decode_node_state(older).gpus_whole == -1
    with pytest.raises(ValueError, match="dev"):
        records.decode_node_state({**older, "dev": [1, "x"]})


def test_a_peer_whose_free_gpu_milli_is_spread_thin_does_not_hold_us_back() -> None:
    """Its summed free milli makes it the best fit for a whole GPU, but no device of it is whole."""
    from edgeagent import records
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Publish
    from fedcore.resources import Resources

    node = Node("n01", 16000, 65536, gpus=8)
    placer = _lone_placer(node)
    placer.settings = PlacementSection(candidates=1)
    cap = Resources(16000, 65536, 0, 8000)
    thin = records.NodeState("n00", cap, Resources(16000, 65536, 0, 1570), 0.0, "h", "amd64", 0, 570)
    placer.record("n00", records.NODE_KEY, records.encode_node_state(thin), 0.0)
    placer.pod_update(PodUpdate(Pod("g", 1000, 1024, gpu=GpuRequest(1, 1000)), 1, Phase.PENDING), 0.0)
    claims = [e for e in placer.tick(0.0) if isinstance(e, Publish) and e.key == "c/g"]
    assert claims, "we are the only node a whole GPU fits, so we claim at once"
    assert placer.node_state().gpus_whole == 7 and placer.node_state().gpu_share == 1000


def _rival_claim(uid: str, score: float, epoch: int = 1, node: str = "n09") -> bytes:
    """A peer's gossip record for ``uid``: its claim at ``epoch`` with ``score``."""
    from crdt import wire
    from edgeagent.ledger import Ledger
    from fedcore.resources import Resources

    rival = Ledger(node, node, Resources(16000, 65536, 0, 2000))
    rival.claim(uid, epoch, score, Resources(1000, 1024))
    delta = rival.own_delta(uid)
    assert delta is not None
    return wire.encode_delta(delta)


def test_the_claim_window_runs_from_the_first_claim_not_from_a_late_one() -> None:
    """Our room freed up after a rival claimed: we still claim (and win on score), but do not restart the window."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind

    node = nodes(1, cpu=2000)[0]
    placer = _lone_placer(node)
    placer.pod_update(PodUpdate(pod(0, cpu=2000), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    assert [e for e in placer.tick(0.2) if isinstance(e, Bind)]
    placer.bind_done("p0000", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)  # our node is now full
    placer.pod_update(PodUpdate(pod(1, cpu=1000), 1, Phase.PENDING), 1.0)
    placer.record("n09", "c/p0001", _rival_claim("p0001", score=-50.0), 1.0)
    placer.tick(1.0)
    assert "p0001" not in placer.holdings.placements, "no room: no claim"
    placer.pod_update(PodUpdate(pod(0, cpu=2000), 1, Phase.SUCCEEDED, node.name), 1.08)  # room again
    placer.tick(1.08)
    assert "p0001" in placer.holdings.placements
    window = PlacementSection().claim_window
    assert placer.next_deadline() == pytest.approx(max(1.0 + window, 1.08 + window / 4))
    binds = [e for e in placer.tick(placer.next_deadline()) if isinstance(e, Bind)]
    assert [b.pod for b in binds] == ["p0001"]


def test_a_node_that_cannot_take_a_pod_corrects_the_state_peers_rank_it_by_at_once() -> None:
    from edgeagent import records
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Publish

    node = nodes(1, cpu=4000)[0]
    placer = _lone_placer(node)
    placer.announce(0.0)  # peers hear: 4 cores free
    placer.pod_update(PodUpdate(pod(0, cpu=3000), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)  # claimed: 1 core left, but the next state publication is only due at STATE_EVERY
    placer.pod_update(PodUpdate(pod(1, cpu=2000), 1, Phase.PENDING), 0.05)
    states = [e for e in placer.tick(0.05) if isinstance(e, Publish) and e.key == records.NODE_KEY]
    assert len(states) == 1 and records.decode_node_state(states[0].value).free.cpu_milli == 1000
    placer.pod_update(PodUpdate(pod(2, cpu=2000), 1, Phase.PENDING), 0.1)
    assert not [e for e in placer.tick(0.1) if isinstance(e, Publish) and e.key == records.NODE_KEY], \
        "what peers hold is true now: nothing more to say"


def test_a_pod_deferred_to_better_peers_gets_another_look_when_their_state_changes() -> None:
    from edgeagent import records
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Publish
    from fedcore.resources import Resources

    node = Node("n01", 16000, 65536, gpus=0)
    placer = _lone_placer(node)
    placer.settings = PlacementSection(candidates=1)
    cap = Resources(16000, 65536)
    placer.record("n00", records.NODE_KEY, records.encode_node_state(
        records.NodeState("n00", cap, Resources(3000, 65536), 0.0, "h", "amd64", 0, 0)), 0.0)
    placer.pod_update(PodUpdate(pod(0, cpu=2000), 1, Phase.PENDING), 0.0)
    assert not [e for e in placer.tick(0.0) if isinstance(e, Publish) and e.key == "c/p0000"], "n00 fits it better"
    assert placer.next_deadline() == pytest.approx(PlacementSection().fallback_after), "deferred until fallback"
    placer.record("n00", records.NODE_KEY, records.encode_node_state(
        records.NodeState("n00", cap, Resources(1000, 65536), 0.0, "h", "amd64", 0, 0)), 0.3)
    assert placer.next_deadline() <= 0.3
    assert [e for e in placer.tick(0.3) if isinstance(e, Publish) and e.key == "c/p0000"], "claimed long before fallback"


def test_a_deferred_pod_is_not_ranked_again_when_only_peers_below_us_change() -> None:
    """Each peer publishes its state twice a second: re-ranking every deferred pod at each one is a storm
    in a large fleet. Only a change of a peer that ranked above us can lift us into the candidates."""
    from edgeagent import records
    from edgeagent.clusters import PodUpdate
    from fedcore.resources import Resources

    placer = _lone_placer(Node("n01", 16000, 65536, gpus=0))
    placer.settings = PlacementSection(candidates=1)
    cap = Resources(16000, 65536)

    def state(member: str, free_cpu: int, now: float) -> None:
        placer.record(member, records.NODE_KEY, records.encode_node_state(
            records.NodeState(member, cap, Resources(free_cpu, 65536), 0.0, "h", "amd64", 0, 0)), now)

    state("n00", 3000, 0.0)  # fuller: ranks above us (best fit)
    state("n02", 16000, 0.0)  # as empty as us, and sorts after us: below
    placer.pod_update(PodUpdate(pod(0, cpu=2000), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    fallback = PlacementSection().fallback_after
    assert placer.next_deadline() == pytest.approx(fallback), "deferred to n00"
    state("n02", 16000, 0.3)
    state("n02", 15500, 0.6)  # still emptier than us after the pod: still below
    assert placer.next_deadline() == pytest.approx(fallback), "n02 never ranked above us: no re-rank"
    state("n00", 1000, 0.9)  # n00 can no longer take it
    assert placer.next_deadline() <= 0.9, "the one peer above us changed: ranked again at once"


def test_agents_whose_pods_just_left_do_not_defer_to_each_other() -> None:
    """Each agent ranks itself by the state it published, as its peers do: ranked by its live state, a node
    whose pods had just finished (emptier than it told anyone) thought itself below a peer that, for the same
    reason, thought itself below it, and neither claimed until the next state publication."""
    from edgeagent import records
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind

    placers = {n.name: _lone_placer(n) for n in nodes(2, gpus=0)}
    for i, (name, placer) in enumerate(placers.items()):
        placer.settings = PlacementSection(candidates=1)
        big = pod(10 + i, cpu=12000 - 1000 * i)  # n00 ends fuller than n01
        placer.pod_update(PodUpdate(big, 1, Phase.PENDING), 0.0)
        placer.tick(0.0)
        assert [e for e in placer.tick(0.2) if isinstance(e, Bind)]
        placer.bind_done(big.uid, BindResult(BindOutcome.BOUND, name, 1), 0.21)
        placer.announce(1.0)  # peers hear it full
        placer.pod_update(PodUpdate(big, 1, Phase.SUCCEEDED, name), 1.1)  # empty again, not yet republished
    for name, placer in placers.items():
        peer = placers[next(n for n in placers if n != name)]
        placer.record(peer.node.name, records.NODE_KEY, records.encode_node_state(peer.publication.last), 1.1)
    claimed = []
    for name, placer in placers.items():
        placer.pod_update(PodUpdate(pod(0, cpu=2000), 1, Phase.PENDING), 1.2)
        if [e for e in placer.tick(1.2) if isinstance(e, Publish) and e.key == "c/p0000"]:
            claimed.append(name)
    assert claimed == ["n00"], "the node that both agents' gossip shows fuller claims at once, the other defers"


def test_a_stale_epoch_answer_rebinds_at_the_named_epoch_without_waiting_for_the_watch() -> None:
    from edgeagent.effects import Bind

    _, placer = _asked_to_bind_once()
    placer.bind_done("p0001", BindResult(BindOutcome.STALE_EPOCH, "", 2, "epoch 1 < current 2"), 0.25)
    t = placer.next_deadline()
    assert t <= 0.25 + PlacementSection().claim_window
    effects = placer.tick(t)
    effects += placer.tick(placer.next_deadline())
    assert [e.epoch for e in effects if isinstance(e, Bind)] == [2]


def test_once_the_race_is_over_a_late_node_does_not_claim_what_the_winner_is_binding() -> None:
    """A claim after the first claim's window would only be refused at the fence (the bench saw ~200 such binds)."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Publish

    node = nodes(1)[0]
    placer = _lone_placer(node)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.PENDING), 0.0)
    placer.record("n09", "c/p0001", _rival_claim("p0001", score=-50.0), 0.0)
    window = PlacementSection().claim_window
    late = [e for e in placer.tick(window + 0.01) if isinstance(e, Publish) and e.key == "c/p0001"]
    assert not late and "p0001" not in placer.holdings.placements
    fallback = PlacementSection().fallback_after
    assert [e for e in placer.tick(fallback) if isinstance(e, Publish) and e.key == "c/p0001"], \
        "after fallback_after the winner may be stuck: claim anyway"


def test_when_the_winner_gives_the_pod_up_the_race_reopens_at_once() -> None:
    from crdt import wire
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Publish
    from edgeagent.ledger import Ledger
    from fedcore.resources import Resources

    node = nodes(1)[0]
    placer = _lone_placer(node)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.PENDING), 0.0)
    rival = Ledger("n09", "n09", Resources(16000, 65536, 0, 2000))
    rival.claim("p0001", 1, -50.0, Resources(1000, 1024))
    delta = rival.own_delta("p0001")
    assert delta is not None
    placer.record("n09", "c/p0001", wire.encode_delta(delta), 0.0)
    placer.tick(0.5)  # the race closed at 0.1: we wait
    assert "p0001" not in placer.holdings.placements
    rival.bump_epoch("p0001")  # what a winner refused for lack of room does
    released = rival.own_delta("p0001")
    assert released is not None
    placer.record("n09", "c/p0001", wire.encode_delta(released), 0.6)
    assert placer.next_deadline() <= 0.6
    assert [e for e in placer.tick(0.6) if isinstance(e, Publish) and e.key == "c/p0001"]


def test_an_unchanged_load_sample_is_not_news() -> None:
    """Peers hear of a node's load when its published value moves, not at every sample (idle CPU)."""
    sim = PlacementSim(nodes(2), seed=7)
    sim.run(3.0)
    placer = sim.agents["n00"]
    now = sim.now
    assert placer.set_load(placer.load + 1e-5, now) == []
    assert not [e for e in placer.tick(now + 2 * STATE_EVERY) if isinstance(e, Publish)]
    placer.set_load(0.25, now + 2 * STATE_EVERY)
    published = [e for e in placer.tick(now + 4 * STATE_EVERY) if isinstance(e, Publish)]
    assert len(published) == 1 and published[0].value["load"] == 0.25


def test_a_pod_that_ran_elsewhere_and_finished_keeps_its_epoch_so_the_runner_can_complete_it() -> None:
    """We claimed, another node won and ran the pod, and it finished before that node's bind reached us: we must
    not raise the epoch (that would displace the runner's bound claim, refuse its completion, and leave the pod's
    records uncompacted for ever); our reservation goes once the runner's completion arrives."""
    from crdt import wire
    from edgeagent.clusters import PodUpdate
    from edgeagent.ledger import Ledger
    from fedcore.resources import Resources

    node = nodes(1)[0]
    placer = _lone_placer(node)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    assert placer.ledger.reservations_of("p0001")
    placer.pod_update(PodUpdate(pod(1), 1, Phase.RUNNING, "n09"), 0.05)
    placer.pod_update(PodUpdate(pod(1), 1, Phase.SUCCEEDED, "n09"), 0.06)
    assert placer.ledger.replica.epoch("p0001") == 1, "no epoch raised over the runner's claim"
    runner = Ledger("n09", "n09", Resources(16000, 65536, 0, 2000))
    runner.claim("p0001", 1, 1e9, Resources(2000, 1024))
    runner.bind("p0001", 1)
    assert not isinstance(runner.complete("p0001"), Status)
    delta = runner.own_delta("p0001")
    assert delta is not None
    placer.record("n09", "c/p0001", wire.encode_delta(delta), 0.1)
    assert not placer.ledger.reservations_of("p0001")
    assert placer.ledger.replica.winner("p0001").completed


@pytest.mark.parametrize("order, first", [("oldest-first", "p0001"), ("smallest-first", "p0002")])
def test_an_agent_claims_pending_pods_in_its_scorer_queue_order(order: str, first: str) -> None:
    """Two pods waiting for room, then room for one: the queue order (the model artifact's, as on the twin) decides which is claimed."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer
    from fedcore.scheduling import queues

    class Ordered(HeuristicScorer):
        queue = queues.named(order)

    node = nodes(1)[0]  # 16 cores
    placer = Placer(node, Ledger(node.name, node.name, node.capacity), Ordered(), PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    assert [e.pod for e in placer.tick(0.2) if isinstance(e, Bind)] == ["p0009"]
    placer.bind_done("p0009", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.RUNNING, node.name), 0.22)
    placer.pod_update(PodUpdate(pod(1, cpu=14000), 1, Phase.PENDING), 0.3)  # no room for either: both wait for it
    placer.pod_update(PodUpdate(pod(2, cpu=4000), 1, Phase.PENDING), 0.3)
    placer.tick(0.3)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.SUCCEEDED, node.name), 0.4)  # room for one of them
    placer.tick(0.5)
    binds = [e.pod for e in placer.tick(1.0) if isinstance(e, Bind)]
    assert binds == [first]


@pytest.mark.parametrize("room_after, first", [(0.1, "p0001"), (1.0 + LEARNED_AFTER_S, "p0002")])
def test_a_learned_queue_order_ranks_only_pods_that_waited_long_for_room(room_after: float, first: str) -> None:
    """Young waiting pods are served in arrival order (they wait on the claim protocol); old ones in the learned order."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer
    from fedcore.scheduling import queues

    class Learned(HeuristicScorer):
        queue = queues.LinearQueue.learned({"cpu_fill": -1.0})  # smallest first among the pods it ranks

    node = nodes(1)[0]  # 16 cores
    placer = Placer(node, Ledger(node.name, node.name, node.capacity), Learned(), PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    placer.tick(0.2)
    placer.bind_done("p0009", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.RUNNING, node.name), 0.22)
    placer.pod_update(PodUpdate(pod(1, cpu=14000), 1, Phase.PENDING), 0.3)  # no room for either
    placer.pod_update(PodUpdate(pod(2, cpu=4000), 1, Phase.PENDING), 0.3)
    now = 0.3
    while now < 0.3 + room_after:  # both keep waiting, retried as the agent retries them
        placer.tick(now)
        now = min(placer.next_deadline(), 0.3 + room_after)
    placer.pod_update(PodUpdate(pod(9, cpu=13000), 1, Phase.SUCCEEDED, node.name), now)  # room for one of them
    placer.tick(now + 0.1)
    binds = [e.pod for e in placer.tick(now + 1.0) if isinstance(e, Bind)]
    assert binds == [first]


def test_with_room_for_every_due_pod_an_agent_claims_in_arrival_order_whatever_its_queue_order() -> None:
    """The order decides no placement then, only who waits: arrival order waits least (bench agent's p99)."""
    from edgeagent.clusters import PodUpdate
    from edgeagent.effects import Bind, Publish
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer
    from fedcore.scheduling import queues

    class Ordered(HeuristicScorer):
        queue = queues.named("smallest-first")

    node = nodes(1)[0]  # 16 cores
    placer = Placer(node, Ledger(node.name, node.name, node.capacity), Ordered(), PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(pod(1, cpu=6000), 1, Phase.PENDING), 0.0)
    placer.pod_update(PodUpdate(pod(2, cpu=4000), 1, Phase.PENDING), 0.0)
    claims = [e.key for e in placer.tick(0.0) if isinstance(e, Publish) and e.key.startswith("c/")]
    assert claims == ["c/p0001", "c/p0002"]
    assert [e.pod for e in placer.tick(0.2) if isinstance(e, Bind)] == ["p0001", "p0002"]


def test_the_report_counts_as_allocated_only_pods_bound_here_not_claims_still_racing() -> None:
    from edgeagent import reporting

    node, placer = _asked_to_bind_once()
    assert placer.ledger.replica.free() != node.capacity, "the claim holds escrow while the bind is out"
    summary = reporting.report(placer, "c0", "a1", 1, {}, {}, {}, None)["summary"]
    assert summary["allocated"]["cpu_milli"] == 0 and summary["allocated"]["memory_mib"] == 0
    placer.bind_done("p0001", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)
    summary = reporting.report(placer, "c0", "a1", 2, {}, {}, {}, None)["summary"]
    assert (summary["allocated"]["cpu_milli"], summary["allocated"]["memory_mib"]) == (2000, 4096)
