"""Figures of the CRDT-only claims simulation (:mod:`fedplane.lab.sims.claimsim`): the labelled oracle variant
that ``fedplane bench claims --oracle-variant`` prints beside the agents' figures."""

from __future__ import annotations

import time
from typing import Any

from crdt import wire
from crdt.claims_replica import ClaimsReplica
from fedplane.lab.sims.claimsim import SimConfig, SimResult, Simulation

SAFETY = ("double_bookings", "overcommits", "stale_epoch_wins")
"""Counters that must be zero."""
INCIDENTS = ("bind_conflicts", "completed_elsewhere", "transient_double_runs", "stale_evictions", "replaced_pods",
             "escrow_refusals", "rejected_deltas", "unplaced")
"""Counters worth seeing."""


def wire_figures(sample: list[bytes], capacity_of: ClaimsReplica) -> dict[str, float]:
    """Replay a run's delta bytes into a fresh replica: decode+validate+merge rate, and merge-only rate.

    Every delta is new to the fresh replica, so this is the costly path (no duplicates).
    Rates are per second of this thread's CPU time, like ``merges_per_s``.
    """
    observer = ClaimsReplica("observer", "observer-node", capacity_of.capacity)
    start = time.thread_time()
    for data in sample:
        observer.merge(wire.decode_delta(data))
    wire_seconds = time.thread_time() - start
    decoded = [wire.decode_delta(data) for data in sample]
    fresh = ClaimsReplica("observer", "observer-node", capacity_of.capacity)
    start = time.thread_time()
    for delta in decoded:
        fresh.merge(delta)
    merge_seconds = time.thread_time() - start
    return {
        "fresh_merges_per_s": round(len(sample) / merge_seconds),
        "wire_decode_merges_per_s": round(len(sample) / wire_seconds),
    }


def figures(result: SimResult, sim: Simulation) -> dict[str, Any]:
    """One seed's figures. Full-state bytes: what a state-based CRDT would ship for the same updates
    (the sender's encoded state at each update), per claim; delta bytes: the encoded deltas, per claim."""
    return {
        "merges_per_s": round(result.merges / result.merge_seconds),
        "merges_per_s_wall": round(result.merges / result.merge_wall_seconds),
        **wire_figures(result.sample, sim.agents[0].replica),
        "delta_bytes_per_claim": round(result.delta_bytes / max(result.claims, 1), 1),
        "fullstate_bytes_per_claim": round(result.fullstate_bytes / max(result.claims, 1), 1),
        "rounds_to_converge_after_heal": result.rounds_to_converge_after_heal,
        "rounds_to_converge_after_return": result.rounds_to_converge_after_return,
        "claims": result.claims,
        "merges": result.merges,
        "rounds": result.rounds,
        "quiesced": result.quiesced,
        **{name: getattr(result, name) for name in SAFETY + INCIDENTS},
    }


def oracle_variant(agents: int, pods: int, seed: int) -> dict[str, Any]:
    """The CRDT alone under the simulation's toy policy, binding only when a quorum oracle (the
    simulator's ground truth of who is reachable) says so: a comparison variant, labelled as such.
    The product's figures come from ``fedplane.lab.benches.claimsbench``, through the agents' own placement core."""
    sim = Simulation(SimConfig(agents=agents, pods=pods, seed=seed))
    result = sim.run()
    return {"policy": "toy (claim when offered, bind after 4 winning rounds)", "oracle": True,
            "oracle_is": "quorum from the simulator's topology, which real agents cannot see",
            **figures(result, sim)}
