"""A deterministic in-memory network: discrete events in virtual time, for tests and benches.

Thousands of ``GossipNode`` cores share one event heap. Datagrams are lost, duplicated,
delayed and so reordered by one seeded ``random.Random``; partitions drop traffic
between groups until healed; nodes can crash (silent forever) or pause (a SIGSTOP: time
passes, packets queue, nothing runs) and resume. Streams behave like TCP: never lost,
only delayed, but still cut by partitions and crashes.

Bytes are always real: nodes encode (and, with a keyring, encrypt) every packet exactly as
over UDP; the network only decides when, whether and how often each one arrives.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from gossip.config import GossipConfig
from gossip.effects import Effect, MemberEvent, RecordEvent, Send, SendStream
from gossip.keyring import Keyring
from gossip.members import MemberState
from gossip.node import GossipNode
from gossip.records import RecordValue
from gossip.shared import SharedState

Listener = Callable[[str, "MemberEvent | RecordEvent", float], None]
"""Called with (node name, event, virtual time) for every event any node emits."""

_PACKET, _STREAM, _TICK, _REFUSED = 0, 1, 2, 3
_SYN_RTO, _DATA_RTO = 1.0, 0.2
"""Linux's initial retransmission timeouts for a connection's handshake and for data."""
_PAUSED_BUFFER = 512
"""Datagrams a paused node's socket buffer holds; later ones are lost, as in a kernel."""


@dataclass(frozen=True, slots=True)
class LinkModel:
    """How the network treats a datagram."""

    loss: float = 0.0
    duplicate: float = 0.0
    latency: tuple[float, float] = (0.0005, 0.003)
    """Uniform one-way delay range; its spread reorders packets."""
    stream_bytes_per_s: float = 100e6
    """Streams add size / bandwidth to their delay."""
    clock_skew: float = 0.001
    """Each node's clock is off the shared one by a uniform draw from +/- this (NTP on a LAN
    keeps hosts within about a millisecond); it shifts where the node's gossip rounds start."""


class InMemoryNetwork:
    """Nodes keyed by name (their address), advanced by ``run_until``."""

    def __init__(self, seed: int, link: LinkModel | None = None) -> None:
        self.seed = seed
        self.link = link or LinkModel()
        self.now = 0.0
        self.nodes: dict[str, GossipNode] = {}
        self.listeners: list[Listener] = []
        self._rng = random.Random(seed)
        self._events: list[tuple[float, int, int, str, object]] = []
        self._seq = 0
        self._tick_at: dict[str, float] = {}
        self._crashed: set[str] = set()
        self._refusing: set[str] = set()  # crashed with the host up: streams to them are refused
        self._paused: dict[str, list[tuple[int, object]]] = {}
        self._group: dict[str, int] = {}
        self._extra_loss: dict[str, float] = {}
        self._cut: set[frozenset[str]] = set()
        """Links cut both ways while every other path stays up (``cut_link``)."""
        self._starts = 0
        self.source: str | None = None
        """Sender of the packet or stream being handled now (None during timers): lets a listener
        follow an update hop by hop, as a bench counting gossip rounds does."""

    # ------------------------------------------------------------------ cluster control

    def add(
        self,
        name: str,
        *,
        config: GossipConfig | None = None,
        keyring: Keyring | None = None,
        seeds: Sequence[str] = (),
    ) -> GossipNode:
        """Start a node now and let it join through seeds."""
        self._starts += 1  # also the epoch: a restarted name must not look like a replay
        rng = random.Random(f"{self.seed}/{name}/{self._starts}")
        skew = random.Random(f"{self.seed}/{name}/clock").uniform(-self.link.clock_skew, self.link.clock_skew)
        node = GossipNode(name, now=self.now, rng=rng, config=config, keyring=keyring, epoch=self._starts, round_offset=skew)
        self.nodes[name] = node
        self._crashed.discard(name)
        self._refusing.discard(name)
        self._apply(name, node.join(seeds, self.now) if seeds else [])
        return node

    def restore(
        self,
        name: str,
        members: Iterable[tuple[str, int, MemberState]],
        records: Iterable[tuple[str, str, int, RecordValue]],
    ) -> None:
        """Prime a node from a snapshot (``GossipNode.restore``): a warm start for large benches."""
        self._apply(name, self.nodes[name].restore(members, records, self.now))

    def adopt(self, name: str, state: SharedState) -> None:
        """Start a node from a state shared by the whole cluster (``GossipNode.adopt``): large warm starts."""
        self._apply(name, self.nodes[name].adopt(state, self.now))

    def publish(self, name: str, key: str, value: RecordValue) -> None:
        self._apply(name, self.nodes[name].publish(key, value, self.now))

    def leave(self, name: str) -> None:
        self._apply(name, self.nodes[name].leave(self.now))

    def crash(self, name: str, host_up: bool = False) -> None:
        """The node stops for good: no ticks, incoming traffic vanishes. ``host_up``: only the process died (kill -9),
        so its host's kernel refuses a stream to it after a round trip, as a closed TCP port does."""
        self._crashed.add(name)
        if host_up:
            self._refusing.add(name)
        self._tick_at.pop(name, None)
        self._paused.pop(name, None)

    def pause(self, name: str) -> None:
        """Like SIGSTOP: time runs on, the node does nothing, datagrams queue up to a limit."""
        self._paused.setdefault(name, [])
        self._tick_at.pop(name, None)

    def resume(self, name: str) -> None:
        """Like SIGCONT: the node sees its queued input, then catches up on its timers."""
        for kind, payload in self._paused.pop(name, []):
            self._deliver(kind, name, payload)
        self._apply(name, self.nodes[name].tick(self.now))

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut traffic between the groups (and between them and anyone not listed)."""
        self._group = {name: i for i, group in enumerate(groups, start=1) for name in group}

    def cut_link(self, a: str, b: str) -> None:
        """Drop everything between two nodes, both ways, while each still reaches the others (a broken route, not a
        partition): what indirect probes exist for."""
        self._cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self._group = {}
        self._cut.clear()

    def degrade(self, name: str, loss: float) -> None:
        """Extra datagram loss on every packet to or from one node (a sick NIC, a hot CPU)."""
        self._extra_loss[name] = loss

    def live(self) -> list[str]:
        return [n for n in self.nodes if n not in self._crashed]

    # ------------------------------------------------------------------ running

    def run_until(self, t: float, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to virtual time t; returns early (True) once ``stop()`` holds."""
        events = self._events
        while events and events[0][0] <= t:
            when, _, kind, name, payload = heapq.heappop(events)
            self.now = when
            if kind == _TICK:
                if self._tick_at.get(name) != when:
                    continue  # superseded by an earlier tick, or the node is down
                del self._tick_at[name]
                self._apply(name, self.nodes[name].tick(when))
            elif name in self._crashed:
                continue
            elif name in self._paused:
                queue = self._paused[name]
                if kind == _STREAM or len(queue) < _PAUSED_BUFFER:
                    queue.append((kind, payload))
            else:
                self._deliver(kind, name, payload)
            if stop is not None and stop():
                return True
        self.now = max(self.now, t)
        return stop is not None and stop()

    def run_for(self, dt: float, stop: Callable[[], bool] | None = None) -> bool:
        return self.run_until(self.now + dt, stop)

    # ------------------------------------------------------------------ internals

    def _push(self, when: float, kind: int, name: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, name, payload))

    def _deliver(self, kind: int, name: str, payload: object) -> None:
        if kind == _REFUSED:
            self._apply(name, self.nodes[name].on_refused(cast(str, payload), self.now))
            return
        src, data = cast(tuple[str, bytes], payload)
        node = self.nodes[name]
        effects = node.on_packet(src, data, self.now) if kind == _PACKET else node.on_stream(src, data, self.now)
        self.source = src
        try:
            self._apply(name, effects)
        finally:
            self.source = None

    def _stream_delay(self, size: int, src: str, dst: str) -> float:
        """TCP over a lossy link: SYN, SYN-ACK and data are retransmitted after their timeouts."""
        link, rng = self.link, self._rng
        loss = link.loss + self._extra_loss.get(src, 0.0) + self._extra_loss.get(dst, 0.0)
        delay = 2 * rng.uniform(*link.latency) + size / link.stream_bytes_per_s
        for rto in (_SYN_RTO, _SYN_RTO, _DATA_RTO):
            while loss and rng.random() < loss:
                delay += rto
                rto *= 2
        return delay

    def _apply(self, name: str, effects: list[Effect]) -> None:
        """Route a node's effects, then make sure its next timer is scheduled."""
        link, rng, now = self.link, self._rng, self.now
        group = self._group
        for effect in effects:
            if isinstance(effect, Send):
                dst = effect.addr
                if group and group.get(dst, 0) != group.get(name, 0) or self._cut and frozenset((name, dst)) in self._cut:
                    continue
                loss = link.loss + self._extra_loss.get(name, 0.0) + self._extra_loss.get(dst, 0.0) if self._extra_loss else link.loss
                if rng.random() < loss:
                    continue
                copies = 2 if link.duplicate and rng.random() < link.duplicate else 1
                for _ in range(copies):
                    self._push(now + rng.uniform(*link.latency), _PACKET, dst, (name, effect.data))
            elif isinstance(effect, SendStream):
                dst = effect.addr
                if group and group.get(dst, 0) != group.get(name, 0) or self._cut and frozenset((name, dst)) in self._cut:
                    continue
                if dst in self._refusing:
                    self._push(now + 2 * rng.uniform(*link.latency), _REFUSED, name, dst)
                else:
                    self._push(now + self._stream_delay(len(effect.data), name, dst), _STREAM, dst, (name, effect.data))
            else:
                for listener in self.listeners:
                    listener(name, effect, now)
        if name in self._crashed or name in self._paused:
            return
        at = max(self.nodes[name].next_deadline(), now)
        if at != self._tick_at.get(name):  # re-armed like a real driver's timer: later too, when a timeout was settled
            self._tick_at[name] = at
            self._push(at, _TICK, name, None)
