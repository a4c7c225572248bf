"""The twin link: frames, calls, watches and hostile bytes over real loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from fedapi import twincluster_pb2 as pb
from fedapi import agentlink
from fedapi.linkserver import Context, LinkServer, from_wire, to_wire
from fedapi.agentlink import Kind, LinkChannel, LinkError, ProtocolError


class Servicer:
    """A small TwinCluster servicer: enough behaviour to see each outcome on the wire."""

    def __init__(self) -> None:
        self.watch_cancelled = asyncio.Event()
        self.release = asyncio.Event()

    async def BindPod(self, request: pb.BindPodRequest, context: Context) -> pb.BindPodResponse:
        if request.pod == "boom":
            raise RuntimeError("servicer bug")
        if request.pod == "slow":
            await self.release.wait()
        if request.cluster != "c0":
            await context.abort("NOT_FOUND", f"no cluster {request.cluster!r}")
        return pb.BindPodResponse(outcome=pb.BIND_BOUND, node=request.node, epoch=request.epoch)

    async def WatchPods(self, request: pb.WatchPodsRequest, context: Context) -> AsyncIterator[pb.PodEvent]:
        for i in range(3):
            yield pb.PodEvent(type=pb.EVENT_ADDED, pod=pb.Pod(name=f"p{i}"))
        if not request.pending_only:
            return
        try:
            await asyncio.Event().wait()  # a watch that stays open until cancelled
        except asyncio.CancelledError:
            self.watch_cancelled.set()
            raise


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[Servicer, LinkServer, LinkChannel]]:
    servicer = Servicer()
    server = LinkServer(servicer)
    port = await server.start()
    channel = LinkChannel(f"127.0.0.1:{port}")
    yield servicer, server, channel
    await channel.close()
    await server.stop()


def test_frames_round_trip_and_lengths_are_checked() -> None:
    frame = agentlink.pack(Kind.CALL, 7, 1, b"body")
    size, kind, call, tag = agentlink.unpack_header(frame[: agentlink.HEADER_BYTES])
    assert (size, kind, call, tag) == (4, Kind.CALL, 7, 1)
    assert frame[agentlink.HEADER_BYTES:] == b"body"
    huge = (agentlink.MAX_FRAME + 1).to_bytes(4, "big") + frame[4:agentlink.HEADER_BYTES]
    with pytest.raises(ProtocolError, match="frame length"):
        agentlink.unpack_header(huge)
    with pytest.raises(ProtocolError, match="unknown frame kind 99"):
        agentlink.unpack_header(frame[:4] + bytes([99]) + frame[5:agentlink.HEADER_BYTES])


def test_method_numbers_follow_the_proto() -> None:
    service = pb.DESCRIPTOR.services_by_name["TwinCluster"]
    assert agentlink.METHODS == tuple(m.name for m in service.methods)
    assert agentlink.WATCHES == {m.name for m in service.methods if m.server_streaming}


def test_messages_become_maps_of_every_field_and_back() -> None:
    event = pb.PodEvent(type=pb.EVENT_ADDED, pod=pb.Pod(name="p", epoch=2, spec=pb.PodSpec(node_selector={"a": "b"}, archs=["arm64"])))
    wire = to_wire(event)
    assert wire["type"] == pb.EVENT_ADDED and wire["pod"]["node"] == "" and wire["pod"]["requests"]["gpu_milli"] == 0
    assert wire["pod"]["spec"]["node_selector"] == {"a": "b"} and wire["pod"]["spec"]["archs"] == ["arm64"]
    assert to_wire(from_wire(wire, pb.PodEvent)) == wire  # (an empty sub-message comes back set: same fields, same values)
    with pytest.raises(Exception, match="no field named"):
        from_wire({"cluster": "c0", "surprise": 1}, pb.BindPodRequest)


@pytest.mark.asyncio
async def test_unary_call_and_abort(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    _, _, channel = served
    reply = await channel.call("BindPod", {"cluster": "c0", "pod": "a", "node": "n1", "epoch": 3}, 2.0)
    assert (reply["outcome"], reply["node"], reply["epoch"], reply["reason"]) == (pb.BIND_BOUND, "n1", 3, "")
    with pytest.raises(LinkError) as caught:
        await channel.call("BindPod", {"cluster": "elsewhere", "pod": "a"}, 2.0)
    assert caught.value.code == "NOT_FOUND" and "elsewhere" in caught.value.details


@pytest.mark.asyncio
async def test_a_servicer_fault_fails_that_call_only(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    _, _, channel = served
    with pytest.raises(LinkError) as caught:
        await channel.call("BindPod", {"cluster": "c0", "pod": "boom"}, 2.0)
    assert caught.value.code == "INTERNAL" and "servicer bug" in caught.value.details
    reply = await channel.call("BindPod", {"cluster": "c0", "pod": "b", "node": "n2"}, 2.0)
    assert reply["node"] == "n2"


@pytest.mark.asyncio
async def test_calls_share_the_connection_and_answer_out_of_order(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    servicer, _, channel = served
    slow = asyncio.create_task(channel.call("BindPod", {"cluster": "c0", "pod": "slow", "node": "s"}, 5.0))
    fast = await channel.call("BindPod", {"cluster": "c0", "pod": "fast", "node": "f"}, 2.0)
    assert fast["node"] == "f" and not slow.done()
    servicer.release.set()
    assert (await slow)["node"] == "s"


@pytest.mark.asyncio
async def test_deadline(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    _, _, channel = served
    with pytest.raises(LinkError) as caught:
        await channel.call("BindPod", {"cluster": "c0", "pod": "slow"}, 0.1)
    assert caught.value.code == "DEADLINE_EXCEEDED"


@pytest.mark.asyncio
async def test_watch_ends_and_an_abandoned_watch_is_cancelled(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    servicer, _, channel = served
    names = [e["pod"]["name"] async for e in channel.watch("WatchPods", {"cluster": "c0"})]
    assert names == ["p0", "p1", "p2"]
    stream = channel.watch("WatchPods", {"cluster": "c0", "pending_only": True})
    assert (await anext(stream))["pod"]["name"] == "p0"
    await stream.aclose()
    await asyncio.wait_for(servicer.watch_cancelled.wait(), 2.0)


@pytest.mark.asyncio
async def test_unknown_method_and_wrong_call_kind_are_refused(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    _, server, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(agentlink.pack(Kind.CALL, 1, 200, b""))
    writer.write(agentlink.pack(Kind.CALL, 2, agentlink.METHODS.index("WatchPods"), b""))
    writer.write(agentlink.pack(Kind.CALL, 3, agentlink.METHODS.index("BindPod"), b"\xc1"))  # not msgpack
    writer.write(agentlink.pack(Kind.CALL, 4, agentlink.METHODS.index("BindPod"), agentlink.encode({"epoch": "three"})))
    errors = {}
    for _ in range(4):
        frame = await asyncio.wait_for(agentlink.read_frame(reader), 2.0)
        assert frame.kind is Kind.ERROR
        errors[frame.call] = agentlink.parse_error(frame.body).code
    assert errors == {1: "UNIMPLEMENTED", 2: "INVALID_ARGUMENT", 3: "INVALID_ARGUMENT", 4: "INVALID_ARGUMENT"}
    writer.close()


@pytest.mark.asyncio
async def test_garbage_ends_that_connection_not_the_server(served: tuple[Servicer, LinkServer, LinkChannel]) -> None:
    _, server, channel = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"\xff" * 64)  # a length far over the cap
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # the server hung up
    writer.close()
    reply = await channel.call("BindPod", {"cluster": "c0", "pod": "a", "node": "n1"}, 2.0)
    assert reply["node"] == "n1"


@pytest.mark.asyncio
async def test_a_lost_server_fails_calls_and_the_channel_reconnects() -> None:
    servicer = Servicer()
    server = LinkServer(servicer)
    port = await server.start()
    channel = LinkChannel(f"127.0.0.1:{port}")
    stream = channel.watch("WatchPods", {"cluster": "c0", "pending_only": True})
    assert (await anext(stream))["pod"]["name"] == "p0"
    await server.stop()
    with pytest.raises(LinkError) as caught:
        async for _ in stream:
            pass
    assert caught.value.code == "UNAVAILABLE"
    with pytest.raises(LinkError) as refused:
        await channel.call("BindPod", {"cluster": "c0", "pod": "a"}, 1.0)
    assert refused.value.code == "UNAVAILABLE"
    again = LinkServer(servicer, port=port)
    await again.start()
    try:
        assert (await channel.call("BindPod", {"cluster": "c0", "pod": "a", "node": "n9"}, 2.0))["node"] == "n9"
    finally:
        await channel.close()
        await again.stop()


def test_bad_address() -> None:
    with pytest.raises(ValueError, match="host:port"):
        LinkChannel("nowhere")


@pytest.mark.asyncio
async def test_a_cancel_that_lands_as_the_connect_fails_stops_a_retrying_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's report loop retries a refused link; SIGTERM cancels it. On 3.11 ``wait_for`` returned the
    connect's error in place of a cancel that landed in the same loop turn, and the loop went on for good."""
    caller: asyncio.Task[None] | None = None

    async def refused(*_args: object, **_kwargs: object) -> None:
        assert caller is not None
        asyncio.get_running_loop().call_soon(caller.cancel)  # the cancel lands as the connect fails
        raise ConnectionRefusedError(111, "refused")

    monkeypatch.setattr(asyncio, "open_connection", refused)
    channel = LinkChannel("127.0.0.1:1")
    attempts = 0

    async def retrying() -> None:
        nonlocal attempts
        while attempts < 50:
            attempts += 1
            try:
                await channel.call("BindPod", {"cluster": "c0"}, 1.0)
            except LinkError:
                await asyncio.sleep(0.001)

    caller = asyncio.get_running_loop().create_task(retrying())
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert attempts == 1
