"""``fedplane bench claims``: the agents' own placement cores place pods through the claims CRDT.

What runs is what ships: every agent is an :class:`edgeagent.placing.Placer` over its
:class:`edgeagent.ledger.Ledger` (the agent's claims replica and its journal), deciding with
only what reaches it — pod updates from the back end, its peers' claim records (lost,
delayed, reordered) and death notices. Nothing decides for it: no quorum oracle, no
shared view, no toy claim-and-bind rule. The network, clock and back end are
:class:`fedplane.lab.sims.placementsim.PlacementSim`'s (deterministic and seeded; the back end is the
in-memory cluster, which fences binds by epoch as every back end must); each agent takes the
records and watch events that reached it once per gossip round, in arrival order, as the
daemon takes a gossip packet's records in one loop turn. Pods arrive at
``rate`` per second and finish after an exponential lifetime; one agent is killed a third
of the way through (its peers hear of it ``detect`` seconds later and re-place its pods at
a bumped epoch) and restarted from its journal later, coming back with stale bindings.

Figures: ``merges_per_s`` replays the claims records the agents published into one fresh
replica and divides by the thread CPU time of the batch (one core's work, whatever else the
host runs); ``merges_per_s_in_run`` times each merge the agents made in place, which adds two
clock reads to each few-microsecond call, so it reads low. The safety
counters come from sampling every agent each simulated second and auditing every replica
at the end on the records that had reached it (:func:`_audit`: the run stops at a fixed
time, so a replica still missing a record is lagging, not wrong). ``fedplane.lab.sims.claimsim`` (the CRDT alone, a toy policy and a quorum oracle) can run
beside it as a labelled variant.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crdt import wire
from crdt.claims import COMPLETED, RELEASED, ClaimDelta
from crdt.claims_replica import ClaimsReplica
from crdt.errors import InvalidDelta
from edgeagent import records
from edgeagent.effects import Effect, Publish
from edgeagent.placing import Placer
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import GpuRequest, Resources
from fedplane.lab.sims.placementsim import PlacementSim
from gossip.config import GossipConfig

GOSSIP = GossipConfig()
"""The agents' gossip defaults: the push-pull interval at which lost records are repaired."""
NODE = (32000, 65536, 4)
"""Every agent's node: 32 cores, 64 GiB, 4 GPUs."""
SAMPLE_EVERY = 1.0
"""Simulated seconds between safety samples (and full-state size samples for the bytes figure)."""
FULLSTATE_EVERY = 5
"""Samples between two measures of each agent's full state (encoding it is the bench's costliest step)."""
DRAIN_S = 30.0
"""Simulated seconds after the last arrival for lifetimes to end and the cores to settle."""
TIME_EVERY = 8
"""Every this many merges in the run, one is timed (the in-run figure is a sample)."""
REPLAY_MAX = 200_000
"""Records kept for the merge replay (~60 bytes each)."""
REPLAY_PASSES = 3
SIM_GC_THRESHOLD = 50_000
"""The collector's generation-0 threshold while the simulated agents run (the interpreter's is 700):
N agents in one process allocate millions of short-lived records, and at the default 64 x 1,000
spent 12 of 40 CPU seconds in the collector (30 s in all at this threshold). Each real agent is its
own small process; the merge replay runs under the interpreter's own thresholds again."""


@dataclass(frozen=True, slots=True)
class ClaimsBench:
    agents: int = 64
    pods: int = 10000
    seed: int = 1
    rate: float = 100.0
    """Pod arrivals per simulated second."""
    life: float = 8.0
    """Mean pod lifetime in simulated seconds (exponential)."""
    loss: float = 0.02
    """Share of claim records lost on the way to each peer (anti-entropy is the gossip layer's, not here)."""
    detect: float = 1.0
    """Seconds from a kill to its peers' death notice."""


@dataclass(slots=True)
class _Counts:
    merges: int = 0
    timed_merges: int = 0
    merge_seconds: float = 0.0
    claims_published: int = 0
    delta_bytes: int = 0
    fullstate_bytes: int = 0
    double_bookings: set[str] = field(default_factory=set)
    transient_double_runs: int = 0
    overcommitted: set[str] = field(default_factory=set)
    stale_epoch_wins: int = 0
    fullstate_size: dict[str, int] = field(default_factory=dict)
    published: list[bytes] = field(default_factory=list)
    """Claims records as the agents published them (the first REPLAY_MAX), for the merge replay."""


def _pods(bench: ClaimsBench) -> list[tuple[float, Pod, float]]:
    """(arrival, pod, lifetime) for every pod, from the seed: requests shaped like a mixed edge fleet's."""
    rng = random.Random(f"claims-workload/{bench.seed}")
    out = []
    for i in range(bench.pods):
        gpu = rng.choice((0, 0, 0, 0, 250, 500, 1000))
        pod = Pod(f"pod-{i:06d}", rng.choice((250, 500, 1000, 2000, 4000)), rng.choice((256, 512, 1024, 4096)),
                  gpu=GpuRequest(1, gpu) if gpu else GpuRequest())
        out.append((i / bench.rate, pod, rng.expovariate(1.0 / bench.life)))
    return out


def _timed_merges(counts: _Counts) -> Callable[[Placer], None]:
    """Wrap each booted agent's replica ``merge`` so merges are counted and every ``TIME_EVERY``-th is timed
    (two clock reads per call of a few microseconds would slow the whole run by a tenth)."""
    def instrument(placer: Placer) -> None:
        replica = placer.ledger.replica
        merge = replica.merge
        clock = time.thread_time  # CPU time: a busy host preempting the bench must not count as merging

        def timed(delta: ClaimDelta) -> Any:
            counts.merges += 1
            if counts.merges % TIME_EVERY:
                return merge(delta)
            start = clock()
            try:
                return merge(delta)
            finally:
                counts.merge_seconds += clock() - start
                counts.timed_merges += 1

        replica.merge = timed  # type: ignore[method-assign]
    return instrument


def _count_records(counts: _Counts) -> Callable[[str, list[Effect]], None]:
    """Delta bytes of every claims record published, and what a state-based CRDT would ship instead."""
    def observe(agent: str, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Publish) and isinstance(effect.value, bytes) and records.pod_of(effect.key):
                counts.claims_published += 1
                counts.delta_bytes += len(effect.value)
                counts.fullstate_bytes += counts.fullstate_size.get(agent, len(effect.value))
                if len(counts.published) < REPLAY_MAX:
                    counts.published.append(effect.value)
    return observe


def replay_merges(published: list[bytes], passes: int = REPLAY_PASSES) -> tuple[float, int]:
    """Merge the agents' records, in publication order, into a fresh replica: merges per CPU second over
    the batch (every record is new to it: the costly path), the fastest of ``passes`` passes each into
    its own fresh replica (as ``timeit`` reports its best: the slower ones measure a busy host's
    shared core and caches, not the merge), and how many the replica rejected."""
    decoded = [wire.decode_delta(data) for data in published]
    best, rejected = float("inf"), 0
    for _ in range(passes):
        observer = ClaimsReplica("observer", "observer-node", Resources(*NODE[:2], 0, NODE[2] * 1000))
        rejected = 0
        start = time.thread_time()
        for delta in decoded:
            try:
                observer.merge(delta)
            except InvalidDelta:
                rejected += 1
        best = min(best, time.thread_time() - start)
    return (len(decoded) / best if 0 < best < float("inf") else 0.0), rejected


def _sample(sim: PlacementSim, counts: _Counts, full_state: bool) -> None:
    """Who runs what, in every live agent's view, and whose escrow or node is over capacity
    (with ``full_state``, also each agent's encoded full state: what a state-based CRDT would ship)."""
    holders: dict[str, int] = {}
    for name, placer in sim.agents.items():
        if name in sim.down:
            continue
        if full_state:
            counts.fullstate_size[name] = len(wire.encode_delta(placer.ledger.replica.full_state()))
        if not placer.ledger.replica.free().is_nonnegative():
            counts.overcommitted.add(name)
        for uid in placer.running:
            holders[uid] = holders.get(uid, 0) + 1
    counts.transient_double_runs = max(counts.transient_double_runs, sum(n > 1 for n in holders.values()))
    counts.overcommitted.update(sim.cluster.overcommitted_nodes())


def _audit(sim: PlacementSim, counts: _Counts) -> dict[str, int]:
    """At the end, each replica judged on what has reached it: the bench stops at a fixed time, not at quiescence.

    For each unfinished pod, the live replicas that hold every record any live replica holds for it (its top
    epoch and the newest version of each of its claims) must name the same winner, at that top epoch. A replica
    still missing one of the pod's records (lost on the way and waiting for push-pull, or published in the last
    gossip round and still in flight) names what its own records say, an older epoch's winner included: that is
    lag, counted in ``lagging_pods``, not a fault, as such a replica decides nothing for the pod (only a claim's
    owner binds it, the back end fences the bind, and the owner runs it under its own view, judged next). What
    runs is judged over every live agent: two agents running the pod is a double booking, and an agent running it
    although its own replica has seen its claim displaced (a higher epoch: a stale-epoch win; another node at its
    epoch: a double booking) is a fault whatever the others know."""
    live = [p for name, p in sim.agents.items() if name not in sim.down]
    replicas = [p.ledger.replica for p in live]
    uids: set[str] = set()
    for replica in replicas:
        uids.update(replica.pods())
    undecided = lagging = 0
    for uid in sorted(uids):
        if all(r.is_finished(uid) or ((w := r.winner(uid)) is not None and w.completed) for r in replicas):
            continue
        runners = [p for p in live if uid in p.running]
        if len(runners) > 1:
            counts.double_bookings.add(uid)
        for placer in runners:
            displaced = _displaced(placer, uid)
            if displaced == "epoch":
                counts.stale_epoch_wins += 1
            elif displaced == "node":
                counts.double_bookings.add(uid)
        views = [r for r in replicas if not r.is_finished(uid)]
        current = _current(views, uid)
        if len(current) < len(views):
            lagging += 1
            if not current:  # each replica misses a record another holds: nothing to judge yet but what runs
                continue
        winners = {r.winner(uid) for r in current}
        if len({None if w is None else (w.node, w.epoch) for w in winners}) > 1:
            counts.double_bookings.add(uid)  # the same records, yet two different claims win
        held = [w for w in winners if w is not None]
        if not held:
            undecided += 1
            continue
        winner = max(held, key=lambda w: w.flags)
        if not winner.flags & (COMPLETED | RELEASED) and winner.epoch < current[0].epoch(uid):
            counts.stale_epoch_wins += 1
    return {"undecided_pods": undecided, "lagging_pods": lagging}


def _current(replicas: list[ClaimsReplica], uid: str) -> list[ClaimsReplica]:
    """The replicas holding everything any of ``replicas`` holds for ``uid``: its top epoch and the newest
    version of each of its claims (only those decide the winner, so these replicas must agree on it)."""
    top = max(r.epoch(uid) for r in replicas)
    newest: dict[tuple[int, str], int] = {}
    held = [{(c.epoch, c.node): c.seq for c in r.claims(uid)} for r in replicas]
    for seqs in held:
        for key, seq in seqs.items():
            newest[key] = max(newest.get(key, 0), seq)
    return [r for r, seqs in zip(replicas, held) if r.epoch(uid) == top
            and all(seqs.get(key, 0) >= seq for key, seq in newest.items())]


def _displaced(placer: Placer, uid: str) -> str:
    """Why ``placer`` should no longer run ``uid`` by its own replica: "epoch" (a higher epoch has reached it),
    "node" (another node's claim wins at its epoch) or "" (its claim still wins)."""
    replica = placer.ledger.replica
    winner = replica.winner(uid)
    if winner is not None and winner.node == placer.node.name:
        return ""
    mine = max((c.epoch for c in replica.claims(uid) if c.node == placer.node.name), default=0)
    return "epoch" if replica.epoch(uid) > mine else "node"


def run(bench: ClaimsBench, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One seeded run; returns the report as a JSON-able dict."""
    counts = _Counts()
    nodes = [Node(f"agent-{i:03d}", NODE[0], NODE[1], gpus=NODE[2]) for i in range(bench.agents)]
    sim = PlacementSim(nodes, seed=bench.seed, loss=bench.loss, detect=bench.detect, pushpull=GOSSIP.pushpull_interval,
                       rounds=GOSSIP.gossip_interval, tombstone_ttl=GOSSIP.tombstone_ttl,
                       on_boot=_timed_merges(counts), on_effects=_count_records(counts))
    workload = _pods(bench)
    for arrival, pod, life in workload:
        sim.at(arrival, lambda pod=pod: sim.cluster.submit(pod))
        sim.at(arrival + life, lambda uid=pod.uid: _finish_when_running(sim, uid))
    arrivals_end = workload[-1][0] if workload else 0.0
    victim = nodes[len(nodes) // 2].name
    sim.at(arrivals_end / 3, lambda: sim.kill(victim))
    sim.at(arrivals_end / 3 + 15.0, lambda: sim.revive(victim))
    end = arrivals_end + DRAIN_S
    started, cpu0 = time.perf_counter(), time.process_time()
    thresholds = gc.get_threshold()
    gc.set_threshold(SIM_GC_THRESHOLD, *thresholds[1:])
    try:
        t = 0.0
        while t < end:
            t = min(end, t + SAMPLE_EVERY)
            sim.run(t)
            _sample(sim, counts, full_state=round(t / SAMPLE_EVERY) % FULLSTATE_EVERY == 1)
            if progress is not None:
                progress(t / end)
    finally:
        gc.set_threshold(*thresholds)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    replay_rate, rejected = replay_merges(counts.published)
    settled = _audit(sim, counts)
    placed = sum(1 for p in sim.cluster.pods.values() if p.placement is not None or p.phase.finished)
    decisions = sorted(d.seconds for d in sim.cluster.evidence.decisions)
    placers = [p for n, p in sim.agents.items() if n not in sim.down]
    return {
        "policy": "agents",
        "oracle": False,
        "placement_core": "edgeagent.placing.Placer over edgeagent.ledger.Ledger (the agent's own)",
        "backend": "in-memory cluster (fedplane.lab.doubles.memcluster), epoch-fenced binds",
        "network": f"deterministic, seeded: {bench.loss:.0%} of records lost, 2-20 ms delays (reordering), each agent "
                   f"taking what reached it once per gossip round ({GOSSIP.gossip_interval * 1000:g} ms, each agent its own "
                   f"phase), push-pull anti-entropy every {GOSSIP.pushpull_interval:g} s",
        "failure_detector": f"death notice {bench.detect:g} s after a kill (one agent killed, restarted from its journal)",
        "agents": bench.agents,
        "pods": bench.pods,
        "merges_per_s": round(replay_rate),
        "merges_counted_as": ("the claims records the agents published in this run, merged in publication order into a fresh "
                              "replica (ClaimsReplica.merge, every record new to it), per thread CPU second over the batch; "
                              f"the fastest of {REPLAY_PASSES} passes, each into its own fresh replica"),
        "replay_records": len(counts.published),
        "replay_rejected": rejected,
        "merges_per_s_in_run": round(counts.timed_merges / counts.merge_seconds) if counts.merge_seconds else 0,
        "merges_in_run_counted_as": (f"thread CPU time around every {TIME_EVERY}th ClaimsReplica.merge call the agents made "
                                     "in the run (two clock reads per call of a few microseconds: a lower bound)"),
        "merges": counts.merges,
        "delta_bytes_per_claim": round(counts.delta_bytes / max(counts.claims_published, 1), 1),
        "fullstate_bytes_per_claim": round(counts.fullstate_bytes / max(counts.claims_published, 1), 1),
        "claims_records": counts.claims_published,
        "claims": sum(p.counters.claims for p in placers),
        "binds": len(sim.cluster.evidence.decisions),
        "double_bookings": len(counts.double_bookings),
        "overcommits": len(counts.overcommitted),
        "stale_epoch_wins": counts.stale_epoch_wins,
        "safety_counted_as": ("sampled each simulated second: over-commits (an escrow or a node over capacity), transient "
                              "double runs; at the end, double bookings (two agents running a pod, or an agent running one "
                              "its own replica gives to another node's claim at its epoch, or replicas holding the same "
                              "records naming different winners) and stale-epoch wins (an agent running a pod under a claim "
                              "below an epoch its own replica holds, or replicas holding every record of a pod naming a "
                              "winner below its top epoch); a replica still missing one of a pod's records at the end "
                              "counts the pod in lagging_pods"),
        "transient_double_runs": counts.transient_double_runs,
        "stale_evictions": len(sim.evictions),
        "replaced_pods": sum(p.counters.replaced for p in placers),
        "refused_binds": sum(p.counters.refused_binds for p in placers),
        "unplaced": len(sim.cluster.pods) - placed,
        **settled,
        "decision_s_p50": round(decisions[len(decisions) // 2], 3) if decisions else None,
        "decision_s_p99": round(decisions[min(len(decisions) - 1, math.ceil(0.99 * len(decisions)) - 1)], 3) if decisions else None,
        "simulated_s": round(end, 1),
        "sim_wall_s": round(wall, 1),
        "sim_cpu_s": round(cpu, 1),
        "seed": bench.seed,
    }


def _finish_when_running(sim: PlacementSim, uid: str) -> None:
    """End a pod's life; one still pending (or re-placed) lives on until it has run, checked each second."""
    held = sim.cluster.pods.get(uid)
    if held is None or held.phase.finished:
        return
    if not sim.cluster.finish(uid):
        sim.at(sim.now + 1.0, lambda: _finish_when_running(sim, uid))
