"""Placement cores on a deterministic in-memory network: the agent's logic without sockets or clocks.

Each agent is a :class:`edgeagent.placing.Placer`; gossip is a delivery of each
published record to every other live agent after a seeded random delay (some
copies lost), the cluster is an :class:`InMemoryCluster` on the simulated clock,
and binds answer after a millisecond. Killing an agent stops its deliveries and,
``detect`` seconds later, tells the others it is dead; reviving it replays its
ledger from its journal operations, as a restarted daemon would. Everything is a
function of the seed, so a failing scenario replays exactly.

With ``rounds`` each agent takes its inputs (gossip records, watch events) in turns, one
per round, in arrival order: what a daemon does with the records of a gossip packet,
which it commits and re-arms for once per event-loop turn. Large fleets need it: one
turn per record is one deadline scan per record.
"""

from __future__ import annotations

import functools
import heapq
import math
import random
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from crdt import wire
from edgeagent.clusters import BindResult, ClusterUnavailable, PodUpdate
from edgeagent.config import PlacementSection
from edgeagent.effects import Bind, Effect, Evict, Experience, Publish, ReportNode
from edgeagent.ledger import Ledger, Op
from edgeagent.placing import Placer
from edgeagent.scoring import HeuristicScorer
from fedcore.nodes import Node
from fedplane.lab.doubles.memcluster import InMemoryCluster

T = TypeVar("T")
BIND_DELAY = 0.001


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the in-memory cluster's calls) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("the coroutine suspended; only non-blocking calls can run here")


class PlacementSim:
    def __init__(self, nodes: Sequence[Node], settings: PlacementSection | None = None, seed: int = 0,
                 delay: tuple[float, float] = (0.002, 0.02), loss: float = 0.0, detect: float = 1.0,
                 on_boot: Callable[[Placer], None] | None = None,
                 on_effects: Callable[[str, list[Effect]], None] | None = None, pushpull: float | None = None,
                 rounds: float | None = None, tombstone_ttl: float = 30.0) -> None:
        """``on_boot`` sees every placer as it starts (first boot and each revival), ``on_effects`` every
        effect an agent emits, before it is carried out: benches instrument and count there.

        ``pushpull`` (seconds) turns on the gossip layer's record semantics: each (owner, key)
        record is versioned, an older version arriving after a newer one is dropped, and every
        ``pushpull`` seconds each live agent swaps what the other lacks with one random live
        peer (anti-entropy repairs lost records, as gossip's push-pull does); a withdrawn
        record's tombstone is forgotten ``tombstone_ttl`` seconds after it arrived.

        ``rounds`` (seconds): inputs reaching an agent are taken at the end of the round they
        arrive in, together and in arrival order (see the module docstring); None: each on arrival."""
        self.now = 0.0
        self.rng = random.Random(seed)
        self.settings = settings or PlacementSection()
        self.delay, self.loss, self.detect = delay, loss, detect
        self.cluster = InMemoryCluster(nodes, clock=lambda: self.now)
        self.nodes = {n.name: n for n in nodes}
        self.journals: dict[str, list[Op]] = {n.name: [] for n in nodes}
        self.agents: dict[str, Placer] = {}
        self.down: set[str] = set()
        self.cut: set[str] = set()
        """Agents whose host link is cut: no gossip, no back end, until healed."""
        self.evictions: list[tuple[str, str]] = []
        self.reports: list[tuple[str, str, bool]] = []
        """(reporting agent, node, ready) node-status reports the cluster accepted."""
        self.experience: list[dict[str, Any]] = []
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._on_boot = on_boot
        self.pushpull = pushpull
        self._versions: dict[str, dict[tuple[str, str], int]] = {}
        """With ``pushpull``: per agent, the newest version it holds of each (owner, key) record."""
        self._values: dict[int, object] = {}
        """With ``pushpull``: each published version's value (versions are unique across the run)."""
        self._version = 0
        self.tombstone_ttl = tombstone_ttl
        self._tombstones: dict[str, list[tuple[float, tuple[str, str], int]]] = {}
        """With ``pushpull``: per agent, (arrival, record, version) of the withdrawals it holds, oldest first."""
        self.rounds = rounds
        self._inbox: dict[tuple[str, int], list[tuple[float, int, Callable[[Placer], list[Effect]]]]] = {}
        """With ``rounds``: (agent, round number) -> (arrival, order, input) waiting for that round's end."""
        self._offsets = {name: i * (rounds or 0.0) / len(nodes) for i, name in enumerate(self.nodes)}
        self._on_effects = on_effects
        self._due: dict[str, float] = {}
        """Each live agent's next deadline, refreshed after every call into it."""
        self._ticks: list[tuple[float, str]] = []
        """(deadline, agent) entries, some stale: the valid one matches ``_due``."""
        self.cluster.subscribe(self._on_update)
        for name in self.nodes:
            self._boot(name)
        if pushpull is not None:
            for i, name in enumerate(self.nodes):
                self.at(pushpull * (i + 1) / len(self.nodes), functools.partial(self._pushpull, name))

    # ---- scenario controls ----------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, action))

    def run(self, until: float) -> None:
        """Advance the clock to ``until``, delivering events and ticking agents in time order."""
        while True:
            ticks = self._ticks
            while ticks and (ticks[0][1] in self.down or self._due.get(ticks[0][1]) != ticks[0][0]):
                heapq.heappop(ticks)
            tick_at, ticker = ticks[0] if ticks else (float("inf"), "")
            event_at = self._events[0][0] if self._events else float("inf")
            when = min(tick_at, event_at)
            if when > until:
                self.now = until
                return
            self.now = max(self.now, when)
            if event_at <= tick_at:
                heapq.heappop(self._events)[2]()
            else:
                self._effects(ticker, self.agents[ticker].tick(self.now))

    def kill(self, name: str) -> None:
        """The agent stops; the others suspect it half a ``detect`` later and hear of its death ``detect`` seconds later."""
        self.down.add(name)
        self._due.pop(name, None)
        self._versions.pop(name, None)  # a restarted gossip layer starts empty
        self._tombstones.pop(name, None)
        for other in self.agents:
            if other != name:
                self.at(self.now + self.detect / 2, functools.partial(self._call, other, lambda p: p.member_suspect(name, self.now)))
                self.at(self.now + self.detect, functools.partial(self._call, other, lambda p: p.member_dead(name, self.now)))

    def cut_off(self, name: str) -> None:
        """Cut the agent's host link: each side suspects the other half a ``detect`` in and declares it dead
        one ``detect`` in (the cut agent, one peer at a time); the cut agent's own probes go unanswered."""
        self.cut.add(name)
        others = sorted(o for o in self.agents if o != name and o not in self.down)
        for other in others:
            self.at(self.now + self.detect / 2, functools.partial(self._call, other, lambda p: p.member_suspect(name, self.now)))
            self.at(self.now + self.detect, functools.partial(self._call, other, lambda p: p.member_dead(name, self.now)))
        self.at(self.now + self.detect / 4, functools.partial(self._call, name, lambda p: p.set_awareness(8, self.now)))
        for i, other in enumerate(others):
            self.at(self.now + self.detect / 2, functools.partial(self._call, name, lambda p, o=other: p.member_suspect(o, self.now)))
            self.at(self.now + self.detect + 0.2 * i, functools.partial(self._call, name, lambda p, o=other: p.member_dead(o, self.now)))

    def heal(self, name: str, stagger: float = 0.5) -> None:
        """Restore the link: "alive" news reaches the healed agent one peer every ``stagger`` seconds (in that
        order the first ones may restore its quorum while the others still look dead), records are
        exchanged again and its watch relists."""
        self.cut.discard(name)
        others = sorted(o for o in self.agents if o != name and o not in self.down)
        self._call(name, lambda p: p.set_awareness(0, self.now))
        for i, other in enumerate(others):
            self._call(other, lambda p: p.member_alive(name, self.now))
            self.at(self.now + stagger * i, functools.partial(self._call, name, lambda p, o=other: p.member_alive(o, self.now)))
        for source, placer in self.agents.items():
            for uid in list(placer.ledger.own_pods()):
                delta = placer.ledger.own_delta(uid)
                if delta is None:
                    continue
                for target in ([o for o in others] if source == name else [name]):
                    self._deliver(source, target, f"c/{uid}", wire.encode_delta(delta))
        for held in list(self.cluster.pods.values()):
            update = PodUpdate(held.pod, held.epoch, held.phase, self.cluster.bound_node(held.pod.uid))
            self._call(name, functools.partial(self._pod_update, update))

    def revive(self, name: str) -> None:
        """Restart the agent from its journal; peers see it alive and it relearns their records."""
        self.down.discard(name)
        self._boot(name)
        for other, placer in self.agents.items():
            if other != name:
                self._call(other, lambda p: p.member_alive(name, self.now))
                for uid in list(placer.ledger.own_pods()):
                    delta = placer.ledger.own_delta(uid)
                    if delta is not None:
                        self._deliver(other, name, f"c/{uid}", wire.encode_delta(delta))

    # ---- plumbing -------------------------------------------------------------------------------

    def _boot(self, name: str) -> None:
        node = self.nodes[name]
        ledger = Ledger.replay(name, name, node.capacity, self.journals[name])
        self.agents[name] = placer = Placer(node, ledger, HeuristicScorer(), self.settings, self.now)
        if self._on_boot is not None:
            self._on_boot(placer)
        self._effects(name, placer.announce(self.now))
        for held in list(self.cluster.pods.values()):
            update = PodUpdate(held.pod, held.epoch, held.phase, self.cluster.bound_node(held.pod.uid))
            self._call(name, functools.partial(self._pod_update, update))

    def _call(self, name: str, step: Callable[[Placer], list[Effect]]) -> None:
        if name not in self.down:
            self._effects(name, step(self.agents[name]))

    def _later(self, target: str, step: Callable[[Placer], list[Effect]]) -> None:
        """Hand ``step`` to ``target`` after a seeded network delay: on arrival, or at the end of its round."""
        low, high = self.delay
        at = self.now + (low + (high - low) * self.rng.random())  # rng.uniform's arithmetic, without its call
        if self.rounds is None:
            self.at(at, functools.partial(self._call, target, step))
            return
        offset = self._offsets[target]  # agents' turns are not in step: each has its own phase
        index = math.ceil((at - offset) / self.rounds)
        self._seq += 1
        box = self._inbox.get((target, index))
        if box is None:
            box = self._inbox[(target, index)] = []
            self.at(index * self.rounds + offset, functools.partial(self._take_round, target, index))
        box.append((at, self._seq, step))

    def _take_round(self, target: str, index: int) -> None:
        """``target`` takes what reached it in its round ``index``, in arrival order, as one turn."""
        arrivals = self._inbox.pop((target, index))
        if target in self.down:
            return
        placer = self.agents[target]
        arrivals.sort()  # by arrival, then send order (unique): the steps themselves are never compared
        effects: list[Effect] = []
        for _, _, step in arrivals:
            effects.extend(step(placer))
        self._effects(target, effects)

    def _on_update(self, update: PodUpdate) -> None:
        for name in self.agents:
            if name in self.cut:
                continue
            self._later(name, functools.partial(self._pod_update, update))

    def _pod_update(self, update: PodUpdate, placer: Placer) -> list[Effect]:
        return placer.pod_update(update, self.now)

    def _deliver(self, source: str, target: str, key: str, value: object, version: int = 0) -> None:
        if self.rng.random() < self.loss or source in self.cut or target in self.cut:
            return
        self._later(target, functools.partial(self._arrive, source, target, key, value, version, ""))

    def _broadcast(self, source: str, key: str, value: object, version: int) -> None:
        """:meth:`_deliver` to every other agent (the same draws, in the same order), without a call per peer."""
        chance, loss, cut, arrive, later = self.rng.random, self.loss, self.cut, self._arrive, self._later
        for target in self.agents:
            if target != source and not (chance() < loss or source in cut or target in cut):
                later(target, functools.partial(arrive, source, target, key, value, version, ""))

    def _arrive(self, owner: str, target: str, key: str, value: object, version: int, relay: str,
                placer: Placer) -> list[Effect]:
        if (relay or owner) in self.down or target in self.down:
            return []
        if self.pushpull is not None and version:  # version 0: a direct resend on rejoin, not a gossip record
            held = self._versions.setdefault(target, {})
            if held.get((owner, key), 0) >= version:
                return []  # gossip keeps the newest version of a record: an older one arriving late is dropped
            held[(owner, key)] = version
            if value is None:
                self._tombstones.setdefault(target, []).append((self.now, (owner, key), version))
        return placer.record(owner, key, value, self.now)

    def _forget_tombstones(self, name: str) -> None:
        """Gossip forgets a withdrawn record ``tombstone_ttl`` after it arrived (unless a newer version replaced it)."""
        tombstones, held = self._tombstones.get(name), self._versions.get(name)
        if not tombstones or held is None:
            return
        expired = 0
        for when, record, version in tombstones:
            if when > self.now - self.tombstone_ttl:
                break
            expired += 1
            if held.get(record) == version:
                del held[record]
        del tombstones[:expired]

    def _pushpull(self, name: str) -> None:
        """One anti-entropy exchange: ``name`` and a random live peer each receive the records the other has newer."""
        self.at(self.now + self.pushpull, functools.partial(self._pushpull, name))  # type: ignore[operator]
        peers = [n for n in self.agents if n != name and n not in self.down and n not in self.cut]
        if name in self.down or name in self.cut or not peers:
            return
        peer = self.rng.choice(peers)
        self._forget_tombstones(name)
        self._forget_tombstones(peer)
        mine, theirs = self._versions.setdefault(name, {}), self._versions.setdefault(peer, {})
        for src, dst, have, lack in ((peer, name, theirs, mine), (name, peer, mine, theirs)):
            # what differs, found at C speed, in version order (set order would depend on the hash seed)
            for (owner, key), version in sorted(have.items() - lack.items(), key=lambda item: item[1]):
                if owner != dst and lack.get((owner, key), 0) < version:
                    value = self._values[version]
                    self._later(dst, functools.partial(self._arrive, owner, dst, key, value, version, src))

    def _effects(self, name: str, effects: list[Effect]) -> None:
        placer = self.agents[name]
        self.journals[name].extend(placer.ledger.take_ops())
        if name not in self.down:
            due = placer.next_deadline()
            if self._due.get(name) != due:
                self._due[name] = due
                heapq.heappush(self._ticks, (due, name))
        if self._on_effects is not None and effects:
            self._on_effects(name, effects)
        for effect in effects:
            if isinstance(effect, Publish):
                self._version += 1
                if self.pushpull is not None:
                    self._versions.setdefault(name, {})[(name, effect.key)] = self._version
                    self._values[self._version] = effect.value
                    if effect.value is None:
                        self._tombstones.setdefault(name, []).append((self.now, (name, effect.key), self._version))
                self._broadcast(name, effect.key, effect.value, self._version)
            elif isinstance(effect, Bind):
                self.at(self.now + BIND_DELAY, functools.partial(self._bind, name, effect))
            elif isinstance(effect, ReportNode):
                self._report(effect, name)
            elif isinstance(effect, Evict):
                self.evictions.append((name, effect.pod))
            elif isinstance(effect, Experience):
                self.experience.append(effect.row)

    def _report(self, effect: ReportNode, sender: str = "") -> None:
        """As the daemon: retried every half second while the cluster is unreachable (or the sender cut off)."""
        try:
            if sender in self.cut:
                raise ClusterUnavailable("host link cut")
            run_now(self.cluster.report_node(effect.node, effect.ready))
            self.reports.append((sender, effect.node, effect.ready))
        except ClusterUnavailable:
            self.at(self.now + 0.5, lambda: self._report(effect, sender))

    def _bind(self, name: str, effect: Bind) -> None:
        if name in self.down:
            return
        try:
            if name in self.cut:
                raise ClusterUnavailable("host link cut")
            result: BindResult | None = run_now(self.cluster.bind(effect.pod, effect.node, effect.epoch, effect.gpus, effect.reclaimed_milli))
        except ClusterUnavailable:
            result = None
        self._call(name, lambda p: p.bind_done(effect.pod, result, self.now))
