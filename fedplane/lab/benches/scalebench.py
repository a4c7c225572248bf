"""``bench scale``: one control plane process, thousands of edge agents on the real link, and a region outage.

The plane is a real ``fedplane controlplane serve --agents-bind`` process (:mod:`fedplane.lab.benches.scaleplane`
adds only the lab's fault switch) with C twin clusters dealt round-robin into regions, nodes per cluster = agents / C.
The agents are simulated (:mod:`fedplane.lab.benches.scalefleet`), many per worker process, each on its own link
connection with the real frames and messages. Phases, each measured from outside the plane (``/metrics``, psutil on
its pid, its gRPC API):

1. idle: the plane with its clusters and no agent (CPU and RSS baseline);
2. agents: every agent reporting, nothing placed: the per-agent cost (RSS over the baseline per agent; plane CPU over
   the baseline per accepted report);
3. load: workloads totalling ``pods`` replicas submitted over gRPC, until every replica is ready (the agents bind);
4. steady: ``steady_s`` seconds of the loaded plane: tick p99 (the ``fedplane_tick_seconds`` histogram's increase,
   interpolated within its bucket as Prometheus' ``histogram_quantile`` does), report ingest, CPU, RSS;
5. outage: one region goes dark (its twin clusters' APIs and pods, as the failover drill's ``cluster-outage``; its
   agents fall silent and the others' gossip views of them decay); per dark cluster, detection (fault -> a
   PARTITIONED or DOWN verdict in ``ListClusters``) and recovery (fault -> every replica of the workloads it held
   ready on clusters outside the region, read from ``GetPlacements``: the twins' own ready counts); then lost
   (desired - ready) and duplicated (ready beyond desired) with the region still dark.

With ``ha`` > 0 the plane keeps its state in an etcd cluster of that many members on loopback
(:class:`~fedplane.lab.drills.etcdcluster.EtcdCluster`; ``serve --etcd``, one plane member campaigning and leading)
instead of its SQLite file, and the figures add etcd's: writes (puts and deletes) and transactions per second in the
load, steady and outage phases, its keys and database size at the end (``/metrics`` of the first member).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import grpc

from fedapi import client
from fedapi import controlplane_pb2 as cp
from fedcore import stats
from fedcore.agentcmd import dies_with_starter
from fedcore.loopback import free_ports
from fedplane.lab import credentialing
from fedplane.lab.benches import scaleplane
from fedplane.lab.drills.etcdcluster import EtcdCluster

NODE_CPU_MILLI, NODE_MEMORY_MIB = 8000, 32768
"""The twin's node shape (``serve --twin-clusters``)."""
POD_CPU_MILLI, POD_MEMORY_MIB = 100, 128
REPLICAS_PER_WORKLOAD = 100
CALL_S = 30.0
FAILED = (cp.HEALTH_PARTITIONED, cp.HEALTH_DOWN)
REPORTING = 0.99
"""The share of agents that must be reporting (fresh in the plane's book at once) before workloads are submitted."""


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    agents: int = 10_000
    clusters: int = 100
    pods: int = 100_000
    regions: int = 0
    """0: ten regions (fewer below 20 clusters: two clusters each, at least 2 regions), so a region outage silences a
    tenth of the fleet and the other nine hold its replicas (a 20-cluster run had 2 regions: half the fleet went dark,
    more replicas than the live half had room for)."""
    workers: int = 4
    wan_peers: int = 4
    steady_s: float = 30.0
    phase_s: float = 15.0
    """How long the idle and agents-only phases are measured."""
    deadline_s: float = 120.0
    """After the fault: how long to wait for every dark cluster's replicas to run elsewhere."""
    load_timeout_s: float = 900.0
    workdir: str = ""
    ha: int = 0
    """etcd members the plane keeps its state in (0: its embedded SQLite file)."""

    @property
    def region_count(self) -> int:
        return self.regions or max(2, min(10, self.clusters // 2))

    @property
    def nodes_per_cluster(self) -> int:
        return self.agents // self.clusters


@dataclass(slots=True)
class Sample:
    """The plane process's counters at one moment."""

    at: float
    cpu_s: float
    rss_mib: float
    tick: dict[float, float]
    reports: float
    gc: dict[str, dict[float, float]]
    """The plane's collections' pauses by generation (``fedplane_gc_pause_seconds`` buckets)."""
    etcd: dict[str, float]
    """etcd's counters and sizes (``ha`` only; empty otherwise)."""


class _Plane:
    """The plane process and the bench's gRPC connection to it."""

    def __init__(self, cfg: ScaleConfig, workdir: Path) -> None:
        self.cfg, self.workdir = cfg, workdir
        self.port, self.link, self.metrics_port = free_ports(3)
        self.fault = workdir / "fault.json"
        self.process: subprocess.Popen[bytes] | None = None
        self.conn: client.Connection | None = None
        self.tokens: dict[str, str] = {}
        """Cluster -> its agents' credential (one per cluster, as an operator issues them)."""
        self.etcd = EtcdCluster(cfg.ha) if cfg.ha else None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        admin = self.workdir / "admin.cred"
        store = ["--etcd", ",".join(self.etcd.start())] if self.etcd else ["--db", str(self.workdir / "plane.db")]
        argv = [sys.executable, "-m", "fedplane.lab.benches.scaleplane", *store,
                "--port", str(self.port), "--agent-port", str(self.link), "--metrics-port", str(self.metrics_port),
                "--twin-clusters", str(self.cfg.clusters), "--regions", str(self.cfg.region_count),
                "--twin-nodes", str(self.cfg.nodes_per_cluster), "--agents-bind", "--ready-delay", "0.5",
                "--no-scorer-selection", "--admin-credentials", str(admin)]
        env = {**os.environ, scaleplane.FAULT_ENV: str(self.fault)}
        log = open(self.workdir / "plane.log", "wb")
        process = self.process = subprocess.Popen(dies_with_starter(argv), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        token = credentialing.admin_token(admin, 120, lambda: process.poll() is None)
        self.conn = client.connect(self.target, token=token)
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the control plane exited early; see {self.workdir / 'plane.log'}")
            try:
                if len(self.clusters()) == self.cfg.clusters:
                    break
            except Exception as exc:  # grpc.RpcError until it serves
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the control plane did not answer within 120 s: {exc}") from None
            time.sleep(0.3)
        for i in range(self.cfg.clusters):
            issued = self.conn.control.IssueCredential(cp.IssueCredentialRequest(role="agent", cluster=f"c{i}"), timeout=CALL_S)
            self.tokens[f"c{i}"] = issued.token

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.conn is not None:
            self.conn.close()
        if self.etcd is not None:
            self.etcd.stop()

    @property
    def api(self) -> Any:
        assert self.conn is not None, "the plane is not started"
        return self.conn.control

    def clusters(self) -> list[Any]:
        return list(self.api.ListClusters(cp.ListClustersRequest(), timeout=CALL_S).clusters)

    def sample(self) -> Sample:
        import psutil

        proc = psutil.Process(self.process.pid if self.process else 0)
        times, rss = proc.cpu_times(), proc.memory_info().rss / 2**20
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=CALL_S).read().decode()
        tick = {math.inf if le == "+Inf" else float(le): float(v)
                for le, v in re.findall(r'^fedplane_tick_seconds_bucket\{le="([^"]+)"\} (\S+)$', body, re.M)}
        reports = sum(float(v) for v in re.findall(r'^fedplane_agent_reports_total\{accepted="true"\} (\S+)$', body, re.M))
        gc: dict[str, dict[float, float]] = {}
        for generation, le, v in re.findall(r'^fedplane_gc_pause_seconds_bucket\{generation="(\d)",le="([^"]+)"\} (\S+)$', body, re.MULTILINE):
            gc.setdefault(generation, {})[math.inf if le == "+Inf" else float(le)] = float(v)
        return Sample(time.monotonic(), times.user + times.system, rss, tick, reports, gc, self._etcd())

    def _etcd(self) -> dict[str, float]:
        if self.etcd is None:
            return {}
        body = urllib.request.urlopen(f"{self.etcd.endpoints[0]}/metrics", timeout=CALL_S).read().decode()
        return {name: float(v) for name, v in re.findall(r"^etcd_(mvcc_put_total|mvcc_delete_total|mvcc_txn_total|"
                                                         r"debugging_mvcc_keys_total|mvcc_db_total_size_in_bytes|"
                                                         r"mvcc_db_total_size_in_use_in_bytes) (\S+)$", body, re.MULTILINE)}


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of a histogram's increase between two samples (cumulative buckets, seconds), interpolated
    linearly within its bucket like ``histogram_quantile``; inf when it falls in the +Inf bucket."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if not total:
        return 0.0
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if math.isinf(bound):
                return math.inf
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return math.inf


@dataclass(slots=True)
class _Workers:
    """The simulated agents' worker processes."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, cfg: ScaleConfig, link: str, tokens: dict[str, str], workdir: Path) -> None:
        names = [f"c{i}" for i in range(cfg.clusters)]
        nodes = {c: [f"{c}-n{i}" for i in range(cfg.nodes_per_cluster)] for c in names}
        for w in range(min(cfg.workers, cfg.clusters)):
            mine = names[w::cfg.workers]
            wan = {node: _wan_view(names, ci, i, cfg) for ci, c in enumerate(names) if c in mine for i, node in enumerate(nodes[c])}
            spec = {"link": link, "clusters": {c: nodes[c] for c in mine}, "wan": wan, "tokens": {c: tokens[c] for c in mine},
                    "cpu_milli": NODE_CPU_MILLI, "memory_mib": NODE_MEMORY_MIB}
            log = open(workdir / f"fleet{w}.log", "wb")
            proc = subprocess.Popen(dies_with_starter([sys.executable, "-m", "fedplane.lab.benches.scalefleet"]), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, cwd=workdir)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode() + b"\n")
            proc.stdin.flush()
            self.procs.append(proc)

    def send(self, command: dict[str, Any]) -> None:
        for proc in self.procs:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(json.dumps(command).encode() + b"\n")
                proc.stdin.flush()

    def census(self, live: set[str], timeout_s: float = 30.0) -> dict[str, dict[str, int]]:
        """Cluster -> workload -> ready replicas, as the twins' pod watches stream them, once every cluster in ``live``
        is counted (a watch between connections has no word on its cluster: asked again)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.send({"census": True})
            counted: dict[str, dict[str, int]] = {}
            for proc in self.procs:
                if proc.poll() is None and proc.stdout is not None:
                    counted.update(json.loads(proc.stdout.readline()))
            if live <= set(counted) or time.monotonic() > deadline:
                return counted
            time.sleep(0.5)

    def stop(self) -> dict[str, Any]:
        """Stop every worker; their counters summed."""
        self.send({"stop": True})
        total: dict[str, Any] = {}
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            for line in out.decode().splitlines()[-1:]:
                for key, value in json.loads(line).items():
                    total[key] = sorted(set(total.get(key, [])) | set(value)) if isinstance(value, list) else total.get(key, 0) + value
        return total


def _wan_view(names: list[str], ci: int, i: int, cfg: ScaleConfig) -> list[str]:
    """The node's federation-pool sample: ``wan_peers`` members of other clusters, spread so every cluster is seen
    from outside (clusters at strides over the list, node ordinal kept)."""
    stride = max(1, len(names) // (cfg.wan_peers + 1))
    return [f"{names[(ci + stride * (k + 1) + i) % len(names)]}-n{i}" for k in range(cfg.wan_peers)
            if (ci + stride * (k + 1) + i) % len(names) != ci]


def _workloads(cfg: ScaleConfig) -> list[cp.WorkloadSpec]:
    count = max(1, math.ceil(cfg.pods / REPLICAS_PER_WORKLOAD))
    sizes = [cfg.pods // count + (1 if k < cfg.pods % count else 0) for k in range(count)]
    template = cp.PodTemplate(cpu_milli=POD_CPU_MILLI, memory_mib=POD_MEMORY_MIB)
    return [cp.WorkloadSpec(name=f"w{k}", replicas=n, pod=template) for k, n in enumerate(sizes)]


def _say(line: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] bench scale: {line}", file=sys.stderr, flush=True)


def _until(what: str, check: Any, timeout_s: float, every_s: float = 1.0) -> float:
    """Seconds until ``check()`` holds (a call the busy plane did not answer in time counts as not yet)."""
    start = time.monotonic()
    while not _answered(check, False):
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"{what}: not within {timeout_s:.0f}s")
        time.sleep(every_s)
    return time.monotonic() - start


def _answered(call: Any, otherwise: Any) -> Any:
    """``call()``, or ``otherwise`` when the plane did not answer it (deadline, unavailable, or the call cancelled in
    transport: one 2,000-agent run's submit ended CANCELLED on a host at load 20; every call retried here is a read or
    a submit under its request id, so a retry never doubles anything)."""
    try:
        return call()
    except grpc.RpcError as exc:
        if exc.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):  # type: ignore[attr-defined]
            raise
        return otherwise


def _submit(plane: _Plane, w: cp.WorkloadSpec) -> cp.PlacementDecision:
    """One submit, retried under its request id while the busy plane does not answer (the first answer comes back)."""
    request = cp.SubmitWorkloadRequest(workload=w, request_id=f"scale-{w.name}")
    for _ in range(10):
        answer = _answered(lambda: plane.api.SubmitWorkload(request, timeout=CALL_S * 4), None)
        if answer is not None:
            return answer
    raise RuntimeError(f"the plane did not answer the submit of {w.name} in 10 tries")


def _reporting(plane: _Plane) -> int:
    """Agents the plane counts as reporting (fresh), over all clusters."""
    return sum(c.agents_reporting for c in plane.clusters())


def _ready(census: dict[str, dict[str, int]]) -> int:
    return sum(sum(by.values()) for by in census.values())


def _by_workload(census: dict[str, dict[str, int]], clusters: set[str]) -> dict[str, int]:
    """Workload -> ready replicas on ``clusters``."""
    out: dict[str, int] = {}
    for cluster in clusters:
        for w, n in census.get(cluster, {}).items():
            out[w] = out.get(w, 0) + n
    return out


def _rates(a: Sample, b: Sample) -> tuple[float, float]:
    """(plane CPU share of one core, accepted reports per second) between two samples."""
    span = max(1e-9, b.at - a.at)
    return (b.cpu_s - a.cpu_s) / span, (b.reports - a.reports) / span


def run(cfg: ScaleConfig) -> dict[str, Any]:
    if cfg.agents < cfg.clusters or cfg.clusters < 2:
        raise ValueError("need at least 2 clusters and one agent per cluster")
    with tempfile.TemporaryDirectory(prefix="fedplane-scale-", dir=cfg.workdir or None) as tmp:
        workdir = Path(tmp)
        plane, workers = _Plane(cfg, workdir), _Workers()
        try:
            figures = _measure(cfg, plane, workers, workdir)
        finally:
            fleet = workers.stop() if workers.procs else {}
            plane.stop()
        intervals = fleet.pop("intervals_ms", [])
        return {**figures, "report_interval_ms": [min(intervals), max(intervals)] if intervals else None,
                "fleet": fleet}


def _measure(cfg: ScaleConfig, plane: _Plane, workers: _Workers, workdir: Path) -> dict[str, Any]:
    plane.start()
    _say(f"plane serving {cfg.clusters} twin clusters ({cfg.region_count} regions); idle phase")
    time.sleep(2.0)
    idle0 = plane.sample()
    time.sleep(cfg.phase_s)
    idle1 = plane.sample()
    workers.start(cfg, f"127.0.0.1:{plane.link}", plane.tokens, workdir)
    _say(f"{len(workers.procs)} worker processes starting {cfg.nodes_per_cluster * cfg.clusters} agents")
    agents = cfg.nodes_per_cluster * cfg.clusters
    try:
        _until(f"{REPORTING:.0%} of the agents reporting", lambda: _reporting(plane) >= REPORTING * agents, 600, 2.0)
    except RuntimeError as exc:  # a host too busy to carry them all: go on with those that are, and say so
        _say(f"{exc}: {_answered(lambda: _reporting(plane), 0)} are; going on")
    _until("every cluster healthy", lambda: all(c.verdict.health == cp.HEALTH_HEALTHY for c in plane.clusters()), 300, 1.0)
    reporting_at_start = _answered(lambda: _reporting(plane), None)
    time.sleep(cfg.phase_s / 2)  # the pace settles (acks raise the interval as the fleet grows)
    agents0 = plane.sample()
    time.sleep(cfg.phase_s)
    agents1 = plane.sample()

    _say("agents reporting, clusters healthy; submitting workloads")
    workloads = _workloads(cfg)
    desired = {w.name: w.replicas for w in workloads}
    load_start = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda w: _submit(plane, w), workloads))
    refused = [a.workload for a in answers if not a.accepted]
    if refused:
        raise RuntimeError(f"{len(refused)} workloads not placed (first: {refused[0]})")
    submit_s = time.monotonic() - load_start
    names = {f"c{i}" for i in range(cfg.clusters)}
    ready_s = _until("every replica ready", lambda: _ready(workers.census(names)) >= cfg.pods, cfg.load_timeout_s, 2.0) + submit_s

    _say(f"{cfg.pods} replicas ready after {ready_s:.0f} s; steady phase")
    steady0 = plane.sample()
    time.sleep(cfg.steady_s)
    steady1 = plane.sample()

    reporting_at_fault = _answered(lambda: _reporting(plane), None)
    region = "r0"  # serve deals twin cluster c<i> into region r<i mod regions>
    dark = [f"c{i}" for i in range(0, cfg.clusters, cfg.region_count)]
    held = workers.census(names)
    victims = {c: {w for w, n in held.get(c, {}).items() if n} for c in dark}
    fault_file = plane.fault.with_suffix(".tmp")
    fault_file.write_text(json.dumps({"outage": dark}))
    fault_file.rename(plane.fault)
    workers.send({"silence": dark, "at": time.monotonic()})
    _say(f"region {region} dark: {len(dark)} clusters")
    done = plane.fault.with_suffix(".done")
    _until("the fault applied", done.exists, 30, 0.01)
    fault_at = float(json.loads(done.read_text())["at"])
    detected: dict[str, float] = {}
    recovered: dict[str, float] = {}
    outage0 = plane.sample()
    deadline = fault_at + cfg.deadline_s
    live = names - set(dark)
    while time.monotonic() < deadline and len(recovered) < len(dark):
        now = time.monotonic()
        for c in _answered(plane.clusters, []):
            if c.spec.name in victims and c.spec.name not in detected and c.verdict.health in FAILED:
                detected[c.spec.name] = now - fault_at
        counted = workers.census(live, 0.0)
        now = time.monotonic()
        outside = _by_workload(counted, live)
        for c, held_here in victims.items():
            if c not in recovered and all(outside.get(w, 0) >= desired[w] for w in held_here):
                recovered[c] = now - fault_at
        time.sleep(0.1)
    _say(f"detected {len(detected)}/{len(dark)}, recovered {len(recovered)}/{len(dark)}")
    outage1 = plane.sample()
    final = _by_workload(workers.census(live), live)  # a dark cluster's pods are stopped: none ready there
    ready_total = {w: final.get(w, 0) for w in desired}
    lost = sum(max(0, n - ready_total[w]) for w, n in desired.items())
    duplicated = sum(max(0, ready_total[w] - n) for w, n in desired.items())

    etcd = {"members": cfg.ha, **_etcd_rates({"load": (agents1, steady0), "steady": (steady0, steady1), "outage": (outage0, outage1)}),
            "keys": outage1.etcd.get("debugging_mvcc_keys_total"),
            "db_mib": round(outage1.etcd.get("mvcc_db_total_size_in_bytes", 0.0) / 2**20, 1),
            "db_in_use_mib": round(outage1.etcd.get("mvcc_db_total_size_in_use_in_bytes", 0.0) / 2**20, 1)} if cfg.ha else None
    idle_cpu, _ = _rates(idle0, idle1)
    agent_cpu, agent_reports = _rates(agents0, agents1)
    steady_cpu, steady_reports = _rates(steady0, steady1)
    outage_agents = cfg.nodes_per_cluster * len(dark)
    detect = sorted(detected.values())
    recover = sorted(recovered.values())
    return {
        "agents": agents, "clusters": cfg.clusters, "regions": cfg.region_count, "pods": sum(desired.values()),
        "store": f"etcd, {cfg.ha} members on loopback" if cfg.ha else "sqlite", "etcd": etcd,
        "workloads": len(workloads), "protocol": "real",
        "transport": "each simulated agent on its own TCP connection to the plane's agent link (fedapi.agentlink frames, "
                     "the TwinCluster service's ReportAgent/WatchPods/BindPod messages)",
        "placement": "simulated agents bind pending pods round-robin (one pending-pod watch per cluster; each bind over "
                     "the binding agent's own connection, on its own node; the next agent when the node refuses)",
        "gossip_view": f"all own-cluster peers plus {cfg.wan_peers} members of other clusters; a dark node is seen "
                       "suspect 1 s and dead 3 s after it went silent (simulated failure detector)",
        "worker_processes": len(workers.procs), "agents_reporting_at_start": reporting_at_start,
        "agents_reporting_at_fault": reporting_at_fault,
        "tick_ms_p99": _ms(quantile(0.99, steady0.tick, steady1.tick)),
        "tick_ms_p50": _ms(quantile(0.50, steady0.tick, steady1.tick)),
        "tick_ms_p99_outage": _ms(quantile(0.99, outage0.tick, outage1.tick)),
        "tick_ms_p99_agents_only": _ms(quantile(0.99, agents0.tick, agents1.tick)),
        "gc_steady": _collections(steady0, steady1), "gc_outage": _collections(outage0, outage1),
        "reports_per_s": round(steady_reports, 1),
        "cp_rss_mib": round(max(steady1.rss_mib, outage1.rss_mib)),
        "cp_rss_mib_idle": round(idle1.rss_mib), "cp_rss_mib_agents_only": round(agents1.rss_mib),
        "cp_cpu_cores_idle": round(idle_cpu, 3), "cp_cpu_cores_agents_only": round(agent_cpu, 3),
        "cp_cpu_cores_steady": round(steady_cpu, 3), "cp_cpu_cores_outage": round(_rates(outage0, outage1)[0], 3),
        "per_agent_bytes": round((agents1.rss_mib - idle1.rss_mib) * 2**20 / agents),
        "per_report_us": round((agent_cpu - idle_cpu) / agent_reports * 1e6, 1) if agent_reports else None,
        "submit_s": round(submit_s, 1), "all_ready_s": round(ready_s, 1),
        "outage_region": region, "outage_clusters": len(dark), "outage_agents": outage_agents,
        "outage_replicas": sum(held.get(c, {}).get(w, 0) for c in dark for w in victims[c]),
        "detected": f"{len(detected)}/{len(dark)}", "recovered": f"{len(recovered)}/{len(dark)}",
        "detect_s_p50": _s(stats.percentile(detect, 50)) if detect else None,
        "detect_s_p99": _s(stats.percentile(detect, 99)) if len(detect) == len(dark) else None,
        "recovery_s_p50": _s(stats.percentile(recover, 50)) if recover else None,
        "recovery_s_p99": _s(stats.percentile(recover, 99)) if len(recover) == len(dark) else None,
        "lost": lost, "duplicated": duplicated,
        "lost_measured": "desired - ready on the live clusters, the region still dark, at the end of the outage phase "
                         "(ready counts from the twins' WatchPods streams, one per cluster, which the simulated agents also bind from)",
        "host": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)},
    }


def _etcd_rates(phases: dict[str, tuple[Sample, Sample]]) -> dict[str, dict[str, float]]:
    """etcd's writes (puts and deletes) and transactions per second in each phase."""
    def rate(a: Sample, b: Sample, *names: str) -> float:
        return round(sum(b.etcd.get(n, 0.0) - a.etcd.get(n, 0.0) for n in names) / max(b.at - a.at, 1e-9), 1)
    return {"writes_per_s": {p: rate(a, b, "mvcc_put_total", "mvcc_delete_total") for p, (a, b) in phases.items()},
            "txns_per_s": {p: rate(a, b, "mvcc_txn_total") for p, (a, b) in phases.items()}}


def _collections(a: Sample, b: Sample) -> dict[str, dict[str, float | None]]:
    """Per generation between two samples: how many collections, and their pause p99 (ms)."""
    return {g: {"count": after.get(math.inf, 0.0) - a.gc.get(g, {}).get(math.inf, 0.0),
                "pause_ms_p99": _ms(quantile(0.99, a.gc.get(g, {}), after))} for g, after in sorted(b.gc.items())}


def _ms(seconds: float) -> float | None:
    return None if math.isinf(seconds) else round(seconds * 1000, 1)


def _s(seconds: float) -> float:
    return round(seconds, 2)



@click.command("scale")
@click.option("--agents", default=10_000, show_default=True, type=click.IntRange(2, 100_000), help="simulated edge agents (one node each)")
@click.option("--clusters", default=100, show_default=True, type=click.IntRange(2, 1000), help="twin clusters (nodes per cluster: agents / clusters)")
@click.option("--pods", default=100_000, show_default=True, type=click.IntRange(1, 2_000_000), help="replicas in total (workloads of 100)")
@click.option("--regions", default=0, show_default=True, type=click.IntRange(0, 100), help="regions (0: ten, or one per 2 clusters below 20, at least 2); r0 goes dark")
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1, 64), help="processes the simulated agents run in")
@click.option("--steady", "steady_s", default=30.0, show_default=True, type=click.FloatRange(1, 3600), help="seconds of the loaded plane measured")
@click.option("--phase", "phase_s", default=15.0, show_default=True, type=click.FloatRange(1, 600), help="seconds of the idle and agents-only phases")
@click.option("--deadline", "deadline_s", default=120.0, show_default=True, type=click.FloatRange(5, 3600), help="seconds after the fault to wait for recovery")
@click.option("--ha", default=0, show_default=True, type=click.IntRange(0, 7), help="keep the plane's state in an etcd cluster of this many members (0: SQLite)")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON object")
def bench_scale(agents: int, clusters: int, pods: int, regions: int, workers: int, steady_s: float, phase_s: float,
                deadline_s: float, ha: int, as_json: bool) -> None:
    """One control plane process, thousands of simulated agents on the real agent link, a region outage.

    Timings are wall-clock on whatever host runs it (the plane, the agents' processes and the bench share its cores).
    """
    if agents < clusters:
        raise click.UsageError(f"--agents {agents} must be at least --clusters {clusters} (one node per agent)")
    cfg = ScaleConfig(agents=agents, clusters=clusters, pods=pods, regions=regions, workers=workers, steady_s=steady_s,
                      phase_s=phase_s, deadline_s=deadline_s, ha=ha)
    try:
        figures = run(cfg)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    except grpc.RpcError as exc:  # the plane refused or failed a call: its code and words, on one line
        raise click.ClickException(f"the control plane answered {exc.code().name}: {exc.details()}") from None  # type: ignore[attr-defined]
    if as_json:
        click.echo(json.dumps(figures))
        return
    for key, value in figures.items():
        click.echo(f"{key:>26}  {value}")
