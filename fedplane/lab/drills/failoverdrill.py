"""Failover drills: inject a fault into a live control plane with twin clusters and measure it.

Each run builds fresh twin clusters, starts the real control-plane service (gRPC, in-process) and
an :class:`EvidenceSource`: real ``fedplane agent`` processes binding the pods and reporting
themselves (:mod:`fedplane.lab.drills.agentfleet`; tests swap in a stand-in with the twin binding), submits
workloads over gRPC, waits until they are ready and every agent sees every other cluster's nodes alive (the
federation pool converged), injects the fault and watches ground truth every 50 ms. Measured per run: detection
(fault -> verdict), recovery (fault -> every affected replica ready on an unaffected cluster), then, after healing the
fault and letting cleanup run, pods lost (desired - ready) and pods duplicated (running beyond desired).
Binds the twin refused because another node already holds the (pod, epoch) are counted apart: the
fence stopped them, nothing ran twice; real agents racing for a burst of pods make some. Also per run:
the first verdict on a victim, pods evicted from nodes that never failed (node-not-ready reports the
twin acted on), pods still pending ``STRANDED_AFTER_S`` after the heal, and for an agent crash with
real agents how long the restarted agents took to report healthy again, holding their journal's pods.
A run succeeds on its scenario's own terms (:data:`EXPECTED_VERDICT`, nothing lost, doubled, evicted or
stranded; an agent crash fails nothing over). Measuring never drives the twin: ground truth is read
with :meth:`TwinCluster.snapshot`, which changes nothing. Where agents run is the source's business
(loopback, or one network namespace each: :mod:`fedplane.lab.drills.netns`). Scenarios:

- ``cluster-outage``: one cluster goes dark (API and pods); its agents die.
- ``region-partition``: a region's clusters are cut off from the control plane (API and reports),
  pods keep running and agents keep gossiping with the other region.
- ``agent-crash``: one cluster's agents die, the cluster is fine: success means no failover.
- ``control-plane-crash``: a cluster outage, and the control plane crashes at a seeded step of the
  first failover migration, then restarts from its SQLite journal.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from controlplane import server
from controlplane.auth import Authenticator
from controlplane.metrics import Metrics
from controlplane.migrations import RetryPolicy, SimulatedCrash
from controlplane.handoffs import Volumes
from controlplane.planner import PlannerConfig
from controlplane.runtime import Backends, ControlPlane
from controlplane.sqlitestore import SqliteStore
from controlplane.verdicts import Timings
from fedapi import client, controlplane_pb2_grpc, credentials
from fedapi import controlplane_pb2 as cp
from fedcore import stats
from fedcore.backends.model import Phase
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedplane.lab.drills import agentfleet

SCENARIOS = ("cluster-outage", "region-partition", "agent-crash", "control-plane-crash")
CRASH_POINTS = (("create-target", "before"), ("create-target", "after"), ("await-ready", "before"), ("remove-source", "before"))
POLL_S = 0.05
FEDERATED_TIMEOUT_S = 30.0
"""Before the fault every agent must see every other cluster's nodes alive (the federation pool converged) within this:
a drill measures faults of a running federation, not of one still forming (three push-pull intervals)."""
STRANDED_AFTER_S = 30.0
"""A pod still pending this long after the heal is stranded (nobody will place it)."""
EXPECTED_VERDICT = {"cluster-outage": "down", "region-partition": "partitioned", "agent-crash": "agents-silent",
                    "control-plane-crash": "down"}
"""What the control plane must say about a victim in each scenario."""


class EvidenceSource(Protocol):
    """Agents (stand-in or real) as a drill drives them: start, fault, heal, stop."""

    async def start(self, target: str, link: str) -> None:
        """Begin: ``target`` is the control plane's gRPC address, ``link`` its twin link for agents."""
        ...

    async def stop(self) -> None: ...

    def kill_agents(self, cluster: str) -> None:
        """The cluster's agents die (node crash, cluster outage or agent crash)."""
        ...

    def cut_off(self, cluster: str) -> None:
        """The cluster's agents can no longer reach the control plane; they still gossip."""
        ...

    def heal(self, cluster: str) -> None: ...


class SourceFactory(Protocol):
    def __call__(self, nodes: dict[str, list[str]], clock: Callable[[], float], *, credentials: Mapping[str, Path]) -> EvidenceSource:
        """The source for ``nodes`` (per cluster); ``credentials``: per cluster, its agents' credential file."""
        ...


@dataclass(frozen=True, slots=True)
class DrillConfig:
    clusters: int = 4
    regions: int = 2
    nodes_per_cluster: int = 3
    workloads: int = 6
    replicas: int = 2
    ready_delay_s: float = 0.3
    deadline_s: float = 20.0
    restart_delay_s: float = 0.5
    timings: Timings = Timings()
    agents_bind: bool = True  # twin pods wait for edge agents to bind them (real agents), else the twin binds (a test stand-in)
    node_cpu_milli: int = 8000
    node_memory_mib: int = 32768
    ready_timeout_s: float = 10.0  # workloads must be ready this long after submission, before the fault
    host: str = "127.0.0.1"  # where the control plane serves (gRPC and the twin link); agents reach it there
    planner: PlannerConfig = PlannerConfig()


@dataclass(slots=True)
class RunResult:
    detect_s: float | None
    recovery_s: float | None
    lost: int
    duplicated: int
    stale_copies_max: int
    failovers: int
    crash_point: str = ""
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (s since fault, share of affected replicas ready elsewhere)
    refused_binds: int = 0  # second binds of a (pod, epoch) the fence refused (nothing ran twice)
    scenario: str = ""
    verdict: str = ""  # the first verdict the control plane gave a victim after the fault ("" = none)
    verdict_reasons: str = ""  # ... and its evidence, as the control plane journaled it
    healthy_evicted: int = 0  # pods unbound by a node-not-ready report on a node that never failed
    stranded: int = 0  # pods still pending STRANDED_AFTER_S after the heal
    rejoin_s: float | None = None  # agent-crash with real agents: restart -> every restarted agent reporting healthy
    journal_recovered: bool | None = None  # ... each first reporting exactly the pods the cluster has bound to its node

    @property
    def success(self) -> bool:
        """The scenario's own condition: its expected verdict, nothing lost, doubled, evicted or stranded, and
        for an agent crash no failover at all (the cluster was fine)."""
        expected = EXPECTED_VERDICT.get(self.scenario)
        return (self.recovery_s is not None and self.lost == 0 and self.duplicated == 0 and self.healthy_evicted == 0
                and self.stranded == 0 and (expected is None or self.verdict == expected)
                and (self.scenario != "agent-crash" or self.failovers == 0))


class CrashAt:
    """A crash hook armed for one (step, when) point; fires once, then the process is 'dead'."""

    def __init__(self, step: str, when: str) -> None:
        self.point, self.armed, self.fired = (step, when), False, False

    def __call__(self, step: str, when: str) -> None:
        if self.armed and not self.fired and (step, when) == self.point:
            self.fired = True
            raise SimulatedCrash(f"control plane crashed at {step}/{when}")


class Drill:
    """One run of one scenario (fresh clusters, control plane and agents).

    ``workloads`` replaces the config's uniform ones (the demo submits trace-shaped workloads);
    ``on_ready`` runs once every workload is ready, just before the fault. What the run saw is kept
    on the object for reports: submission latencies, pods per cluster over time, the decisions.
    """

    scenarios: tuple[str, ...] = SCENARIOS
    """What this class runs (the failback drills subclass it: :mod:`fedplane.lab.drills.flappingdrill`)."""

    def __init__(
        self, scenario: str, seed: int, config: DrillConfig, workdir: Path, source: SourceFactory, metrics: Metrics,
        workloads: Sequence[cp.WorkloadSpec] = (), on_ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if scenario not in self.scenarios:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(self.scenarios)}")
        self.scenario, self.config, self.workdir, self.metrics = scenario, config, workdir, metrics
        self.rng = random.Random(seed)
        self.clock = time.monotonic
        self.twins: dict[str, TwinCluster] = {}
        self.regions: dict[str, str] = {}
        binder = Binder.EXTERNAL if config.agents_bind else Binder.INTERNAL
        for i in range(config.clusters):
            name, region = f"c{i}", f"r{i % config.regions}"
            nodes = make_nodes(name, region, config.nodes_per_cluster, config.node_cpu_milli, config.node_memory_mib)
            self.twins[name] = TwinCluster(name, nodes, self.clock, config.ready_delay_s, binder)
            self.regions[name] = region
        self.workloads = list(workloads) or [
            cp.WorkloadSpec(name=f"w{i}", replicas=config.replicas, pod=cp.PodTemplate(cpu_milli=500, memory_mib=512),
                            policy=cp.PlacementPolicy(spread=cp.SPREAD_REGIONS, movable=True))
            for i in range(config.workloads)
        ]
        self.on_ready = on_ready
        self.submit_s: list[float] = []
        self.ready_s = 0.0  # first submission -> every workload ready
        self.victims: list[str] = []
        self.samples: list[tuple[float, dict[str, int]]] = []  # (s since fault, ready pods per cluster)
        self.decisions: list[cp.Decision] = []
        self.crash = CrashAt(*self.rng.choice(CRASH_POINTS))
        self.db = workdir / f"drill-{seed}.db"
        self.admin, agents = self._credentials(seed)
        self.source = source({c: [n.name for n in t.table.nodes] for c, t in self.twins.items()}, self.clock, credentials=agents)
        self.port = self.link_port = 0
        self.running: server.Running | None = None
        self.volumes: Volumes | None = None
        """Stateful workloads' volume host (the stateful drill's), handed to every control plane it starts."""

    def _credentials(self, seed: int) -> tuple[str, dict[str, Path]]:
        """The drill's admin token and, per cluster, its agents' credential file: issued into the plane's store before
        the plane first starts, as an operator would once it runs (the plane checks every call on both transports)."""
        store = SqliteStore(self.db)
        try:
            issuer = Authenticator(store)
            files = {}
            for cluster in self.twins:
                files[cluster] = self.workdir / f"drill-{seed}-{cluster}.cred"
                credentials.write(files[cluster], credentials.Credential(issuer.issue("agent", cluster), "agent", cluster))
            return issuer.issue("admin"), files
        finally:
            store.close()

    async def _start_plane(self) -> None:
        backends = Backends(self.clock, self.config.ready_delay_s)
        backends.by_name.update(self.twins)
        plane = ControlPlane(self.db, backends, self.clock, self.config.timings, retry=RetryPolicy(base_s=0.05, ready_timeout_s=10.0),
                             planner=self.config.planner, crash=self.crash, metrics=self.metrics, volumes=self.volumes)
        self.running = await server.start(plane, host=self.config.host, port=self.port, link_port=self.link_port, auth=Authenticator(plane.store))
        self.port, self.link_port = self.running.port, self.running.link_port

    async def _crash_and_restart(self) -> None:
        assert self.running is not None
        if not isinstance(self.running.loop.exception(), SimulatedCrash):
            raise RuntimeError("the control plane's loop ended unexpectedly") from self.running.loop.exception()
        await self.running.stop(0)  # abrupt: no drain, the journal is all that survives
        self.running.plane.close()
        await asyncio.sleep(self.config.restart_delay_s)
        await self._start_plane()

    async def run(self) -> RunResult:
        await self._start_plane()
        host = self.config.host
        conn = client.connect_aio(f"{host}:{self.port}", token=self.admin)
        stub = controlplane_pb2_grpc.ControlPlaneStub(conn)  # type: ignore[no-untyped-call]
        try:
            await self.source.start(f"{host}:{self.port}", f"{host}:{self.link_port}")
            return await self._run(stub)
        finally:
            await self.source.stop()
            await conn.close()
            if self.running is not None:
                await self.running.stop(0)
                self.running.plane.close()

    async def _run(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> RunResult:
        for name, region in self.regions.items():
            await stub.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name=name, region=region, backend=cp.BACKEND_TWIN)))
        await self._until(lambda: self._all_healthy(stub), 10.0, "clusters never became healthy")
        desired: dict[str, int] = {}
        started = self.clock()
        for spec in self.workloads:
            t = self.clock()
            decision = await stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec))
            self.submit_s.append(self.clock() - t)
            if not decision.accepted:
                raise RuntimeError(f"drill workload {spec.name} not placed: {[r.message for r in decision.reasons]}")
            desired[spec.name] = spec.replicas
        await self._until(lambda: self._ready_everywhere(desired), self.config.ready_timeout_s, "workloads never became ready")
        self.ready_s = self.clock() - started
        await self._until(lambda: self._federated(stub), FEDERATED_TIMEOUT_S, "agents never saw every other cluster's nodes alive")
        if self.on_ready is not None:
            await self.on_ready()
        self.samples.append((0.0, self.ready_per_cluster()))

        victims = self.victims = self._inject()
        t0 = self.clock()
        affected_w = {w for c in victims for w in desired if self.twins[c].snapshot(w)}
        detect = recovery = None
        verdict = reasons = ""
        stale_max = 0
        timeline: list[tuple[float, float]] = []
        while self.clock() - t0 < self.config.deadline_s:
            now = self.clock() - t0
            if self.running is not None and self.running.loop.done():
                await self._crash_and_restart()
            if detect is None:
                detect, verdict, reasons = await self._detected(stub, victims, t0)
            share = self._ready_elsewhere(affected_w, desired, victims)
            timeline.append((now, share))
            self.samples.append((now, self.ready_per_cluster()))
            if self.scenario == "region-partition":
                stale_max = max(stale_max, self._running_on(victims))
            if self.scenario == "agent-crash":
                if detect is not None and now >= detect + 2.0:
                    recovery = 0.0 if self._ready_elsewhere(set(desired), desired, []) >= 1.0 else None
                    break
            elif share >= 1.0 and detect is not None:
                recovery = now
                break
            await asyncio.sleep(POLL_S)
        restarts = self.scenario == "agent-crash" and self.config.agents_bind  # real agents, restarted on their data
        before = await self._agent_ids(stub, victims) if restarts else {}
        held = {n: self._bound_to(c, n) for c in victims for n in before}  # what a restarted agent must hold again
        for c in victims:
            self.twins[c].heal()
            self.source.heal(c)
        healed = self.clock()
        rejoin, journal_ok = await self._rejoin(stub, before, held, healed) if restarts else (None, None)
        await self._settle()
        stranded = await self._stranded(healed)
        lost, duplicated = self._count(desired)
        refused = sum(t.safety.duplicate_binds for t in self.twins.values())
        self.decisions = list((await stub.ListDecisions(cp.ListDecisionsRequest(limit=1000))).decisions)
        failovers = sum(1 for m in self._plane().journal.all() if m.kind.value == "failover")
        if detect is not None:
            self.metrics.drill_detect.labels(self.scenario).observe(detect)
        if recovery is not None:
            self.metrics.drill_recovery.labels(self.scenario).observe(recovery)
        point = "/".join(self.crash.point) if self.scenario == "control-plane-crash" else ""
        failed_nodes = {n.name for c in victims for n in self.twins[c].table.nodes} if self.scenario in ("cluster-outage", "control-plane-crash") else set()
        evicted = sum(n for t in self.twins.values() for node, n in t.safety.released.items() if node not in failed_nodes)
        return RunResult(detect, recovery, lost, duplicated, stale_max, failovers, point, timeline, refused, self.scenario, verdict,
                         reasons, evicted, stranded, rejoin, journal_ok)

    def _plane(self) -> ControlPlane:
        assert self.running is not None
        return self.running.plane

    def _inject(self) -> list[str]:
        """Apply the scenario's fault; returns the clusters it hits."""
        victim = self.rng.choice(sorted(self.twins))
        if self.scenario == "region-partition":
            victims = [c for c, r in self.regions.items() if r == self.regions[victim]]
            for c in victims:
                self.twins[c].partition()
                self.source.cut_off(c)
            return victims
        if self.scenario == "agent-crash":
            self.source.kill_agents(victim)
            return [victim]
        if self.scenario == "control-plane-crash":
            self.crash.armed = True
        self.twins[victim].outage()
        self.source.kill_agents(victim)
        return [victim]

    async def _detected(self, stub: controlplane_pb2_grpc.ControlPlaneStub, victims: list[str], t0: float) -> tuple[float | None, str, str]:
        """Seconds from the fault to the first verdict on a victim, that verdict and its reasons, from the journaled
        decisions (they survive crashes)."""
        want = {"verdict:agents-silent"} if self.scenario == "agent-crash" else {"verdict:down", "verdict:partitioned"}
        try:
            found = await stub.ListDecisions(cp.ListDecisionsRequest(limit=200), timeout=1.0)
        except grpc.aio.AioRpcError:  # the control plane may be down (crash scenario): not known yet
            return None, "", ""
        seen = sorted((d.at_ms / 1000 - t0, d.kind.removeprefix("verdict:"), "; ".join(r.message for r in d.reasons))
                      for d in found.decisions if d.kind in want and d.source in victims and d.at_ms / 1000 >= t0 - 0.001)
        return seen[0] if seen else (None, "", "")

    async def _federated(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> bool:
        """Every agent reports every other cluster's nodes alive: the federation pool that vouches for a cut-off region
        has converged (an agent's identity record may reach the others only at a push-pull, 10 s apart)."""
        found = await stub.ListAgents(cp.ListAgentsRequest(), timeout=5.0)
        total = sum(len(t.table.nodes) for t in self.twins.values())
        return all(a.remote_alive >= total - len(self.twins[c.cluster].table.nodes) for c in found.clusters for a in c.agents)

    async def _agent_ids(self, stub: controlplane_pb2_grpc.ControlPlaneStub, clusters: list[str]) -> dict[str, str]:
        """Node -> the agent id the control plane last heard from, for ``clusters``."""
        found = await stub.ListAgents(cp.ListAgentsRequest(), timeout=5.0)
        return {a.node: a.agent_id for c in found.clusters if c.cluster in clusters for a in c.agents}

    def _bound_to(self, cluster: str, node: str) -> int:
        return sum(1 for p in self.twins[cluster].snapshot() if p.phase is Phase.RUNNING and p.node == node)


    async def _rejoin(self, stub: controlplane_pb2_grpc.ControlPlaneStub, before: dict[str, str], held: dict[str, int],
                      healed: float) -> tuple[float | None, bool]:
        """Seconds until every restarted agent (a new agent id) reports healthy, and whether each one's first
        report held exactly the pods the cluster has bound to its node (its journal's, replayed before any watch)."""
        first: dict[str, int] = {}
        while self.clock() - healed < STRANDED_AFTER_S:
            found = await stub.ListAgents(cp.ListAgentsRequest(), timeout=5.0)
            for c in found.clusters:
                for a in c.agents:
                    if a.node in before and a.agent_id != before[a.node]:
                        first.setdefault(a.node, a.pods)
            fresh = {a.node for c in found.clusters for a in c.agents
                     if a.node in before and a.agent_id != before[a.node] and a.state == "reporting" and a.healthy}
            if fresh == set(before):
                return self.clock() - healed, all(first.get(n) == held[n] for n in before)
            await asyncio.sleep(POLL_S)
        return None, False

    async def _stranded(self, healed: float) -> int:
        """Pods still pending (and not on a cluster that is down) ``STRANDED_AFTER_S`` after the heal; returns early once none is."""
        while True:
            pending = sum(1 for t in self.twins.values() if t.running for p in t.snapshot() if p.phase is Phase.PENDING)
            if not pending or self.clock() - healed >= STRANDED_AFTER_S:
                return pending
            if self.running is not None and self.running.loop.done():
                await self._crash_and_restart()
            await asyncio.sleep(POLL_S * 4)

    async def _all_healthy(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> bool:
        found = await stub.ListClusters(cp.ListClustersRequest())
        return all(c.verdict.health == cp.HEALTH_HEALTHY for c in found.clusters) and len(found.clusters) == len(self.twins)

    async def _ready_everywhere(self, desired: dict[str, int]) -> bool:
        return self._ready_elsewhere(set(desired), desired, []) >= 1.0

    def _ready_elsewhere(self, workloads: set[str], desired: dict[str, int], victims: list[str]) -> float:
        if not workloads:
            return 1.0
        ready = 0
        for w in workloads:
            n = sum(1 for c, t in self.twins.items() if c not in victims for p in t.snapshot(w) if p.ready)
            ready += min(n, desired[w])
        return ready / sum(desired[w] for w in workloads)

    def ready_per_cluster(self) -> dict[str, int]:
        """Ground truth: ready pods on each cluster."""
        return {c: sum(1 for p in t.snapshot() if p.ready) for c, t in self.twins.items()}

    def _running_on(self, clusters: list[str]) -> int:
        """Pods still running on partitioned clusters: old-epoch copies until cleanup after the heal."""
        return sum(1 for c in clusters for p in self.twins[c].snapshot() if p.phase is Phase.RUNNING)

    async def _settle(self) -> None:
        """Let cleanup remove stale copies on healed clusters: quiet (no migration, no stale placement) for 1 s."""
        deadline, quiet_since = self.clock() + 8.0, None
        while self.clock() < deadline:
            if self.running is not None and self.running.loop.done():
                await self._crash_and_restart()
            plane = self._plane()
            quiet = not plane.journal.active() and all(p.state.value == "placed" for p in plane.registry.placements())
            quiet_since = (quiet_since or self.clock()) if quiet else None
            if quiet_since is not None and self.clock() - quiet_since >= max(1.0, self.config.ready_delay_s + 0.2):
                return
            await asyncio.sleep(POLL_S)

    def _count(self, desired: dict[str, int]) -> tuple[int, int]:
        lost = duplicated = 0
        for w, want in desired.items():
            running = [p for t in self.twins.values() for p in t.snapshot(w) if p.phase is Phase.RUNNING]
            ready = sum(1 for p in running if p.ready)
            lost += max(0, want - ready)
            duplicated += max(0, len(running) - want)
        return lost, duplicated

    async def _until(self, check: Callable[[], Any], timeout: float, message: str) -> None:
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            if await check():
                return
            await asyncio.sleep(POLL_S)
        raise RuntimeError(message)


async def run_drill(
    scenario: str, runs: int, seed: int = 0, config: DrillConfig = DrillConfig(), source: SourceFactory = agentfleet.AgentFleet,
    metrics: Metrics | None = None, on_run: Callable[[int, RunResult], None] = lambda i, r: None,
    evidence: str = agentfleet.EVIDENCE,
) -> tuple[dict[str, Any], list[RunResult]]:
    """``runs`` runs of ``scenario``; returns the summary (the drill JSON) and every run's result."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    if runs < 1:
        raise ValueError("runs must be >= 1")
    metrics = metrics or Metrics()
    results = []
    with tempfile.TemporaryDirectory(prefix="fedplane-drill-") as tmp:
        for i in range(runs):
            result = await Drill(scenario, seed + i, config, Path(tmp), source, metrics).run()
            results.append(result)
            on_run(i, result)
    return summarise(scenario, results, config, evidence), results


def summarise(scenario: str, results: list[RunResult], config: DrillConfig, evidence: str = "") -> dict[str, Any]:
    detects = [r.detect_s for r in results if r.detect_s is not None]
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
    return {
        "scenario": scenario,
        "runs": len(results),
        "detect_s_median": round(stats.percentile(detects, 50), 3),
        "recovery_s_p50": round(stats.percentile(recoveries, 50), 3),
        "recovery_s_p99": round(stats.percentile(recoveries, 99), 3),
        "success_rate": round(sum(r.success for r in results) / len(results), 4),
        "pods_lost": sum(r.lost for r in results),
        "pods_duplicated": sum(r.duplicated for r in results),
        "verdicts": [r.verdict or "none" for r in results],
        "verdict_reasons": [r.verdict_reasons for r in results],
        "detect_s_p50": round(stats.percentile(detects, 50), 3),
        "success": round(sum(r.success for r in results) / len(results), 4),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "healthy_evicted": sum(r.healthy_evicted for r in results),
        "stranded": sum(r.stranded for r in results),
        **({"rejoin_s_p99": round(stats.percentile([r.rejoin_s for r in results if r.rejoin_s is not None], 99), 3),
            "journal_recovered": sum(1 for r in results if r.journal_recovered)}
           if any(r.journal_recovered is not None for r in results) else {}),
        "duplicate_binds_refused": sum(r.refused_binds for r in results),
        "detect_s_p99": round(stats.percentile(detects, 99), 3),
        "undetected": sum(1 for r in results if r.detect_s is None),
        "unrecovered": sum(1 for r in results if r.recovery_s is None),
        "failovers_per_run": round(stats.percentile([r.failovers for r in results], 50), 1),
        "stale_copies_running_max": max((r.stale_copies_max for r in results), default=0),
        "crash_points": sorted({r.crash_point for r in results if r.crash_point}),
        "evidence": evidence,
        "timings": {
            "probe_interval_s": config.timings.probe_interval_s, "report_interval_s": config.timings.report_interval_s,
            "fresh_s": config.timings.fresh_s, "probe_failures": config.timings.probe_failures, "ready_delay_s": config.ready_delay_s,
        },
        "fleet": {"clusters": config.clusters, "regions": config.regions, "nodes_per_cluster": config.nodes_per_cluster,
                  "workloads": config.workloads, "replicas": config.replicas},
    }


def plot(results: list[RunResult], scenario: str, path: str) -> Path:
    """PNG timeline: share of the affected workloads' replicas ready on unaffected clusters (median and worst run)."""
    from fedcore import reporting

    end = max((t for r in results for t, _ in r.timeline), default=1.0)
    grid = [i * POLL_S for i in range(int(end / POLL_S) + 2)]

    def at(r: RunResult, t: float) -> float:
        last = r.timeline[0][1] if r.timeline else 0.0
        for ts, share in r.timeline:
            if ts > t:
                break
            last = share
        return last if t <= (r.timeline[-1][0] if r.timeline else 0) else 1.0 if r.recovery_s is not None else last

    curves = [[at(r, t) * 100 for t in grid] for r in results if r.timeline]
    median = [stats.percentile([c[i] for c in curves], 50) for i in range(len(grid))]
    worst = [min(c[i] for c in curves) for i in range(len(grid))]
    detected = [100.0 * sum(1 for r in results if r.detect_s is not None and r.detect_s <= t) / len(results) for t in grid]
    return reporting.plot_series(
        path, f"fedplane drill {scenario}: {len(results)} run{'' if len(results) == 1 else 's'}", grid,
        {"affected workloads' replicas ready on healthy clusters, median run (%)": median, "worst run (%)": worst},
        "seconds since fault", right={"runs with fault detected (%)": detected}, right_label="% of runs",
        ylabel="replicas ready elsewhere, %", marks=[(0.0, "fault")],
    )
