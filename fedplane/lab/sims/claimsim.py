"""A seeded, round-based simulation of edge agents placing pods through the claims CRDT.

The network is in-memory and hostile in the usual ways: every delta goes to
every peer with a random delay (reordering), some copies are lost and some
duplicated; a minority partition cuts the cluster for a while; one node is
isolated, declared dead, its pods re-placed at a bumped epoch, and then it
returns with its stale bindings. Agents pull from one random peer per round
(anti-entropy) to repair losses. The agent policy here is the simplest one the
CRDT supports: claim when offered, bind after winning for ``bind_after`` rounds
and only on the majority side, release on ``LOST``/``EVICT``.

Everything is a function of the seed; nothing reads a clock except the timers
around ``merge`` that measure throughput.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from crdt import wire
from crdt.claims import COMPLETED, RELEASED, ChangeKind, ClaimDelta, Status, StatusCode
from crdt.claims_replica import ClaimsReplica
from crdt.dots import VersionVector
from crdt.errors import InvalidDelta
from fedcore.resources import Resources


@dataclass(frozen=True, slots=True)
class SimConfig:
    agents: int = 64
    pods: int = 10000
    seed: int = 1
    candidates: int = 3
    """Agents offered a pending pod each time it is offered."""
    arrival_rounds: int = 20
    reoffer_every: int = 4
    """Rounds between offers of a pod that is still not bound."""
    max_delay: int = 2
    loss: float = 0.02
    duplication: float = 0.02
    bind_after: int = 4
    """Rounds a claim must keep winning in its owner's view before the owner binds."""
    partition: tuple[int, int] = (4, 12)
    """Rounds ``[start, heal)`` during which a minority is cut off."""
    minority: float = 0.25
    isolation: tuple[int, int] = (26, 38)
    """Rounds ``[start, return)`` during which one node is unreachable (and declared dead)."""
    detect_after: int = 2
    finite_share: float = 0.5
    """Share of pods that complete; the rest run to the end."""
    run_rounds: tuple[int, int] = (5, 30)
    anti_entropy_every: int = 2
    """Rounds between push-pull exchanges (each agent with one random peer)."""
    compact_every: int = 10
    max_rounds: int = 400
    headroom: float = 1.25
    """Node capacity as a multiple of the mean per-node request of all pods."""


@dataclass(slots=True)
class SimResult:
    """Counters and figures of one run; safety counters must be zero."""

    rounds: int = 0
    quiesced: bool = False
    claims: int = 0
    updates: int = 0
    merges: int = 0
    merge_seconds: float = 0.0
    """CPU time of this thread inside ``merge``: one core's work, whatever else the machine runs."""
    merge_wall_seconds: float = 0.0
    delta_bytes: int = 0
    fullstate_bytes: int = 0
    rounds_to_converge_after_heal: int = -1
    rounds_to_converge_after_return: int = -1
    double_bookings: int = 0
    overcommits: int = 0
    stale_epoch_wins: int = 0
    unplaced: int = 0
    escrow_refusals: int = 0
    bind_conflicts: int = 0
    """Evictions of a binding by a concurrent, higher-ranked binding in the same epoch."""
    completed_elsewhere: int = 0
    """Evictions of a re-placed copy because the original run turned out to have completed."""
    stale_evictions: int = 0
    replaced_pods: int = 0
    transient_double_runs: int = 0
    pruned_pods: int = 0
    rejected_deltas: int = 0
    sample: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class _Agent:
    replica: ClaimsReplica
    won_at: dict[str, int] = field(default_factory=dict)
    """Pods our claim is winning, and the round it was made."""
    running: set[str] = field(default_factory=set)


class Simulation:
    """One seeded run; :meth:`run` returns a :class:`SimResult`."""

    def __init__(self, config: SimConfig) -> None:
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.result = SimResult()
        self.requests = [self._request() for _ in range(config.pods)]
        self.finite = [self.rng.random() < config.finite_share for _ in range(config.pods)]
        total = Resources()
        for r in self.requests:
            total = total + r
        scale = config.headroom / config.agents
        self.capacity = Resources(*(int(v * scale) + 1 for v in total.as_tuple()))
        self.agents = [
            _Agent(ClaimsReplica(f"agent-{i:04d}", f"node-{i:04d}", self.capacity)) for i in range(config.agents)
        ]
        self.inbox: dict[int, list[list[ClaimDelta]]] = {}
        self.inflight = 0
        self.unplaced: dict[str, int] = {}
        """Pod uid -> next round it is offered."""
        self.completions: dict[int, list[tuple[int, str]]] = defaultdict(list)
        self.running: dict[str, set[int]] = defaultdict(set)
        """Ground truth the CRDT never sees: which agents run each pod now."""
        self.round = 0
        self.minority = set(self.rng.sample(range(config.agents), int(config.agents * config.minority)))
        self.victim = self.rng.choice([i for i in range(config.agents) if i not in self.minority])
        self.heal_target: VersionVector | None = None
        self.return_target: VersionVector | None = None
        self._peers: dict[int, list[int]] = {}
        """Reachable peers of each sender this round (the topology only changes between rounds)."""
        self._fullstate_size = 0
        """Encoded full state of agent 0 this round: what a state-based CRDT ships per update."""

    # ---- topology ------------------------------------------------------------

    def _partitioned(self) -> bool:
        start, heal = self.cfg.partition
        return start <= self.round < heal

    def _isolated(self, i: int) -> bool:
        start, back = self.cfg.isolation
        return i == self.victim and start <= self.round < back

    def _reachable(self, a: int, b: int) -> bool:
        if self._isolated(a) or self._isolated(b):
            return False
        return not self._partitioned() or ((a in self.minority) == (b in self.minority))

    def _has_quorum(self, i: int) -> bool:
        """Agent policy: bind only when a majority of the cluster is reachable."""
        return not self._isolated(i) and not (self._partitioned() and i in self.minority)

    # ---- network -------------------------------------------------------------

    def _broadcast(self, src: int, delta: ClaimDelta) -> None:
        data = wire.encode_delta(delta)
        self.result.updates += 1
        self.result.delta_bytes += len(data)
        self.result.fullstate_bytes += self._fullstate_size
        if len(self.result.sample) < 20000:
            self.result.sample.append(data)
        rnd, cfg, inbox = self.rng.random, self.cfg, self.inbox
        peers = self._peers.get(src)
        if peers is None:
            peers = self._peers[src] = [d for d in range(cfg.agents) if d != src and self._reachable(src, d)]
        for dst in peers:
            copies = 2 if rnd() < cfg.duplication else 1
            for _ in range(copies):
                u = rnd()
                if u < cfg.loss:
                    continue
                at = self.round + 1 + int((u - cfg.loss) / (1 - cfg.loss) * (cfg.max_delay + 1))
                boxes = inbox.get(at)
                if boxes is None:
                    boxes = inbox[at] = [[] for _ in range(cfg.agents)]
                boxes[dst].append(delta)
                self.inflight += 1

    def _send(self, src: int, outcome: ClaimDelta | Status) -> bool:
        if isinstance(outcome, Status):
            return False
        self._broadcast(src, outcome)
        return True

    # ---- one round -------------------------------------------------------------

    def _deliver(self) -> None:
        boxes = self.inbox.pop(self.round, None)
        if boxes is None:
            return
        for i, box in enumerate(boxes):
            self.inflight -= len(box)
            if not box or self._isolated(i):
                continue
            merge = self.agents[i].replica.merge
            outcomes = []
            wall, cpu = time.perf_counter(), time.thread_time()
            for delta in box:
                try:
                    outcomes.append(merge(delta))
                except InvalidDelta:  # a bug, never expected here: counted, not hidden
                    self.result.rejected_deltas += 1
            self.result.merge_seconds += time.thread_time() - cpu
            self.result.merge_wall_seconds += time.perf_counter() - wall
            self.result.merges += len(box)
            for changes in outcomes:
                for change in changes:
                    self._on_change(i, change.pod, change.kind)

    def _anti_entropy(self) -> None:
        cfg = self.cfg
        for i in range(cfg.agents):
            peer = self.rng.randrange(cfg.agents)
            if peer == i or not self._reachable(i, peer):
                continue
            self._pull(i, peer)
            self._pull(peer, i)

    def _pull(self, i: int, peer: int) -> None:
        """``i`` sends its version to ``peer`` and merges the reply: one direction of push-pull."""
        mine, theirs = self.agents[i].replica, self.agents[peer].replica
        seen = mine.version()
        if theirs.has_news_for(seen):
            for change in mine.merge(theirs.state_delta_since(seen)):
                self._on_change(i, change.pod, change.kind)

    def _on_change(self, i: int, pod: str, kind: ChangeKind) -> None:
        agent = self.agents[i]
        agent.won_at.pop(pod, None)
        if kind is ChangeKind.EVICT:
            replica = agent.replica
            winner = replica.winner(pod)
            mine = [c for c in replica.claims(pod) if c.agent == replica.agent_id and not c.released]
            if winner is not None and winner.completed:
                self.result.completed_elsewhere += 1
            elif any(c.epoch < replica.epoch(pod) for c in mine):
                self.result.stale_evictions += 1
            else:
                self.result.bind_conflicts += 1
            agent.running.discard(pod)
            self.running[pod].discard(i)
        self._send(i, agent.replica.release(pod))

    def _offer(self) -> None:
        cfg = self.cfg
        eligible = [i for i in range(cfg.agents) if not self._isolated(i)]
        for uid, due in list(self.unplaced.items()):
            if due > self.round:
                continue
            self.unplaced[uid] = self.round + cfg.reoffer_every
            request = self.requests[int(uid[4:])]
            for i in self.rng.sample(eligible, min(cfg.candidates, len(eligible))):
                replica = self.agents[i].replica
                outcome = replica.claim(uid, replica.epoch(uid), self.rng.random(), request)
                if self._send(i, outcome):
                    self.result.claims += 1
                    self.agents[i].won_at[uid] = self.round
                elif isinstance(outcome, Status) and outcome.code is StatusCode.INSUFFICIENT_ESCROW:
                    self.result.escrow_refusals += 1
                elif isinstance(outcome, Status) and outcome.code is StatusCode.COMPLETED:
                    del self.unplaced[uid]  # re-placed, but the original run turned out to have finished
                    break

    def _bind(self) -> None:
        cfg = self.cfg
        for i, agent in enumerate(self.agents):
            if not self._has_quorum(i):
                for uid in agent.won_at:  # the window restarts once a majority is back in reach
                    agent.won_at[uid] = self.round
                continue
            ready = [uid for uid, at in agent.won_at.items() if self.round - at >= cfg.bind_after]
            for uid in ready:
                del agent.won_at[uid]
                if not self._send(i, agent.replica.bind(uid)):
                    continue
                self.unplaced.pop(uid, None)
                agent.running.add(uid)
                self.running[uid].add(i)
                if self.finite[int(uid[4:])]:
                    self.completions[self.round + self.rng.randint(*cfg.run_rounds)].append((i, uid))

    def _complete(self) -> None:
        for i, uid in self.completions.pop(self.round, []):
            agent = self.agents[i]
            if uid in agent.running and self._send(i, agent.replica.complete(uid)):
                agent.running.discard(uid)
                self.running[uid].discard(i)

    def _replace_victim(self) -> None:
        """A majority agent declares the isolated node dead and bumps its pods' epochs."""
        replacer = next(i for i in range(self.cfg.agents) if i != self.victim and i not in self.minority)
        replica = self.agents[replacer].replica
        for uid in replica.pods_on(self.agents[self.victim].replica.node):
            bumped = replica.bump_epoch(uid)
            if not isinstance(bumped, Status) and self._send(replacer, bumped[1]):
                self.result.replaced_pods += 1
                self.unplaced[uid] = self.round

    def _compact(self) -> None:
        stable = VersionVector.meet(a.replica.version() for a in self.agents)
        pruned = [a.replica.compact(stable) for a in self.agents]
        self.result.pruned_pods = max(self.result.pruned_pods, pruned[0])

    def _covers_all(self, target: VersionVector, who: Callable[[int], bool]) -> bool:
        return all(a.replica.version().dominates(target) for i, a in enumerate(self.agents) if who(i))

    def _union(self) -> VersionVector:
        union = VersionVector()
        for agent in self.agents:
            union.merge(agent.replica.version())
        return union

    def _track_convergence(self) -> None:
        cfg = self.cfg
        if self.round == cfg.partition[1]:
            self.heal_target = self._union()
        if self.round == cfg.isolation[1]:
            self.return_target = self._union()
        if self.heal_target is not None and self._covers_all(self.heal_target, lambda i: not self._isolated(i)):
            self.result.rounds_to_converge_after_heal = self.round - cfg.partition[1]
            self.heal_target = None
        if self.return_target is not None and self._covers_all(self.return_target, lambda i: True):
            self.result.rounds_to_converge_after_return = self.round - cfg.isolation[1]
            self.return_target = None

    def _quiet(self) -> bool:
        cfg = self.cfg
        if self.round < max(cfg.arrival_rounds, cfg.partition[1], cfg.isolation[1]) or self.inflight:
            return False
        if self.unplaced or any(a.won_at or a.replica.pending_releases() for a in self.agents):
            return False
        if self.heal_target is not None or self.return_target is not None:
            return False
        first = self.agents[0].replica.version()
        return all(a.replica.version() == first for a in self.agents[1:])

    def step(self) -> None:
        cfg = self.cfg
        self._peers = {}
        self._fullstate_size = len(wire.encode_delta(self.agents[0].replica.full_state()))
        self._deliver()
        if self.round % cfg.anti_entropy_every == 0:
            self._anti_entropy()
        per_round = -(-cfg.pods // cfg.arrival_rounds)
        for n in range(self.round * per_round, min(cfg.pods, (self.round + 1) * per_round)):
            self.unplaced[f"pod-{n:08d}"] = self.round
        if self.round == cfg.isolation[0] + cfg.detect_after:
            self._replace_victim()
        self._offer()
        self._bind()
        self._complete()
        if self.round % cfg.compact_every == cfg.compact_every - 1:
            self._compact()
        self._track_convergence()
        self.result.transient_double_runs = max(
            self.result.transient_double_runs, sum(len(nodes) > 1 for nodes in self.running.values())
        )
        self.round += 1

    def run(self, progress: Callable[..., object] | None = None) -> SimResult:
        """Step until quiescent (or ``max_rounds``), then audit; ``progress(completed=round)`` per round."""
        while self.round < self.cfg.max_rounds:
            self.step()
            if progress is not None:
                progress(completed=self.round)
            if self._quiet():
                self.result.quiesced = True
                break
        self.result.rounds = self.round
        self.result.unplaced = len(self.unplaced)
        self._compact()
        self._audit()
        return self.result

    # ---- the safety audit ----------------------------------------------------

    def _audit(self) -> None:
        """Count double bookings, over-commits and stale-epoch wins in the final state."""
        res = self.result
        replicas = [a.replica for a in self.agents]
        reference = replicas[0]
        committed: dict[str, Resources] = defaultdict(Resources)
        uids = set(reference.pods())
        for replica in replicas[1:]:
            uids |= set(replica.pods())
        for uid in sorted(uids):
            if all(r.is_finished(uid) or (w := r.winner(uid)) is not None and w.completed for r in replicas):
                continue  # completed everywhere (some replicas have compacted it away)
            winners = {r.winner(uid) for r in replicas}
            records = reference.claims(uid)
            live_bound = {c.node for c in records if c.bound and not c.released}
            top_epoch = reference.epoch(uid)
            if len(winners) > 1 or len(live_bound) > 1 or len(self.running.get(uid, ())) > 1:
                res.double_bookings += 1
            winner = winners.pop()
            if any(c.epoch == top_epoch for c in records) and winner is None:
                res.double_bookings += 1
            if winner is None:
                continue
            if not winner.completed and (winner.epoch < max(c.epoch for c in records) or winner.epoch < top_epoch):
                res.stale_epoch_wins += 1  # a completed claim ends the pod at any epoch; it runs nowhere
            if not winner.flags & (COMPLETED | RELEASED):
                committed[winner.node] = committed[winner.node] + winner.resources
        res.overcommits = sum(not load.fits_in(self.capacity) for load in committed.values())

    # ---- workload --------------------------------------------------------------

    def _request(self) -> Resources:
        rng = self.rng
        gpu = rng.choice((0, 0, 0, 0, 250, 500, 1000))
        return Resources(rng.choice((250, 500, 1000, 2000, 4000)), rng.choice((256, 512, 1024, 4096)),
                         rng.choice((0, 1024, 10240)), gpu)

