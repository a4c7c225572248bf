"""Whole-host faults on network-namespace hosts with the shipped timings: ``host-partition`` and ``agent-crash``.

The world as it is (issue #35): a control plane on one host (this process, in its namespace), one
real ``fedplane agent`` per host on the others (:class:`fedplane.lab.drills.netns.Fabric`), every
timing the product ships (the agents' YAML sets none, the plane runs :class:`Timings`' defaults),
credentials as an operator sets them up, and a few hundred pods. One host is hit per run:

- ``host-partition``: every link of the host is cut (control, agent link, gossip mesh) for
  ``cut_s``, then healed;
- ``agent-crash``: the host's agent is SIGKILLed and started again on its data directory
  ``restart_after_s`` later.

Ground truth is polled every ``poll_s`` from the back end (the twin the plane serves; a read that
changes nothing) and from every agent's ``/pods`` and ``/healthz``: watch events alone miss silent
changes. Measured per run (summed or maxed over runs in the JSON):

- ``lost``: desired replicas not ready at the end; ``duplicated``: replicas running beyond desired
  at the end, plus copies agents still hold outside the back end's binding;
- ``healthy_evicted``: pods a node-not-ready report freed from a node other than the victim's;
- ``stranded``: pods pending more than ``stranded_after_s`` while some ready node had room;
- ``unfenced_copy_s``: the longest an agent kept a copy the back end no longer binds to it, counted
  from when it could know (the heal or the restart for the victim, the change itself for others);
- ``recovery_s``: fault -> every desired replica ready on a node whose agent is up and reachable;
- ``acknowledged_lost``: acknowledged submits whose workload the plane no longer has;
- ``quorum_lost_s`` (agents that were never hit: seconds they read unhealthy) and
  ``victim_unhealthy_s`` (heal or restart -> the victim's agent healthy again; None: not within the run);
- ``silent_at_end``: agents whose ``/pods`` did not answer at the last poll (a restart that never came up);
- ``success``: the share of runs that recovered with none of the above wrong (:attr:`HostRun.success`).
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane import server
from controlplane.auth import Authenticator
from controlplane.metrics import Metrics
from controlplane.runtime import Backends, ControlPlane
from controlplane.sqlitestore import SqliteStore
from controlplane.verdicts import Timings
from fedapi import client, controlplane_pb2_grpc, credentials
from fedapi import controlplane_pb2 as cp
from fedcore import stats
from fedcore.backends.model import Phase, PodState
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedplane.lab.drills import agentfleet

SCENARIOS = ("host-partition", "agent-crash")
CLUSTER = "c0"


@dataclass(frozen=True, slots=True)
class HostDrillConfig:
    agents: int = 5
    pods: int = 200
    replicas: int = 10  # per workload: pods / replicas workloads
    cut_s: float = 20.0
    restart_after_s: float = 10.0
    poll_s: float = 0.5
    stranded_after_s: float = 60.0
    quiet_s: float = 5.0  # a run ends once everything has been settled this long after the fault ended
    ready_timeout_s: float = 180.0
    node_cpu_milli: int = 8000
    node_memory_mib: int = 16384
    pod_cpu_milli: int = 100
    pod_memory_mib: int = 128
    ready_delay_s: float = 0.5  # the twin's kubelet: a bound pod is ready this long after binding


@dataclass(slots=True)
class HostRun:
    scenario: str
    victim: str
    lost: int = 0
    duplicated: int = 0
    healthy_evicted: int = 0
    stranded: int = 0
    unfenced_copy_s: float = 0.0
    recovery_s: float | None = None
    acknowledged_lost: int = 0
    quorum_lost_s: float = 0.0
    victim_unhealthy_s: float | None = None
    reported_not_ready: dict[str, int] = field(default_factory=dict)
    held_at_end: int = 0  # pods the agents list as theirs (/pods) at the end: every pod, once
    silent_at_end: list[str] = field(default_factory=list)  # agents whose /pods did not answer at the end

    @property
    def success(self) -> bool:
        """On the run's own terms, as the in-process failover drill counts it: every replica ready again, nothing lost,
        doubled, evicted from a healthy node, stranded or acknowledged and forgotten, every agent answering at the end."""
        return (self.recovery_s is not None and not (self.lost or self.duplicated or self.healthy_evicted or self.stranded
                                                     or self.acknowledged_lost or self.silent_at_end))


class Observer:
    """Ground truth every poll: the back end's pods and each agent's copies and health."""

    def __init__(self, twin: TwinCluster, fleet: agentfleet.AgentFleet, nodes: list[str], config: HostDrillConfig) -> None:
        self.twin, self.fleet, self.nodes, self.config = twin, fleet, nodes, config
        self.pending_since: dict[str, float] = {}
        self.stranded: set[str] = set()
        self.stale_since: dict[tuple[str, str], float] = {}
        self.unfenced_max = 0.0
        self.knowable_from: dict[str, float] = {}
        """Per agent: from when it could know of a replacement (the victim's heal or restart)."""
        self.unhealthy: dict[str, float] = dict.fromkeys(nodes, 0.0)
        self.healthy_at: dict[str, float] = {}
        self.copies: dict[str, dict[str, int]] = {}
        self.silent: set[str] = set()
        """Agents whose /pods did not answer at the last poll (their copies are the last they listed)."""

    async def poll(self, now: float, down: set[str]) -> list[PodState]:
        pods = self.twin.snapshot()
        replies = await asyncio.gather(*(self._agent(n) for n in self.nodes))
        bound = {(p.name, p.node, p.epoch) for p in pods if p.phase is Phase.RUNNING}
        for node, (pods_held, healthy) in zip(self.nodes, replies):
            if node not in down:
                if healthy is False:
                    self.unhealthy[node] += self.config.poll_s
                elif healthy:
                    self.healthy_at.setdefault(node, now)
            if pods_held is None:
                self.silent.add(node)
                continue
            self.silent.discard(node)
            self.copies[node] = pods_held
            for uid, epoch in pods_held.items():
                key = (node, uid)
                if (uid, node, epoch) in bound:
                    self.stale_since.pop(key, None)
                    continue
                start = max(self.stale_since.setdefault(key, now), self.knowable_from.get(node, 0.0))
                self.unfenced_max = max(self.unfenced_max, now - start) if now >= start else self.unfenced_max
            for key in [k for k in self.stale_since if k[0] == node and k[1] not in pods_held]:
                del self.stale_since[key]
        room = self._room(pods)
        for p in pods:
            if p.phase is Phase.PENDING:
                since = self.pending_since.setdefault(p.name, now)
                if now - since > self.config.stranded_after_s and any(fits(p, r) for r in room.values()):
                    self.stranded.add(p.name)
            else:
                self.pending_since.pop(p.name, None)
        return pods

    async def _agent(self, node: str) -> tuple[dict[str, int] | None, bool | None]:
        host, port = self.fleet.endpoint(node)
        timeout = self.config.poll_s * 0.6
        held, health = await asyncio.gather(agentfleet.http_get(port, "/pods", timeout, host),
                                            agentfleet.http_get(port, "/healthz", timeout, host))
        pods = None
        if held is not None and held[0] == 200:
            try:
                pods = {str(k): int(v) for k, v in json.loads(held[1]).items()}
            except (ValueError, AttributeError):
                pods = None
        return pods, None if health is None else health[0] == 200

    def _room(self, pods: list[PodState]) -> dict[str, tuple[int, int]]:
        """Free (cpu milli, memory MiB) per ready node."""
        table = self.twin.table
        free = {n.name: (n.capacity.cpu_milli, n.capacity.memory_mib) for i, n in enumerate(table.nodes) if table.alive[i]}
        for p in pods:
            if p.phase is Phase.RUNNING and p.node in free:
                cpu, mem = free[p.node]
                free[p.node] = (cpu - p.request.cpu_milli, mem - p.request.memory_mib)
        return free

    def stale_copies(self) -> int:
        return len(self.stale_since)


def fits(pod: PodState, room: tuple[int, int]) -> bool:
    return pod.request.cpu_milli <= room[0] and pod.request.memory_mib <= room[1]


class HostDrill:
    """One run: fresh twin cluster, control plane, agents; one host hit."""

    def __init__(self, scenario: str, seed: int, config: HostDrillConfig, workdir: Path, hosts: agentfleet.Hosts) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        if config.agents < 3 or config.pods < config.replicas or config.pods % config.replicas:
            raise ValueError("need >= 3 agents and pods a multiple of replicas")
        self.scenario, self.config, self.workdir = scenario, config, workdir
        self.rng = random.Random(seed)
        self.clock = time.monotonic
        nodes = make_nodes(CLUSTER, "r0", config.agents, config.node_cpu_milli, config.node_memory_mib)
        self.nodes = [n.name for n in nodes]
        self.twin = TwinCluster(CLUSTER, nodes, self.clock, config.ready_delay_s, Binder.EXTERNAL)
        self.db = workdir / f"hostdrill-{seed}.db"
        self.admin, cred = self._credentials(seed)
        self.fleet = agentfleet.AgentFleet({CLUSTER: self.nodes}, self.clock, hosts=hosts, credentials={CLUSTER: cred})
        self.running: server.Running | None = None

    def _credentials(self, seed: int) -> tuple[str, Path]:
        """The admin token and the agents' credential file, issued into the plane's store before it starts."""
        store = SqliteStore(self.db)
        try:
            issuer = Authenticator(store)
            path = self.workdir / f"hostdrill-{seed}-{CLUSTER}.cred"
            credentials.write(path, credentials.Credential(issuer.issue("agent", CLUSTER), "agent", CLUSTER))
            return issuer.issue("admin"), path
        finally:
            store.close()

    async def run(self, host: str) -> HostRun:
        backends = Backends(self.clock, self.config.ready_delay_s)
        backends.by_name[CLUSTER] = self.twin
        plane = ControlPlane(self.db, backends, self.clock, Timings(), metrics=Metrics())
        self.running = await server.start(plane, host=host, port=0, auth=Authenticator(plane.store))
        conn = client.connect_aio(f"{host}:{self.running.port}", token=self.admin)
        stub = controlplane_pb2_grpc.ControlPlaneStub(conn)  # type: ignore[no-untyped-call]
        try:
            await self.fleet.start(f"{host}:{self.running.port}", f"{host}:{self.running.link_port}")
            return await self._run(stub)
        finally:
            await self.fleet.stop()
            await conn.close()
            await self.running.stop(0)
            plane.close()

    async def _run(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> HostRun:
        c = self.config
        await stub.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name=CLUSTER, region="r0", backend=cp.BACKEND_TWIN)))
        deadline = self.clock() + 60.0
        while not await _healthy_cluster(stub):
            if self.clock() > deadline:
                raise RuntimeError("the cluster never read healthy (no agent reports?)")
            await asyncio.sleep(c.poll_s)
        desired = {f"w{i}": c.replicas for i in range(c.pods // c.replicas)}
        for name, replicas in desired.items():
            spec = cp.WorkloadSpec(name=name, replicas=replicas, pod=cp.PodTemplate(cpu_milli=c.pod_cpu_milli, memory_mib=c.pod_memory_mib))
            for _ in range(60):  # the plane may not have read the cluster's capacity yet
                decision = await stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec), timeout=30.0)
                if decision.accepted:
                    break
                await asyncio.sleep(c.poll_s)
            else:
                raise RuntimeError(f"drill workload {name} not placed: {[r.message for r in decision.reasons]}")
        observer = Observer(self.twin, self.fleet, self.nodes, c)
        deadline = self.clock() + c.ready_timeout_s
        while _ready_on(await observer.poll(self.clock(), set()), set()) < c.pods:
            if self.clock() > deadline:
                raise RuntimeError(f"the {c.pods} pods were not all ready within {c.ready_timeout_s:.0f}s")
            await asyncio.sleep(c.poll_s)
        observer.unhealthy = dict.fromkeys(self.nodes, 0.0)
        before = dict(self.twin.safety.released)

        holding = sorted({p.node for p in self.twin.snapshot() if p.phase is Phase.RUNNING})
        victim = self.rng.choice(holding)  # a host that runs pods (agents pack them: some hosts run none)
        result = HostRun(self.scenario, victim)
        t0 = self.clock()
        if self.scenario == "host-partition":
            self.fleet.isolate([victim])
            back_after = c.cut_s
        else:
            self.fleet.kill_agent(victim)
            back_after = c.restart_after_s
        down, back, quiet_since = {victim}, None, None
        while True:
            now = self.clock()
            if back is None and now - t0 >= back_after:
                if self.scenario == "host-partition":
                    self.fleet.heal_hosts([victim])
                else:
                    self.fleet.restart_agent(victim)
                back = now
                observer.knowable_from[victim] = now
                observer.healthy_at.pop(victim, None)
                down = set()
            pods = await observer.poll(now, down)
            ready = _ready_on(pods, down)
            if result.recovery_s is None and ready >= c.pods:
                result.recovery_s = now - t0
            settled = (back is not None and ready >= c.pods and not observer.stale_copies()
                       and not any(p.phase is Phase.PENDING for p in pods))
            quiet_since = (quiet_since or now) if settled else None
            if quiet_since is not None and now - quiet_since >= c.quiet_s:
                break
            if back is not None and now - back > c.stranded_after_s + 10.0:
                break
            await asyncio.sleep(max(0.0, c.poll_s - (self.clock() - now)))

        pods = self.twin.snapshot()
        for w, want in desired.items():
            running = [p for p in pods if p.workload == w and p.phase is Phase.RUNNING]
            result.lost += max(0, want - sum(1 for p in running if p.ready))
            result.duplicated += max(0, len(running) - want)
        result.duplicated += observer.stale_copies()
        result.held_at_end = sum(len(held) for node, held in observer.copies.items() if node not in observer.silent)
        result.silent_at_end = sorted(observer.silent)
        released = {n: k - before.get(n, 0) for n, k in self.twin.safety.released.items() if k - before.get(n, 0)}
        result.reported_not_ready = released
        result.healthy_evicted = sum(k for n, k in released.items() if n != victim)
        result.stranded = len(observer.stranded)
        result.unfenced_copy_s = round(observer.unfenced_max, 2)
        result.quorum_lost_s = max((s for n, s in observer.unhealthy.items() if n != victim), default=0.0)
        if back is not None and victim in observer.healthy_at:
            result.victim_unhealthy_s = round(observer.healthy_at[victim] - back, 2)
        found = await stub.GetPlacements(cp.GetPlacementsRequest(), timeout=10.0)
        have = {w.workload for w in found.workloads}
        result.acknowledged_lost = sum(1 for w in desired if w not in have)
        return result


async def _healthy_cluster(stub: controlplane_pb2_grpc.ControlPlaneStub) -> bool:
    found = await stub.ListClusters(cp.ListClustersRequest(), timeout=5.0)
    return any(c.spec.name == CLUSTER and c.verdict.health == cp.HEALTH_HEALTHY and c.capacity.cpu_milli > 0 for c in found.clusters)


def _ready_on(pods: list[PodState], down: set[str]) -> int:
    """Ready replicas on nodes whose agent is up and reachable."""
    return sum(1 for p in pods if p.phase is Phase.RUNNING and p.ready and p.node not in down)


async def run_host_drill(scenario: str, runs: int, seed: int, config: HostDrillConfig, hosts: agentfleet.Hosts, host: str,
                         on_run: Callable[[int, HostRun], None] = lambda i, r: None) -> tuple[dict[str, Any], list[HostRun]]:
    """``runs`` runs of ``scenario``; returns the drill JSON and every run."""
    results: list[HostRun] = []
    with tempfile.TemporaryDirectory(prefix="fedplane-hostdrill-") as tmp:
        for i in range(runs):
            result = await HostDrill(scenario, seed + i, config, Path(tmp), hosts).run(host)
            results.append(result)
            on_run(i, result)
    return summarise(scenario, results, config), results


def summarise(scenario: str, results: list[HostRun], config: HostDrillConfig) -> dict[str, Any]:
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
    back = [r.victim_unhealthy_s for r in results if r.victim_unhealthy_s is not None]
    return {
        "scenario": scenario, "runs": len(results), "agents": config.agents, "pods": config.pods,
        "success": round(sum(r.success for r in results) / len(results), 4) if results else 0.0,
        "timings": agentfleet.TIMINGS,
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "healthy_evicted": sum(r.healthy_evicted for r in results),
        "stranded": sum(r.stranded for r in results),
        "unfenced_copy_s_max": max((r.unfenced_copy_s for r in results), default=0.0),
        "recovery_s_p50": round(stats.percentile(recoveries, 50), 2) if recoveries else None,
        "recovery_s_p99": round(stats.percentile(recoveries, 99), 2) if recoveries else float("inf"),
        "unrecovered": sum(1 for r in results if r.recovery_s is None),
        "acknowledged_lost": sum(r.acknowledged_lost for r in results),
        "quorum_lost_s_max": max((r.quorum_lost_s for r in results), default=0.0),
        "victim_unhealthy_s_max": max(back) if back else None,
        "agents_silent_at_end": sum(len(r.silent_at_end) for r in results),
        "fault": {"host-partition": f"every link of one agent host cut for {config.cut_s:.0f} s, then healed",
                  "agent-crash": f"one agent SIGKILLed, started again on its data directory after {config.restart_after_s:.0f} s"}[scenario],
        "per_run": [{"victim": r.victim, "recovery_s": None if r.recovery_s is None else round(r.recovery_s, 2),
                     "freed_by_not_ready": r.reported_not_ready, "unfenced_copy_s": r.unfenced_copy_s,
                     "quorum_lost_s": r.quorum_lost_s, "victim_unhealthy_s": r.victim_unhealthy_s, "held_at_end": r.held_at_end,
                     "silent_at_end": r.silent_at_end}
                    for r in results],
    }


def hosts_for(config: HostDrillConfig) -> list[str]:
    """The agent hosts' node names (one per agent), for building the fabric before the drill."""
    return [n.name for n in make_nodes(CLUSTER, "r0", config.agents)]
