"""The asyncio driver: the same sans-IO core over a real UDP socket and TCP streams.

One UDP socket and one TCP listener share ``host:port``, which is also the node's name.
Datagrams go to ``GossipNode.on_packet``; each TCP connection carries one frame
(4-byte big-endian length, then the sealed frame) to ``on_stream``. Time is
``loop.time()``; one ``call_at`` handle keeps the core's next deadline. Nothing a peer
sends can escape the receive path: the core drops bad input itself, and any internal
fault is logged with the peer and counted, never raised into the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence

from gossip.config import GossipConfig, split_addr
from gossip.effects import Effect, MemberEvent, RecordEvent, Send, SendStream
from gossip.keyring import Keyring
from gossip.lossy import LossyDatagrams
from gossip.members import MemberView
from gossip.metrics import Counters
from gossip.node import GossipNode
from gossip.records import RecordValue
from gossip.wire import DropReason

log = logging.getLogger("gossip.udp")

Event = MemberEvent | RecordEvent
_LENGTH = 4
_STREAM_TIMEOUT = 5.0
"""Seconds a peer may take to deliver one stream frame before we hang up."""


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpGossip) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.owner._on_packet(f"{addr[0]}:{addr[1]}", data)

    def error_received(self, exc: Exception) -> None:
        log.debug("udp error: %s", exc)  # e.g. ICMP port unreachable from a dead peer


class UdpGossip:
    """A gossip member on real sockets: the public API the edge agent uses.

    ``bind`` is ``host:port`` (port 0 picks a free one; ``name`` then says which).
    ``loss`` drops that share of our outgoing datagrams (drills and tests on real sockets).
    ``epoch`` defaults to wall-clock microseconds, so it grows across restarts and a
    restarted node's packets are never mistaken for replays of its previous life.
    """

    def __init__(
        self,
        bind: str,
        seeds: Sequence[str] = (),
        *,
        keyring: Keyring | None = None,
        config: GossipConfig | None = None,
        epoch: int | None = None,
        rng: random.Random | None = None,
        loss: float = 0.0,
    ) -> None:
        split_addr(bind)
        self.bind = bind
        self.seeds = tuple(seeds)
        self.config = config or GossipConfig()
        self._keyring = keyring
        self._epoch = time.time_ns() // 1000 if epoch is None else epoch
        self._rng = rng or random.Random()
        self._node: GossipNode | None = None
        self._name: str | None = None
        self._udp: asyncio.DatagramTransport | LossyDatagrams | None = None
        self.loss = loss
        """Share of our outgoing datagrams dropped on purpose (fault injection: :mod:`gossip.lossy`)."""
        self._tcp: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._subscribers: list[Callable[[Event], None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.internal_errors = 0
        """Faults of our own while handling input: logged and survived, should stay 0."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind both sockets, then join through the seeds (retried while nobody answers)."""
        loop = asyncio.get_running_loop()
        host, port = split_addr(self.bind)
        self._tcp = await asyncio.start_server(self._on_connection, host, port)
        port = self._tcp.sockets[0].getsockname()[1]
        udp, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), local_addr=(host, port))
        self._udp = LossyDatagrams(udp, self.loss, random.Random(self._rng.random())) if self.loss else udp
        self._name = f"{host}:{port}"
        # rounds start on the wall clock's grid, so every host's start together (NTP keeps clocks close)
        self._node = GossipNode(
            self._name, now=loop.time(), rng=self._rng, config=self.config, keyring=self._keyring, epoch=self._epoch,
            round_offset=time.time() - loop.time(),
        )
        self._apply(self._node.join(self.seeds, loop.time()))

    async def leave(self, linger: float | None = None) -> None:
        """Say goodbye, let the news spread for a few gossip rounds, then close."""
        self._apply(self._core.leave(self._now()))
        await asyncio.sleep(self.config.gossip_interval * 5 if linger is None else linger)
        await self.close()

    async def close(self) -> None:
        """Stop at once (peers will find out by probing)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        self._node = None

    # ------------------------------------------------------------------ API

    @property
    def name(self) -> str:
        """Our address and identity, known once started (and still after closing)."""
        if self._name is None:
            raise RuntimeError("the gossip member has no name yet: await start() first")
        return self._name

    @property
    def metrics(self) -> Counters:
        return self._core.metrics

    @property
    def keyring(self) -> Keyring | None:
        """Rotate keys by calling install/use/remove on it; takes effect on the next packet."""
        return self._keyring

    def publish(self, key: str, value: RecordValue) -> None:
        """Publish one of our records (None withdraws it); raises ValueError if unencodable."""
        self._apply(self._core.publish(key, value, self._now()))

    def members(self) -> dict[str, MemberView]:
        return self._core.members()

    def heard(self) -> dict[str, float]:
        """Member -> when we last heard from it, in ``loop.time()`` (empty unless ``config.hearing``)."""
        return self._core.heard()

    @property
    def awareness(self) -> int:
        """Lifeguard local-health score: 0 is healthy; it rises while our own probes go unanswered."""
        return self._core.awareness

    def records(self) -> dict[str, dict[str, tuple[int, RecordValue]]]:
        """owner -> key -> (version, value)."""
        return self._core.records()

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call back on every member and record event; returns the unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    async def events(self) -> AsyncIterator[Event]:
        """Member and record events as they happen, from now on."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()

    # ------------------------------------------------------------------ plumbing

    @property
    def _core(self) -> GossipNode:
        if self._node is None:
            raise RuntimeError("the gossip member is not running: await start() first")
        return self._node

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                if self._udp is not None:
                    try:
                        self._udp.sendto(effect.data, split_addr(effect.addr))
                    except (ValueError, OSError) as exc:  # a member named by no usable address
                        log.debug("gossip %s: cannot send to %r: %s", self.bind, effect.addr, exc)
            elif isinstance(effect, SendStream):
                task = asyncio.get_running_loop().create_task(self._send_stream(effect))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                for callback in list(self._subscribers):
                    callback(effect)
        self._arm()

    def _arm(self) -> None:
        if self._node is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(self._node.next_deadline(), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._node is not None:
            self._guarded("timer", lambda node: node.tick(self._now()))

    def _guarded(self, peer: str, step: Callable[[GossipNode], list[Effect]]) -> None:
        """Run one core step; an internal fault is logged with the peer, never propagated."""
        if self._node is None:
            return
        try:
            effects = step(self._node)
        except Exception:  # the receive loop must survive anything
            self.internal_errors += 1
            log.exception("gossip %s: internal error handling input from %s", self.bind, peer)
            self._arm()
            return
        self._apply(effects)

    def _on_packet(self, peer: str, data: bytes) -> None:
        self._guarded(peer, lambda node: node.on_packet(peer, data, self._now()))

    async def _send_stream(self, effect: SendStream) -> None:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(*split_addr(effect.addr)), _STREAM_TIMEOUT)
            writer.write(len(effect.data).to_bytes(_LENGTH, "big") + effect.data)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        except ConnectionRefusedError as exc:  # the host is up and nothing listens there: a probe wants to know
            log.debug("stream to %s refused: %s", effect.addr, exc)
            self._guarded(effect.addr, lambda node: node.on_refused(effect.addr, self._now()))
        except (OSError, ValueError, asyncio.TimeoutError) as exc:
            log.debug("stream to %s failed: %s", effect.addr, exc)  # anti-entropy retries later

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        addr = writer.get_extra_info("peername")
        peer = f"{addr[0]}:{addr[1]}" if addr else "?"
        try:
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(_LENGTH), _STREAM_TIMEOUT), "big")
            if size > self.config.max_stream_bytes:
                self._refuse_stream(peer, DropReason.OVERSIZED, f"{size} bytes announced")
                return
            data = await asyncio.wait_for(reader.readexactly(size), _STREAM_TIMEOUT)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            self._refuse_stream(peer, DropReason.TRUNCATED, repr(exc))
            return
        finally:
            writer.close()
        self._guarded(peer, lambda node: node.on_stream(peer, data, self._now()))

    def _refuse_stream(self, peer: str, reason: DropReason, detail: str) -> None:
        """A stream that never became a frame: counted and logged like a bad packet."""
        log.warning("gossip %s: dropped stream from %s: %s: %s", self.bind, peer, reason, detail)
        if self._node is not None:
            self._node.metrics.dropped[reason] += 1
