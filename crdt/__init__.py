"""Delta-state CRDTs and the placement-claim CRDT. Knows nothing of networks or scheduling policy.

Every type is a join-semilattice with the :class:`crdt.lattices.DeltaCRDT`
interface — ``validate(other)`` (raise :class:`crdt.errors.InvalidDelta`, never
mutate), ``merge(other)`` (join in place), ``version()`` and
``delta_since(version)`` — and mutators that return small deltas. Causality
comes from the caller as dots ``(replica, seq)`` and Lamport markers, never wall
time. One file per type:

``dots``        :class:`Dot`, :class:`VersionVector` (prefix per replica plus out-of-order cloud, self-compacting)
``lww``         :class:`LWWRegister` ordered by :class:`Marker` ``(lamport, replica)``
``orset``       :class:`ORSet` add-wins, no tombstones (``dotmaps`` holds the shared dot-map join)
``ormap``       :class:`ORMap` add-wins map of multi-value registers
``pncounter``   :class:`PNCounter` (``rows``: per-writer rows, the lattice under both counters)
``escrow``      :class:`Escrow`, a bounded counter over ``Resources``: consume/transfer only rights held
``claims``      placement-claim records, the winner order :func:`rank`, ``Status``/``Change`` values
``claims_state``   :class:`ClaimsState`, the claims lattice: join, ``delta_since``, compaction
``claims_replica`` :class:`ClaimsReplica`, one agent's replica: escrow, own reservations, statuses
``wire``        compact msgpack form of claim deltas; the only trust boundary
``simulating``, ``commands``  the CRDT-only claims simulation (``fedplane bench claims --oracle-variant``)

The edge agent's API (all pure and deterministic; no clock, no I/O)::

    replica = ClaimsReplica(agent_id: str, node: str, capacity: Resources)
    replica.claim(pod_uid: str, epoch: int, score: float, request: Resources) -> ClaimDelta | Status
    replica.bind(pod_uid: str) -> ClaimDelta | Status          # only while our claim wins; final in its epoch
    replica.complete(pod_uid: str) -> ClaimDelta | Status      # bound winner finished; frees our escrow
    replica.release(pod_uid: str) -> ClaimDelta | Status       # after LOST, or after stopping the pod on EVICT
    replica.bump_epoch(pod_uid: str) -> tuple[int, ClaimDelta] | Status   # re-place: the node was declared dead
    replica.merge(delta: ClaimDelta) -> tuple[Change, ...]     # raises InvalidDelta, state untouched
    replica.winner(pod_uid) -> Claim | None;  replica.epoch(pod_uid) -> int
    replica.pending_releases() -> list[str];  replica.pods_on(node) -> list[str];  replica.free() -> Resources
    replica.version() -> VersionVector;  replica.has_news_for(seen) -> bool
    replica.state_delta_since(seen: VersionVector) -> ClaimDelta;  replica.full_state() -> ClaimDelta
    replica.compact(stable: VersionVector) -> int              # stable = VersionVector.meet(all members' versions)
    replica.finished_pods() -> tuple[str, ...];  replica.is_finished(pod_uid) -> bool
    ClaimsReplica.restore(agent_id, node, capacity, state: ClaimDelta, finished=()) -> ClaimsReplica
                                                               # state = full_state(): restart without a journal
    wire.encode_delta(delta) -> bytes;  wire.decode_delta(data, max_bytes=wire.MAX_RECORD_BYTES) -> ClaimDelta
    wire.encode_version(vv) -> bytes;   wire.decode_version(data) -> VersionVector

Every ``ClaimDelta`` a mutator returns must be gossiped to all peers; ``merge``
returns ``Change(pod, LOST)`` (release now) or ``Change(pod, EVICT)`` (stop the
pod, then release). Binding policy is the agent's: bind after the claim has
kept winning for a while with a majority of peers reachable (see
``fedplane.lab.sims.claimsim``); concurrent bindings in one epoch are still resolved
deterministically, the lower-ranked binder evicting.
"""

from crdt.claims import Change, ChangeKind, Claim, ClaimDelta, EpochMark, Status, StatusCode, rank
from crdt.claims_replica import ClaimsReplica
from crdt.claims_state import ClaimsState
from crdt.dots import Dot, VersionVector
from crdt.errors import InvalidDelta
from crdt.escrow import Escrow
from crdt.lattices import DeltaCRDT, apply, join
from crdt.lww import LWWRegister, Marker
from crdt.ormap import ORMap
from crdt.orset import ORSet
from crdt.pncounter import PNCounter

__all__ = [
    "Change", "ChangeKind", "Claim", "ClaimDelta", "ClaimsReplica", "ClaimsState", "DeltaCRDT", "Dot", "EpochMark", "Escrow",
    "InvalidDelta", "LWWRegister", "Marker", "ORMap", "ORSet", "PNCounter", "Status", "StatusCode",
    "VersionVector", "apply", "join", "rank",
]
