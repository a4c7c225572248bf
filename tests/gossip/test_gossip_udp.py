"""The asyncio driver under hostile input on real sockets: it counts, logs and carries on."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from gossip.config import GossipConfig, split_addr
from gossip.keyring import Keyring
from gossip.members import MemberState
from gossip.udp import UdpGossip
from gossip.wire import DropReason

pytestmark = pytest.mark.asyncio
FAST = GossipConfig(probe_interval=0.1, probe_timeout=0.05, gossip_interval=0.05, pushpull_interval=1.0)


async def test_garbage_datagrams_and_streams_are_dropped_and_the_member_lives_on() -> None:
    key = Keyring.generate()
    target = UdpGossip("127.0.0.1:0", keyring=Keyring([key]), config=FAST)
    await target.start()
    host, port = split_addr(target.name)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for size in (0, 3, 40, 600, 1400, 9000):
            sock.sendto(os.urandom(size), (host, port))
    _, writer = await asyncio.open_connection(host, port)
    writer.write((1 << 30).to_bytes(4, "big"))  # announces a frame far above the limit
    await writer.drain()
    writer.close()
    _, writer = await asyncio.open_connection(host, port)
    writer.write((100).to_bytes(4, "big") + b"short")  # and one cut short
    writer.close()
    await asyncio.sleep(0.3)
    dropped = target.metrics.dropped
    assert dropped[DropReason.OVERSIZED] >= 1 and dropped[DropReason.TRUNCATED] >= 2
    assert sum(dropped.values()) >= 7 and target.internal_errors == 0

    joiner = UdpGossip("127.0.0.1:0", [target.name], keyring=Keyring([key]), config=FAST)
    await joiner.start()
    try:
        for _ in range(100):
            if target.members().get(joiner.name) is not None:
                break
            await asyncio.sleep(0.02)
        assert target.members()[joiner.name].state == MemberState.ALIVE, "still serving after the garbage"
    finally:
        await joiner.close()
        await target.close()


async def test_api_before_start_says_what_to_do() -> None:
    member = UdpGossip("127.0.0.1:0")
    with pytest.raises(RuntimeError, match="start"):
        member.publish("k", 1)
    with pytest.raises(ValueError):
        UdpGossip("no-port-here")


async def test_a_member_whose_port_refuses_is_declared_dead_without_the_lifeguard_timeout() -> None:
    """Real sockets: a member closed without leaving (its process gone, the host up) refuses the fallback stream, so
    it is dead about refused_suspicion after a failed round; the minimum Lifeguard timeout here is 3 s."""
    config = GossipConfig(probe_interval=0.2, probe_timeout=0.1, gossip_interval=0.05, pushpull_interval=5.0,
                          suspicion_mult=15.0, refused_suspicion=0.2)
    key = Keyring.generate()
    first = UdpGossip("127.0.0.1:0", keyring=Keyring([key]), config=config)
    await first.start()
    others = [UdpGossip("127.0.0.1:0", [first.name], keyring=Keyring([key]), config=config) for _ in range(2)]
    for member in others:
        await member.start()
    try:
        for _ in range(200):
            if all(len(m.members()) == 3 for m in (first, *others)):
                break
            await asyncio.sleep(0.02)
        victim = others[1]
        await victim.close()
        closed = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - closed < 2.5:
            if first.members()[victim.name].state == MemberState.DEAD:
                break
            await asyncio.sleep(0.02)
        assert first.members()[victim.name].state == MemberState.DEAD
        assert first.internal_errors == 0
    finally:
        await others[0].close()
        await first.close()
