"""Benchmark scenarios in the in-memory network: dissemination, detection, false deaths, bytes.

Every scenario starts from a warm cluster (each node restored from the same snapshot of
N alive members and their records, as after a restart from a snapshot), so it measures
steady-state behaviour rather than a thundering join. All traffic is real encoded and
XChaCha20-Poly1305-sealed bytes. ``commands.bench_gossip`` composes these into one report.
"""

from __future__ import annotations

import gc
import math
import random
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fedplane.lab.doubles.memnet import InMemoryNetwork, LinkModel
from gossip.config import GossipConfig
from gossip.effects import MemberEvent, RecordEvent
from gossip.keyring import Keyring
from gossip.members import MemberState
from gossip.shared import SharedState

Progress = Callable[[str, float], None]
"""Called with (scenario label, fraction done of that scenario)."""

RECORD_KEYS = ("resources", "load")
"""Records every node holds in the warm cluster (free resources, current load)."""
_KEY = Keyring([bytes(range(32))])
_DEAD, _SUSPECT = MemberState.DEAD, MemberState.SUSPECT
"""Listeners see every member event of every node (millions at N = 10,000): no enum lookups there."""


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off while a scenario runs, back on after.

    A simulated cluster allocates millions of objects a second (messages, events, timers)
    and holds tens of millions: the collector's passes over them took 13-15% of a
    10,000-node run (py-spy) and found nothing, since the nodes make no reference cycles
    (``gc.collect()`` after an N = 5,000 run under loss: 0 unreachable). Reference counting
    still frees everything; agents run with the collector as usual. A finished network is
    one big cycle (its listeners close over it): collected on the way out, so scenarios run one
    after another do not hold two.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()


def _names(n: int) -> list[str]:
    return [f"n{i:05d}" for i in range(n)]


def _value(name: str, key: str, version: int) -> dict[str, object]:
    """A realistic small record: what an edge agent publishes about its node."""
    return {"cpu_m": 4000 - version % 4000, "mem_mi": 8192, "gpu": 0, "pods": version % 110, "k": key}


def warm_cluster(n: int, config: GossipConfig, seed: int, link: LinkModel | None = None) -> InMemoryNetwork:
    """N nodes that already know each other and hold every node's records at version 1.

    They start from one shared state (``GossipNode.adopt``): each holds only what changes
    afterwards, so N = 10,000 fits in one process.
    """
    net = InMemoryNetwork(seed, link)
    names = _names(n)
    members = [(name, 0, MemberState.ALIVE) for name in names]
    records = [(name, key, 1, _value(name, key, 1)) for name in names for key in RECORD_KEYS]
    state = SharedState.of(members, records, net.now)
    for name in names:
        net.add(name, config=config, keyring=_KEY)
        net.adopt(name, state)
    return net


def _run(net: InMemoryNetwork, until: float, label: str, progress: Progress | None, start: float) -> None:
    """Advance in one-second steps so progress can be shown."""
    while net.now < until:
        net.run_until(min(until, math.floor(net.now) + 1.0))
        if progress is not None:
            progress(label, (net.now - start) / max(until - start, 1e-9))


def serf_model_rounds(n: int, fanout: int, target: float = 0.9999, loss: float = 0.0, failed: float = 0.0) -> int:
    """Rounds Serf's convergence model needs to reach ``target`` of ``n`` members.

    The model of Serf's convergence simulator (serf.io, docs/internals/simulator), the
    logistic solution of the push epidemic: after ``r`` rounds the infected share is
    ``1 / (1 + (n + 1) * exp(-c * n * r))`` with ``c = fanout / n * (1 - loss) * (1 - failed) / 2``.
    """
    contact = fanout / n * (1 - loss) * (1 - failed) * 0.5
    if contact <= 0:
        return -1
    # 1 / (1 + (n+1) e^(-c n r)) >= target  <=>  r >= ln((n+1) target / (1 - target)) / (c n)
    return max(0, math.ceil(math.log((n + 1) * target / (1 - target)) / (contact * n) - 1e-9))


@dataclass(slots=True)
class Spread:
    """How one update and several crashes travelled through a loss-free cluster."""

    rounds_to_99_99: int
    """Gossip rounds the update took to reach 99.99% of members: forwarding hops from the publisher
    (each hop one packet or stream that first brought it), not elapsed time over an interval."""
    seconds_to_99_99: float
    detect_first_s: list[float]
    detect_all_s: list[float]
    false_deaths: int


def spread_and_detect(n: int, config: GossipConfig, seed: int, crashes: int = 10, progress: Progress | None = None) -> Spread:
    """Time for one record update to reach 99.99% of N, then crash nodes one by one.

    Rounds are counted hop by hop: a member that first hears the update from a member
    that heard it in round r heard it in round r + 1 (the publisher holds it in round 0;
    probes piggyback broadcasts too, as in memberlist). ``rounds_to_99_99`` is the round
    by which ceil(0.9999 N) members hold it. Detection of a crash is timed to the first
    member declaring it dead and to every live member having done so.
    """
    net = warm_cluster(n, config, seed)
    names = _names(n)
    publisher, victims = names[0], names[1 : 1 + crashes]
    got: dict[str, float] = {}
    hops: dict[str, int] = {publisher: 0}
    dead_at: dict[str, dict[str, float]] = {v: {} for v in victims}
    false_deaths = [0]

    def listen(node: str, event: MemberEvent | RecordEvent, now: float) -> None:
        if isinstance(event, RecordEvent):
            if event.owner == publisher and event.key == "probe-me" and node not in got:
                got[node] = now
                if node != publisher:
                    hops[node] = hops[net.source] + 1 if net.source in hops else len(names)
        elif event.state == _DEAD:
            if event.name in dead_at:
                dead_at[event.name].setdefault(node, now)
            else:
                false_deaths[0] += 1

    net.listeners.append(listen)
    net.run_until(2.0)
    t0 = net.now
    net.publish(publisher, "probe-me", "v1")
    need = math.ceil(0.9999 * n)
    while len(got) < need and net.now < t0 + 30.0:
        net.run_for(config.gossip_interval / 4)
    seconds = sorted(got.values())[need - 1] - t0 if len(got) >= need else math.inf
    if progress:
        progress("spread", 1.0)

    crashed_at: dict[str, float] = {}
    start = net.now
    for i, victim in enumerate(victims):
        crashed_at[victim] = start + i * 0.5
    end = start + crashes * 0.5 + 30.0
    pending = dict(sorted(crashed_at.items(), key=lambda kv: kv[1]))
    while net.now < end:
        for victim, when in list(pending.items()):
            if when <= net.now:
                net.crash(victim)
                crashed_at[victim] = net.now
                del pending[victim]
        net.run_for(0.05)
        if not pending and all(len(d) >= n - crashes for d in dead_at.values()):
            break
        if progress:
            progress("detect", (net.now - start) / (end - start))
    first = [min(d.values()) - crashed_at[v] for v, d in dead_at.items() if d]
    every = [max(d.values()) - crashed_at[v] for v, d in dead_at.items() if len(d) >= n - crashes]
    reached = sorted(hops.values())
    rounds = reached[need - 1] if len(reached) >= need else -1
    return Spread(rounds, seconds, first, every, false_deaths[0])


def false_deaths(n: int, config: GossipConfig, seed: int, loss: float, seconds: float, progress: Progress | None = None) -> tuple[int, int]:
    """Declarations while every node runs under ``loss``: (dead, suspect) events about live members.

    Counted per observer: one member wrongly declared dead by 40 peers counts 40, so 0
    means no member ever saw a live member as dead.
    """
    net = warm_cluster(n, config, seed, LinkModel(loss=loss))
    counts = [0, 0]

    def listen(node: str, event: MemberEvent | RecordEvent, now: float) -> None:
        if isinstance(event, MemberEvent):
            if event.state == _DEAD:
                counts[0] += 1
            elif event.state == _SUSPECT:
                counts[1] += 1

    net.listeners.append(listen)
    _run(net, seconds, f"loss {loss:.0%}", progress, 0.0)
    return counts[0], counts[1]


@dataclass(slots=True)
class Bytes:
    """Anti-entropy bytes of one mode under the record-churn workload."""

    bytes_per_node_s: float
    stale_fraction_end: float
    """(node, record) pairs still behind the owner's latest version after the settle period."""
    other_bytes_per_node_s: float
    """Everything else sent meanwhile (probes, piggybacked gossip): the same in both modes."""
    counted_full_state_bytes_per_node_s: float | None
    """With ``count_full_state`` in digest mode: the full-state frames the same exchange legs would have sent."""


def antientropy_bytes(
    n: int, config: GossipConfig, seed: int, seconds: float, churn: float = 0.01, settle: float | None = None, progress: Progress | None = None
) -> Bytes:
    """Bytes of push-pull frames while ``churn`` of nodes change a record each second.

    Measured over ``seconds`` after a one-interval warm-up; then the churn stops and,
    after ``settle`` seconds (one push-pull interval by default), we count how many
    replicas are still stale: both modes must converge equally for the bytes to compare.
    """
    net = warm_cluster(n, config, seed)
    names = _names(n)
    rng = random.Random(f"workload/{seed}")  # same churn in both modes
    warm = 2.0
    net.run_until(warm)
    before = sum(node.metrics.antientropy_bytes_out for node in net.nodes.values())
    counted_before = sum(node.metrics.full_state_bytes_counted for node in net.nodes.values())
    total_before = sum(node.metrics.bytes_out for node in net.nodes.values())
    per_second = max(1, round(churn * n))
    changed: set[tuple[str, str]] = set()
    end = warm + seconds
    while net.now < end:
        second = net.now
        times = sorted(second + rng.random() for _ in range(per_second))
        for when in times:
            net.run_until(when)
            name = rng.choice(names)
            key = rng.choice(RECORD_KEYS)
            net.publish(name, key, _value(name, key, int(net.now * 1000)))
            changed.add((name, key))
        net.run_until(second + 1.0)
        if progress:
            progress("bytes " + ("full-state" if config.full_state_pushpull else "digest"), (net.now - warm) / seconds)
    after = sum(node.metrics.antientropy_bytes_out for node in net.nodes.values())
    counted = sum(node.metrics.full_state_bytes_counted for node in net.nodes.values()) - counted_before
    total_after = sum(node.metrics.bytes_out for node in net.nodes.values())
    net.run_for(config.pushpull_interval if settle is None else settle)
    # every replica starts at the owners' versions, so only records published since can be stale
    latest = [(owner, key, _version(net.nodes[owner].record(owner, key))) for owner, key in sorted(changed)]
    stale = sum(1 for node in net.nodes.values() for owner, key, version in latest if _version(node.record(owner, key)) < version)
    return Bytes(
        (after - before) / (n * seconds),
        stale / (n * n * len(RECORD_KEYS)),
        (total_after - total_before - (after - before)) / (n * seconds),
        counted / (n * seconds) if config.count_full_state and not config.full_state_pushpull else None,
    )


def _version(held: tuple[int, object] | None) -> int:
    return 0 if held is None else held[0]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.inf


def p99(xs: list[float]) -> float:
    if not xs:
        return math.inf
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
