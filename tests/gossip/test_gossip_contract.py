"""One contract, two transports: the in-memory network and real UDP/TCP sockets.

The same cluster stories run against both harnesses; only the clock differs (virtual
time advanced by the simulator, or the event loop's real time).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from gossip.config import GossipConfig
from gossip.keyring import Keyring
from gossip.members import MemberState
from fedplane.lab.doubles.memnet import InMemoryNetwork
from gossip.records import RecordValue
from gossip.udp import UdpGossip

FAST = GossipConfig(
    probe_interval=0.1,
    probe_timeout=0.05,
    gossip_interval=0.05,
    pushpull_interval=1.0,
    suspicion_mult=2.0,
    reap_after=2.0,
)
KEY = bytes(range(32))
pytestmark = pytest.mark.asyncio


class MemnetHarness:
    def __init__(self) -> None:
        self.net = InMemoryNetwork(seed=7)
        self.names: list[str] = []

    async def spawn(self, n: int) -> None:
        for i in range(n):
            name = f"node{i}"
            self.net.add(name, config=FAST, keyring=Keyring([KEY]), seeds=self.names[:1])
            self.names.append(name)

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        end = self.net.now + timeout
        while self.net.now < end:
            if condition():
                return True
            self.net.run_for(0.05)
        return condition()

    def members(self, name: str) -> dict[str, MemberState]:
        return {n: v.state for n, v in self.net.nodes[name].members().items()}

    def records(self, name: str) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        return self.net.nodes[name].records()

    def publish(self, name: str, key: str, value: RecordValue) -> None:
        self.net.publish(name, key, value)

    async def crash(self, name: str) -> None:
        self.net.crash(name)

    async def leave(self, name: str) -> None:
        self.net.leave(name)
        self.net.run_for(0.3)
        self.net.crash(name)

    async def close(self) -> None:
        pass


class UdpHarness:
    def __init__(self) -> None:
        self.by_name: dict[str, UdpGossip] = {}
        self.names: list[str] = []

    async def spawn(self, n: int) -> None:
        for i in range(n):
            member = UdpGossip("127.0.0.1:0", self.names[:1], keyring=Keyring([KEY]), config=FAST, rng=random.Random(i))
            await member.start()
            self.by_name[member.name] = member
            self.names.append(member.name)

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        end = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < end:
            if condition():
                return True
            await asyncio.sleep(0.02)
        return condition()

    def members(self, name: str) -> dict[str, MemberState]:
        return {n: v.state for n, v in self.by_name[name].members().items()}

    def records(self, name: str) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        return self.by_name[name].records()

    def publish(self, name: str, key: str, value: RecordValue) -> None:
        self.by_name[name].publish(key, value)

    async def crash(self, name: str) -> None:
        await self.by_name.pop(name).close()

    async def leave(self, name: str) -> None:
        await self.by_name.pop(name).leave()

    async def close(self) -> None:
        for member in self.by_name.values():
            await member.close()
        assert all(m.internal_errors == 0 for m in self.by_name.values())


Harness = MemnetHarness | UdpHarness


@pytest_asyncio.fixture(params=["memnet", "udp"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    harness: Harness = MemnetHarness() if request.param == "memnet" else UdpHarness()
    await harness.spawn(5)
    yield harness
    await harness.close()


def _all_see(h: Harness, observers: list[str], subject: str, state: MemberState | None) -> Callable[[], bool]:
    return lambda: all(h.members(o).get(subject) == state for o in observers)


async def test_members_join_through_one_seed_and_all_see_each_other(cluster: Harness) -> None:
    everyone = set(cluster.names)
    ok = await cluster.wait_for(
        lambda: all({n for n, s in cluster.members(o).items() if s == MemberState.ALIVE} == everyone for o in cluster.names), 5.0
    )
    assert ok, {o: cluster.members(o) for o in cluster.names}


async def test_published_record_reaches_every_member(cluster: Harness) -> None:
    owner = cluster.names[2]
    await cluster.wait_for(lambda: all(len(cluster.members(o)) == 5 for o in cluster.names), 5.0)
    cluster.publish(owner, "free", {"cpu_m": 1500})
    cluster.publish(owner, "free", {"cpu_m": 1200})
    ok = await cluster.wait_for(lambda: all(cluster.records(o).get(owner, {}).get("free") == (2, {"cpu_m": 1200}) for o in cluster.names), 5.0)
    assert ok, {o: cluster.records(o).get(owner) for o in cluster.names}


async def test_crashed_member_is_declared_dead_then_reaped(cluster: Harness) -> None:
    await cluster.wait_for(lambda: all(len(cluster.members(o)) == 5 for o in cluster.names), 5.0)
    victim, rest = cluster.names[3], [n for n in cluster.names if n != cluster.names[3]]
    cluster.publish(victim, "load", 0.5)
    await cluster.wait_for(lambda: all(victim in cluster.records(o) for o in rest), 5.0)
    await cluster.crash(victim)
    assert await cluster.wait_for(_all_see(cluster, rest, victim, MemberState.DEAD), 5.0)
    assert await cluster.wait_for(_all_see(cluster, rest, victim, None), 5.0), "dead member should be reaped"
    assert all(victim not in cluster.records(o) for o in rest), "records are reaped with their owner"


async def test_member_that_leaves_is_seen_as_left_not_dead(cluster: Harness) -> None:
    await cluster.wait_for(lambda: all(len(cluster.members(o)) == 5 for o in cluster.names), 5.0)
    leaver, rest = cluster.names[4], cluster.names[:4]
    await cluster.leave(leaver)
    assert await cluster.wait_for(_all_see(cluster, rest, leaver, MemberState.LEFT), 3.0)
