"""Agents follow the leader: a standby's link names the leader's link, the agent's channel goes there (calls and
watches), several configured members are tried in turn, and a member without the agent's twin passes it on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from controlplane.leading import Leader
from controlplane.service import TwinClusterService
from edgeagent import config
from fedapi import twincluster_pb2 as pb
from fedapi.agentlink import LinkChannel, LinkError
from fedapi.linkmembers import Members, named_leader
from fedapi.linkserver import Context, LinkServer
from fedcore.loopback import free_ports


@dataclass
class Standby:
    """A member that does not lead; ``leads`` names the leader (or nobody)."""

    leads: Leader | None
    member: str = "standby"
    is_leader: bool = False
    refused: int = 0
    took_over_s: float = 0.0

    def leader(self) -> Leader | None:
        return self.leads

    def refuse(self) -> None:
        self.refused += 1


class Twin:
    """The leader's side: binds and a watch of two pods."""

    async def BindPod(self, request: pb.BindPodRequest, context: Context) -> pb.BindPodResponse:
        if request.cluster != "c0":
            await context.abort("NOT_FOUND", f"cluster {request.cluster}: no embedded twin cluster of this name")
        return pb.BindPodResponse(outcome=pb.BIND_BOUND, node=request.node, epoch=request.epoch)

    async def WatchPods(self, request: pb.WatchPodsRequest, context: Context) -> AsyncIterator[pb.PodEvent]:
        for i in range(2):
            yield pb.PodEvent(type=pb.EVENT_ADDED, pod=pb.Pod(name=f"p{i}"))


def test_a_standby_refusal_names_the_leader() -> None:
    assert named_leader("FAILED_PRECONDITION", "not the leader: 10.0.0.2:7070") == "10.0.0.2:7070"
    assert named_leader("FAILED_PRECONDITION", "not the leader: send writes to 10.0.0.2:50051") == "10.0.0.2:50051"
    assert named_leader("FAILED_PRECONDITION", "not the leader, and no leader is elected now: retry shortly") == ""
    assert named_leader("NOT_FOUND", "not the leader: a:1") is None
    members = Members("a:1,b:2")
    assert members.follow("UNAVAILABLE", "cannot connect") is None and members.current == "a:1"
    assert members.follow("FAILED_PRECONDITION", "not the leader: c:3") == "c:3" and members.current == "c:3"
    assert members.follow("FAILED_PRECONDITION", "not the leader, and no leader is elected now") == "" and members.current == "a:1"
    assert members.follow("NOT_FOUND", "no embedded twin cluster of this name") == "" and members.current == "b:2"
    assert members.follow("DEADLINE_EXCEEDED", "BindPod: no answer in 5s") == "" and members.current == "c:3"
    assert Members("a:1").follow("DEADLINE_EXCEEDED", "no answer") is None  # nowhere else to go
    with pytest.raises(ValueError, match="host:port"):
        Members("a:1,nonsense")
    members.learn(["c:3", "d:4", "nonsense", 7])  # an ack's member list: the new ones join, the malformed are ignored
    assert members.addresses == ["a:1", "b:2", "c:3", "d:4"]
    members.learn(None)
    assert len(members.addresses) == 4


def test_agent_config_takes_every_member() -> None:
    parsed = config.parse({"node": "n0", "cluster": "c0", "backend": {"address": "10.0.0.1:7070, 10.0.0.2:7070"}})
    assert parsed.backend.address == "10.0.0.1:7070, 10.0.0.2:7070"
    with pytest.raises(config.ConfigError, match="backend.address"):
        config.parse({"node": "n0", "cluster": "c0", "backend": {"address": "10.0.0.1:7070,oops"}})


async def _serve(servicer: object) -> tuple[LinkServer, str]:
    server = LinkServer(servicer)
    return server, f"127.0.0.1:{await server.start()}"


def test_the_agents_channel_follows_a_standby_to_the_leader() -> None:
    async def run() -> None:
        leader, at_leader = await _serve(Twin())
        standby, at_standby = await _serve(TwinClusterService(object(), Standby(Leader("m0", "x:1", 7, at_leader))))  # type: ignore[arg-type]
        (dead,) = free_ports(1)
        channel = LinkChannel(f"127.0.0.1:{dead},{at_standby}")  # the first member is down, the second a standby
        try:
            bound = await channel.call("BindPod", {"cluster": "c0", "pod": "p0", "node": "n0", "epoch": 1, "gpus": []}, 2.0)
            assert bound["outcome"] == pb.BIND_BOUND and channel.members.current == at_leader
            channel.members.at = channel.members.addresses.index(at_standby)  # the watch starts at the standby too
            channel.reset()
            names = [e["pod"]["name"] async for e in channel.watch("WatchPods", {"cluster": "c0"})]
            assert names == ["p0", "p1"] and channel.members.current == at_leader
        finally:
            await channel.close()
            await standby.stop()
            await leader.stop()

    asyncio.run(run())


def test_a_standby_that_knows_no_leader_says_so_and_the_channel_moves_on() -> None:
    async def run() -> None:
        standby, at_standby = await _serve(TwinClusterService(object(), Standby(None)))  # type: ignore[arg-type]
        leader, at_leader = await _serve(Twin())
        channel = LinkChannel(f"{at_standby},{at_leader}")
        try:
            with pytest.raises(LinkError) as refused:
                await channel.call("BindPod", {"cluster": "c0", "pod": "p0", "node": "n0", "epoch": 1, "gpus": []}, 2.0)
            assert refused.value.code == "FAILED_PRECONDITION" and "no leader is elected now" in refused.value.details
            assert channel.members.current == at_leader  # the caller's retry goes to the next member
            bound = await channel.call("BindPod", {"cluster": "c0", "pod": "p0", "node": "n0", "epoch": 1, "gpus": []}, 2.0)
            assert bound["outcome"] == pb.BIND_BOUND
        finally:
            await channel.close()
            await standby.stop()
            await leader.stop()

    asyncio.run(run())


def test_a_member_that_stops_answering_passes_the_channel_on() -> None:
    """A cut leader keeps the TCP connection but never answers: after one deadline the channel tries the next member."""
    import socket

    async def run() -> None:
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        leader, at_leader = await _serve(Twin())
        channel = LinkChannel(f"127.0.0.1:{silent.getsockname()[1]},{at_leader}")
        request = {"cluster": "c0", "pod": "p0", "node": "n0", "epoch": 1, "gpus": []}
        try:
            with pytest.raises(LinkError, match="DEADLINE_EXCEEDED"):
                await channel.call("BindPod", request, 0.3)
            assert (await channel.call("BindPod", request, 2.0))["outcome"] == pb.BIND_BOUND
        finally:
            await channel.close()
            await leader.stop()
            silent.close()

    asyncio.run(run())
