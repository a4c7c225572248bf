"""When each member was last heard from (``GossipConfig.hearing``): evidence a crashed member cannot produce, where its
ALIVE row stays until some probe of it fails (the control plane's verdicts read it through the agents' reports)."""

from __future__ import annotations

from fedplane.lab.doubles.memnet import InMemoryNetwork
from gossip.config import GossipConfig
from gossip.members import MemberState

NAMES = [f"n{i}" for i in range(8)]


def network(seed: int, config: GossipConfig) -> InMemoryNetwork:
    net = InMemoryNetwork(seed)
    for name in NAMES:
        net.add(name, config=config, seeds=NAMES[:2])
    net.run_until(10.0)
    return net


def test_a_crashed_member_is_heard_no_more_while_its_row_still_reads_alive() -> None:
    sticky = 0
    for seed in range(5):
        net = network(seed, GossipConfig(hearing=True))
        net.crash("n7")
        crashed = net.now
        net.run_for(0.3)  # within one probe interval: most survivors have not probed it yet
        survivors = NAMES[:7]
        sticky += sum(1 for n in survivors if net.nodes[n].members()["n7"].state is MemberState.ALIVE)
        net.run_for(1.7)  # two probe intervals: each survivor probed a live peer and was probed (an idle pool is quiet)
        for n in survivors:
            heard = net.nodes[n].heard()
            assert heard.get("n7", float("-inf")) <= crashed, f"seed {seed}: {n} heard a crashed member"
            assert set(heard) <= set(NAMES) - {n}
            assert max(when for peer, when in heard.items() if peer != "n7") > crashed, f"seed {seed}: {n} heard no live peer"
    assert sticky, "no survivor still held the crashed member ALIVE: the test shows nothing"


def test_hearing_is_off_by_default_and_a_reaped_member_is_forgotten() -> None:
    assert network(0, GossipConfig()).nodes["n0"].heard() == {}
    net = network(0, GossipConfig(hearing=True, reap_after=5.0))
    assert "n7" in net.nodes["n0"].heard()
    net.crash("n7")
    net.run_for(20.0)  # suspected, declared dead, reaped
    assert "n7" not in net.nodes["n0"].members() and "n7" not in net.nodes["n0"].heard()


def test_a_member_reached_only_through_helpers_is_heard_through_their_relayed_acks() -> None:
    net = network(0, GossipConfig(hearing=True))
    net.cut_link("n0", "n7")
    cut = net.now
    net.run_for(30.0)  # n0 probes n7 a few times; only helpers' indirect probes reach it
    assert net.nodes["n0"].members()["n7"].state is MemberState.ALIVE
    assert net.nodes["n0"].heard()["n7"] > cut + 5.0, "n7's relayed acks are heard from n7"
