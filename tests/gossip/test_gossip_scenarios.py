"""Cluster stories in the deterministic network: loss, partitions, pauses, restarts, key rotation.

Every test names its seed; Hypothesis-driven ones print the seed of a failing run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from gossip import digests
from gossip.config import GossipConfig
from gossip.effects import Effect, MemberEvent, RecordEvent
from gossip.keyring import Keyring
from gossip.members import MemberState
from fedplane.lab.doubles.memnet import InMemoryNetwork, LinkModel
from gossip.wire import DropReason

FAST = GossipConfig(probe_interval=0.2, probe_timeout=0.1, gossip_interval=0.2, pushpull_interval=2.0, reap_after=30.0)
KEY = bytes(range(32))


def cluster(n: int, seed: int, link: LinkModel | None = None, config: GossipConfig = FAST) -> InMemoryNetwork:
    net = InMemoryNetwork(seed, link)
    for i in range(n):
        net.add(f"n{i}", config=config, keyring=Keyring([KEY]), seeds=["n0"] if i else [])
    return net


def converged(net: InMemoryNetwork, names: list[str] | None = None) -> bool:
    names = names or net.live()
    return all(
        all(net.nodes[o].members().get(n) is not None and net.nodes[o].members()[n].state == MemberState.ALIVE for n in names)
        for o in names
    )


def deaths(net: InMemoryNetwork) -> list[tuple[str, str, float]]:
    seen: list[tuple[str, str, float]] = []
    net.listeners.append(lambda node, e, t: seen.append((node, e.name, t)) if isinstance(e, MemberEvent) and e.state == MemberState.DEAD else None)
    return seen


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_members_that_keep_answering_are_never_declared_dead_at_10pct_loss(seed: int) -> None:
    """SWIM gives this with high probability, not always: a false death needs one member's refutation never
    to reach one peer while their stream exchanges are lost too. Before suspects were probed by those told
    of them (``Membership.to_vouch``) 2 runs in 400 random seeds (24 members, 20 s) had one; since, 0 in
    1,600 (at 20% loss 9 in 100 against 26; ``test_a_false_death_heals`` shows one healing). CI runs
    derandomized examples (tests/conftest.py)."""
    note(f"seed={seed}")
    net = cluster(24, seed)
    net.run_until(5.0)
    assert converged(net), f"seed={seed}: cluster did not form"
    net.link = LinkModel(loss=0.10, duplicate=0.05)
    dead = deaths(net)
    net.run_for(20.0)
    assert dead == [], f"seed={seed}: live members declared dead: {dead[:5]}"
    assert all(len(net.nodes[o].members()) == 24 for o in net.nodes), f"seed={seed}: someone was forgotten"


def test_partition_heals_and_both_sides_become_alive_again() -> None:
    net = cluster(12, seed=3)
    net.run_until(5.0)
    assert converged(net)
    left, right = [f"n{i}" for i in range(6)], [f"n{i}" for i in range(6, 12)]
    net.partition(left, right)
    net.run_for(15.0)
    assert all(net.nodes["n0"].members()[r].state == MemberState.DEAD for r in right), "the far side is declared dead"
    net.publish("n8", "load", 0.9)
    net.heal()
    assert net.run_for(30.0, stop=lambda: converged(net)), "partition did not heal"
    net.run_for(FAST.pushpull_interval * 3)
    assert all(net.nodes[o].records().get("n8", {}).get("load", (0, None))[1] == 0.9 for o in left), "anti-entropy repairs records"


def test_paused_member_is_suspected_then_refutes_and_stays_alive() -> None:
    net = cluster(10, seed=4, config=FAST.replace(suspicion_mult=6.0))
    net.run_until(5.0)
    suspected: list[str] = []
    net.listeners.append(lambda node, e, t: suspected.append(node) if isinstance(e, MemberEvent) and e.name == "n5" and e.state == MemberState.SUSPECT else None)
    dead = deaths(net)
    net.pause("n5")
    assert net.run_for(3.0, stop=lambda: bool(suspected))
    net.run_for(0.3)  # still silent a while after the first suspicion
    net.resume("n5")
    net.run_for(5.0)
    assert suspected, "a silent member is suspected"
    assert dead == [], "it refuted before the suspicion expired"
    assert net.nodes["n5"].incarnation >= 1
    assert all(net.nodes[o].members()["n5"].state == MemberState.ALIVE for o in net.live())


def test_crashed_member_is_declared_dead_and_restart_under_same_name_rejoins() -> None:
    net = cluster(8, seed=5, config=FAST.replace(reap_after=300.0))
    net.run_until(4.0)
    net.publish("n3", "model", "v1")
    net.run_for(2.0)
    net.crash("n3")
    net.run_for(6.0)
    assert all(net.nodes[o].members()["n3"].state == MemberState.DEAD for o in net.live())
    reborn = net.add("n3", config=FAST, keyring=Keyring([KEY]), seeds=["n0"])
    assert net.run_for(10.0, stop=lambda: converged(net))
    assert reborn.incarnation >= 1, "it outbid the incarnation it was declared dead with"
    net.publish("n3", "model", "v2")
    net.run_for(3.0)
    assert all(net.nodes[o].records()["n3"]["model"][1] == "v2" for o in net.live()), "new life's records win"


def test_unhealthy_node_backs_off_instead_of_accusing_others() -> None:
    net = cluster(10, seed=6)
    net.run_until(4.0)
    net.degrade("n7", 0.7)
    before = {n: net.nodes[n].metrics.probes for n in net.nodes}
    net.run_for(10.0)
    probes = {n: net.nodes[n].metrics.probes - before[n] for n in net.nodes}
    assert net.nodes["n7"].awareness >= 3, "Lifeguard: its own failures raise its awareness score"
    assert probes["n7"] < 0.6 * min(p for n, p in probes.items() if n != "n7"), probes


def test_key_rotation_without_downtime() -> None:
    old, new = bytes(range(32)), bytes(range(1, 33))
    net = cluster(6, seed=8)
    net.run_until(4.0)
    suspected = []
    net.listeners.append(lambda node, e, t: suspected.append(e) if isinstance(e, MemberEvent) and e.state != MemberState.ALIVE else None)
    for step in ("install", "use", "remove"):
        for name, node in net.nodes.items():
            ring = node.keyring
            assert ring is not None
            getattr(ring, step)(old if step == "remove" else new)
            net.publish(name, "step", step)
            net.run_for(0.5)
    net.run_for(3.0)
    assert suspected == [], "nobody lost contact while keys rotated"
    assert all(n.keyring is not None and n.keyring.keys == (new,) for n in net.nodes.values())
    assert sum(n.metrics.dropped[DropReason.FORGED] for n in net.nodes.values()) == 0
    assert all(net.nodes[o].records()[n]["step"][1] == "remove" for o in net.nodes for n in net.nodes if n != o)
    straggler = net.add("late", config=FAST, keyring=Keyring([old]), seeds=["n0"])
    net.run_for(3.0)
    assert "late" not in net.nodes["n0"].members() and net.nodes["n0"].metrics.dropped[DropReason.FORGED] > 0
    assert straggler.members().keys() == {"late"}


@pytest.mark.parametrize("full_state", [False, True])
def test_anti_entropy_repairs_what_gossip_missed(full_state: bool) -> None:
    config = FAST.replace(full_state_pushpull=full_state, retransmit_mult=1)
    net = cluster(10, seed=9, config=config)
    net.run_until(4.0)
    net.partition([f"n{i}" for i in range(5)], [f"n{i}" for i in range(5, 10)])
    net.run_for(0.5)  # shorter than any suspicion: nobody dies, but broadcasts are lost
    for i in range(5):
        net.publish(f"n{i}", "res", i)
    net.run_for(1.5)  # the retransmit budget runs out inside the partition
    net.heal()
    got: list[RecordEvent] = []
    net.listeners.append(lambda node, e, t: got.append(e) if isinstance(e, RecordEvent) else None)
    net.run_for(config.pushpull_interval * 4)
    assert all(net.nodes[o].records()[f"n{i}"]["res"][1] == i for o in net.nodes for i in range(5) if o != f"n{i}")


def test_rotating_salt_redraws_false_positives() -> None:
    """A Bloom false positive hides an entry under one salt only; a later salt reveals it."""
    held = [f"n{i}|k|1" for i in range(400)]
    missing = [f"n{i}|k|2" for i in range(400)]
    hidden_under: list[set[int]] = []
    for salt in range(6):
        bloom = digests.parse(digests.build([f"{salt}|{k}" for k in held], len(held), 0.2), 1 << 16)
        shown = set(digests.missing(bloom, [(f"{salt}|{k}", i) for i, k in enumerate(missing)]))
        hidden_under.append(set(range(len(missing))) - shown)
    assert all(hidden_under), "a 20% error rate hides some entries under every salt"
    assert set.intersection(*hidden_under) == set(), "no entry stays hidden across salts"


def test_gossip_rounds_run_only_while_there_is_news() -> None:
    """An idle member wakes for probes and push-pull only; news gets a round at once and still spreads."""
    config = GossipConfig(probe_interval=0.5, probe_timeout=0.25, gossip_interval=0.02, pushpull_interval=5.0)
    net = cluster(5, seed=11, config=config)
    net.run_until(8.0)
    assert converged(net)
    node = net.nodes["n1"]
    ticks: list[float] = []
    tick = node.tick
    node.tick = lambda now: (ticks.append(now), tick(now))[1]  # type: ignore[method-assign]
    net.run_for(10.0)
    assert len(ticks) < 10.0 / 0.5 * 3, f"{len(ticks)} wake-ups in 10 idle seconds (a round every 20 ms would be 500)"
    net.publish("n1", "k", "v")
    assert node.next_deadline() == net.now, "the first round after a quiet spell is not delayed by an interval"
    net.run_for(0.2)
    assert all(net.nodes[o].records().get("n1", {}).get("k", (0, None))[1] == "v" for o in net.nodes)



def test_an_idle_member_wakes_only_for_its_probe_rounds() -> None:
    """Answered probes leave no timeout to wake for: an idle daemon's wake-ups are its CPU on a small board."""
    config = GossipConfig(probe_interval=0.5, probe_timeout=0.25, gossip_interval=0.04, pushpull_interval=60.0, reap_after=30.0)
    net = cluster(4, seed=3, config=config)
    net.run_until(20.0)
    assert converged(net)
    ticks = {name: 0 for name in net.nodes}
    for name, node in net.nodes.items():
        def counted(now: float, name: str = name, tick: Callable[[float], list[Effect]] = node.tick) -> list[Effect]:
            ticks[name] += 1
            return tick(now)
        node.tick = counted  # type: ignore[method-assign]
    net.run_until(40.0)
    assert converged(net)
    rounds = 20.0 / config.probe_interval
    assert all(rounds - 2 <= n <= rounds + 2 for n in ticks.values()), ticks  # one wake-up per probe round, none per timeout


def test_a_false_death_heals() -> None:
    """A live member declared dead by one peer (a lost refutation, see above) is alive everywhere again
    once anti-entropy carries its newer incarnation, with the loss still on (20%: at 10% no seed of 1,600 loses one)."""
    net = cluster(24, 1065)
    net.run_until(5.0)
    net.link = LinkModel(loss=0.20, duplicate=0.05)
    dead = deaths(net)
    net.run_for(20.0)
    assert dead and dead[0][:2] == ("n8", "n9"), f"seed 1065 no longer loses a refutation ({dead}); pin another"
    net.run_for(10.0)
    assert all(n.members()["n9"].state == MemberState.ALIVE for n in net.nodes.values())
    assert net.nodes["n8"].members()["n9"].incarnation >= 1


def test_relayed_news_moves_one_hop_per_gossip_round() -> None:
    """The publisher sends at once; every relay waits for its next round, as in the synchronous
    rounds of the epidemic model, so an update is never more hops from its publisher than rounds
    have passed (probes and acks piggyback it too, but only once it is ready)."""
    from fedplane.lab.benches.gossipbench import serf_model_rounds, warm_cluster

    config = GossipConfig(probe_interval=0.2, probe_timeout=0.1)
    net = warm_cluster(60, config, seed=5)
    net.run_until(2.0)
    heard: dict[str, tuple[int, float]] = {"n00000": (0, net.now)}

    def listen(node: str, event: MemberEvent | RecordEvent, now: float) -> None:
        if isinstance(event, RecordEvent) and event.key == "news" and node not in heard:
            heard[node] = (heard[net.source][0] + 1 if net.source in heard else 99, now)

    net.listeners.append(listen)
    t0 = net.now
    net.publish("n00000", "news", 1)
    net.run_for(1.0)
    assert len(heard) == 60
    for node, (hops, at) in heard.items():
        assert hops <= 1 + math.ceil((at - t0) / config.gossip_interval), (node, hops, at - t0)
    assert max(h for h, _ in heard.values()) <= serf_model_rounds(60, config.fanout)


def crash_detection(seed: int, host_up: bool) -> tuple[float, float]:
    """Five members at the shipped timings (an edge cluster's pool); one crashes at a random point. Returns when the
    first live member suspected it and when the first declared it dead (seconds after the crash)."""
    net = cluster(5, seed, config=GossipConfig())
    net.run_until(20.0 + (seed % 10) / 10)
    victim = f"n{1 + seed % 4}"
    live = [n for n in net.nodes if n != victim]
    net.crash(victim, host_up=host_up)
    t0, suspected = net.now, None
    while net.now < t0 + 30.0:
        net.run_for(0.05)
        states = [net.nodes[n].members()[victim].state for n in live]
        if suspected is None and MemberState.SUSPECT in states:
            suspected = net.now - t0
        if MemberState.DEAD in states:
            assert suspected is not None
            return suspected, net.now - t0
    raise AssertionError(f"seed {seed}: {victim} never declared dead")


def test_a_crashed_member_is_confirmed_by_every_other_member_and_dies_at_the_minimum_timeout() -> None:
    """Told of a suspicion, the others probe the suspect next: its three confirmations arrive within the minimum
    timeout (2.5 s here), so no run waits for the round-robin order (up to 8.75 s with one confirmation)."""
    runs = [crash_detection(seed, host_up=False) for seed in range(30)]
    durations = [dead - suspected for suspected, dead in runs]
    assert all(2.4 <= d <= 2.75 for d in durations), durations


def test_a_crashed_process_on_a_live_host_dies_refused_suspicion_after_it_is_suspected() -> None:
    """kill -9 with the host up: the fallback stream is refused, so the suspect is dead 0.5 s after it is suspected
    rather than after the 2.5 s minimum (a host that is down, above, refuses nothing)."""
    runs = [crash_detection(seed, host_up=True) for seed in range(30)]
    durations = [dead - suspected for suspected, dead in runs]
    assert all(0.45 <= d <= 0.7 for d in durations), durations
    assert max(dead for _, dead in runs) < 5.0
