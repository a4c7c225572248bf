"""An agent's Evict stops the pod at the back end: after the journal commit, retried while the
cluster is unreachable, fenced by epoch and harmless when repeated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgeagent import config
from edgeagent.clusters import Phase
from edgeagent.daemon import Agent
from edgeagent.effects import Evict
from fedplane.lab.doubles.memcluster import InMemoryCluster
from fedcore.loopback import free_ports
from fedcore.nodes import Node
from fedcore.pods import Pod

pytestmark = pytest.mark.integration


async def until(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_evict_stops_the_pod_at_the_back_end_after_retries(tmp_path: Path) -> None:
    cluster = InMemoryCluster([Node("a0", 8000, 16384)])
    (port,) = free_ports(1)
    settings = config.parse({"node": "a0", "data_dir": str(tmp_path / "a0"), "log_level": "warning",
                             "gossip": {"bind": f"127.0.0.1:{port}"}, "probe": {"kind": "twin"}, "http": {"bind": ""}})

    async def scenario() -> Agent:
        agent = Agent(settings, cluster=cluster, handle_signals=False)
        task = asyncio.create_task(agent.run())
        await until(lambda: agent.placer is not None, 10, "the agent to start")
        cluster.submit(Pod("p0", 1000, 1024))
        cluster.submit(Pod("p1", 1000, 1024))
        await until(lambda: all(p.phase is Phase.RUNNING for p in cluster.pods.values()), 10, "both pods bound")
        cluster.reachable = False  # the first attempts fail: the agent must keep trying
        agent._apply([Evict("p0", 1), Evict("p1", 7)])
        await asyncio.sleep(0.5)
        assert "p0" in cluster.pods and agent.placer_.counters.evictions_done == 0
        cluster.reachable = True
        await until(lambda: agent.placer_.counters.evictions_done == 2, 15, "both evictions answered")
        agent._apply([Evict("p0", 1)])  # a retry after a crash, say: the pod is gone, nothing else happens
        await until(lambda: agent.placer_.counters.evictions_done == 3, 15, "the repeated eviction answered")
        agent.stop()
        await task
        return agent

    asyncio.run(scenario())
    assert "p0" not in cluster.pods, "evicted at the back end"
    assert cluster.pods["p1"].phase is Phase.RUNNING, "epoch 7 is not p1's: its copy runs on"
    assert cluster.evidence.evictions == 1


def test_an_eviction_lost_to_a_crash_is_asked_again_after_the_restart() -> None:
    """The release was journaled, the agent died before stopping the pod: the replayed ledger and the
    back end's report of the pod still on our node are enough to ask again (once); a standing claim is not."""
    from crdt import wire
    from edgeagent.clusters import PodUpdate
    from edgeagent.config import PlacementSection
    from edgeagent.ledger import Ledger
    from edgeagent.placing import Placer
    from edgeagent.scoring import HeuristicScorer
    from fedcore.resources import Resources

    a, request = Node("a", 8000, 16384), Resources(1000, 1024)
    ours, rival = Ledger("a", "a", a.capacity), Ledger("b", "b", a.capacity)
    ours.claim("p", 1, 50.0, request)
    ours.bind("p", 1)
    before_loss = list(ours.ops)
    delta = ours.own_delta("p")
    assert delta is not None
    rival.merge(wire.encode_delta(delta))
    rival.bump_epoch("p")  # b re-placed a's pods while a was cut off
    rival.claim("p", 2, 50.0, request)
    rival.bind("p", 2)
    delta = rival.own_delta("p")
    assert delta is not None
    ours.merge(wire.encode_delta(delta))
    assert "p" in ours.replica.pending_releases()
    ours.release("p")  # journaled; the Evict it came with never ran

    restarted = Placer(a, Ledger.replay("a", "a", a.capacity, ours.take_ops()), HeuristicScorer(), PlacementSection(), 0.0)
    here = PodUpdate(Pod("p", 1000, 1024), 1, Phase.RUNNING, "a")
    assert [e for e in restarted.pod_update(here, 0.0) if isinstance(e, Evict)] == [Evict("p", 1)]
    assert not [e for e in restarted.pod_update(here, 0.1) if isinstance(e, Evict)], "asked once"

    standing = Placer(a, Ledger.replay("a", "a", a.capacity, before_loss), HeuristicScorer(), PlacementSection(), 0.0)
    assert not [e for e in standing.pod_update(here, 0.0) if isinstance(e, Evict)], "our bound claim stands: it runs on"
