"""Record tombstones: kept while a withdrawal spreads, then forgotten; a zombie version is withdrawn by its owner."""

from __future__ import annotations

from gossip.config import GossipConfig
from gossip.effects import RecordEvent
from gossip.keyring import Keyring
from fedplane.lab.doubles.memnet import InMemoryNetwork
from gossip.records import RecordStore

FAST = GossipConfig(probe_interval=0.2, probe_timeout=0.1, gossip_interval=0.2, pushpull_interval=2.0,
                    reap_after=30.0, tombstone_ttl=3.0)


def test_store_keeps_tombstones_until_reaped_and_never_for_keys_it_lacks() -> None:
    store = RecordStore()
    assert not store.apply("a", "gone", 5, None, now=0.0)  # nothing to withdraw: not stored
    assert store.apply("a", "k", 1, "v", now=0.0) and store.apply("a", "j", 2, "w", now=0.0)
    assert store.apply("a", "k", 3, None, now=1.0)
    assert not store.apply("a", "k", 1, "v", now=1.5)  # the tombstone outbids the old version
    assert store.apply("b", "k", 1, "x", now=2.0) and store.apply("b", "k", 2, None, now=2.0)
    assert store.reap(before=1.0) == 0 and len(store) == 3
    assert store.reap(before=1.5) == 1 and store.get("a", "k") is None and len(store) == 2
    assert store.get("a", "j") == (2, "w")  # live records are never reaped
    assert store.apply("b", "k", 3, "back", now=2.5)  # the owner published the key again
    assert store.reap(before=10.0) == 0 and store.get("b", "k") == (3, "back")
    assert store.apply("b", "k", 4, None, now=3.0) and store.drop_owner("b") == {"k": (4, None)}
    assert store.reap(before=10.0) == 0 and len(store) == 1


def cluster(n: int) -> InMemoryNetwork:
    net = InMemoryNetwork(seed=3)
    for i in range(n):
        net.add(f"n{i}", config=FAST, keyring=Keyring([bytes(range(32))]), seeds=["n0"] if i else [])
    return net


def test_withdrawn_records_are_forgotten_everywhere_after_the_ttl() -> None:
    net = cluster(6)
    net.run_until(3.0)
    for i in range(20):
        net.publish("n1", f"claim/{i}", i)
    net.run_for(2.0)
    assert all(len(net.nodes[o].records().get("n1", {})) == 20 for o in net.nodes)
    for i in range(20):
        net.publish("n1", f"claim/{i}", None)
    net.run_for(1.0)
    assert all(all(v is None for _, v in net.nodes[o].records()["n1"].values()) for o in net.nodes)
    net.run_for(FAST.tombstone_ttl + 2 * FAST.pushpull_interval)
    assert all(net.nodes[o].records().get("n1", {}) == {} for o in net.nodes)


def test_a_version_that_outlives_its_tombstone_is_withdrawn_again_by_its_owner() -> None:
    """A member cut off through the whole withdrawal comes back holding the old version and spreads it; the
    owner, which knows it holds no such record, withdraws it again at a newer version."""
    net = cluster(4)
    net.run_until(3.0)
    net.publish("n1", "claim/p", "mine")
    net.run_for(1.0)
    version = net.nodes["n1"].records()["n1"]["claim/p"][0]
    events: list[tuple[str, RecordEvent]] = []
    net.listeners.append(lambda node, e, t: events.append((node, e)) if isinstance(e, RecordEvent) else None)
    net.partition(["n0", "n1", "n2"], ["n3"])
    net.publish("n1", "claim/p", None)
    net.run_for(FAST.tombstone_ttl + 2 * FAST.pushpull_interval)
    assert [net.nodes[o].records().get("n1", {}).get("claim/p") for o in net.nodes] == [None, None, None, (version, "mine")]
    net.heal()
    net.run_for(6 * FAST.pushpull_interval)
    zombies = [node for node, e in events if e.value == "mine"]
    rewithdrawn = [e.version for node, e in events if node == "n1" and e.value is None and e.version > version + 1]
    assert zombies and rewithdrawn, "the old version came back and its owner withdrew it again"
    assert all(net.nodes[o].records().get("n1", {}).get("claim/p") in (None, (max(rewithdrawn), None)) for o in net.nodes)
