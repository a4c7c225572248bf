"""The control-plane-crash drill with a replicated control plane (``--ha N``): real processes only.

Three etcd members and N ``fedplane controlplane serve --etcd`` processes run on loopback. Each run
starts manual migrations, fires a burst of concurrent submits (each with its request id, each
client retrying at whichever member leads), and in the middle of it crashes the leader: SIGKILL
(even runs; the member is then started again as a fresh process) or SIGSTOP (odd runs; it is
woken once another member leads, and tries to go on writing). Nothing crosses the crash in
memory: the new leader rebuilds its embedded twin clusters from etcd and resumes the journal.
With one member (``--ha 1``) the same runs use the embedded mode: one process on SQLite, killed
(SIGKILL) and started again on the same file; ``takeover_s`` is then kill -> serving again.

Measured per run, from outside the processes:
- ``takeover_s``: crash -> another member answers GetLeader as leader (after its take-over).
- migrations: each started one ends DONE, or FAILED/CANCELLED with its target rolled back.
- submits: an accepted answer whose workload is missing is ``lost``; a recorded workload whose
  placements do not add up to its replicas, or that has no placement decision, or a retry
  answered ALREADY_EXISTS, is ``half_recorded``; replicas ready beyond desired are ``duplicated``;
  replicas not ready once the run settles are ``lost`` too.
- ``stale_writes``: from etcd's own history: every fenced write stamps ``writer`` with its token;
  a revision written under a token older than the newest election before it is stale.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from controlplane.etcdstore import WRITER_KEY, EtcdClient
from fedapi import client
from fedapi import controlplane_pb2 as cp
from fedcore import stats
from fedcore.agentcmd import dies_with_starter
from fedcore.loopback import free_ports
from fedplane.lab import credentialing
from fedplane.lab.drills.etcdcluster import EtcdCluster

PREFIX = "/fedplane/"
CALL_S = 3.0


@dataclass(frozen=True, slots=True)
class HaDrillConfig:
    members: int = 3
    clusters: int = 4
    regions: int = 2
    nodes_per_cluster: int = 3
    steady_workloads: int = 6   # long-lived; the migrations move them
    migrations: int = 2         # started just before each crash
    burst: int = 40             # concurrent submits per run
    crash_after: int = 5        # answered submits before the crash (the rest are in flight)
    ready_delay_s: float = 1.0  # twin pods become ready this long after binding: migrations are mid-way at the crash
    settle_s: float = 40.0
    probe_interval_s: float = 0.2


@dataclass(slots=True)
class HaRun:
    mode: str
    takeover_s: float | None
    take_over_work_s: float     # of which the new leader's own take-over (store read, twins rebuilt, clusters judged)
    migrations_total: int
    migrations_completed: int
    migrations_rolled_back: int
    migrations_in_flight: int   # not yet done when the leader crashed
    submits: int
    submits_in_flight: int      # unanswered when the leader crashed
    accepted: int
    lost: int
    duplicated: int
    half_recorded: int
    stale_writes: int
    refused_writes: int         # a paused leader's writes that fencing refused after it woke
    notes: list[str] = field(default_factory=list)


class Member:
    """One ``controlplane serve --etcd`` process."""

    def __init__(self, name: str, port: int, etcd: list[str], config: HaDrillConfig, db: str = "") -> None:
        self.name, self.port, self.etcd, self.config, self.db = name, port, etcd, config, db
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.admin = Path(tempfile.gettempdir()) / f"fedplane-ha-{os.getpid()}-{port}.cred"
        """Its admin credential (serve --admin-credentials): any member's token is every member's (they share the store)."""

    def start(self) -> None:
        c = self.config
        self.proc = subprocess.Popen(dies_with_starter(  # gone with the drill, even a SIGKILLed one
            [sys.executable, "-c", "from fedplane.cli import main; main()", "controlplane", "serve",
             *(["--db", self.db] if self.db else ["--etcd", ",".join(self.etcd), "--member", self.name]), "--port", str(self.port), "--agent-port", "0", "--metrics-port", "-1",
             "--twin-clusters", str(c.clusters), "--regions", str(c.regions), "--twin-nodes", str(c.nodes_per_cluster),
             "--ready-delay", str(c.ready_delay_s), "--probe-interval", str(c.probe_interval_s), "--admin-credentials", str(self.admin)]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        self.admin.unlink(missing_ok=True)


class Fleet:
    """The members and a client that finds the leader and follows its hints."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        first = members[0]
        token = credentialing.admin_token(first.admin, 60.0, lambda: first.proc is not None and first.proc.poll() is None)
        self.conns = {m.address: client.connect(m.address, token=token) for m in members}
        self.leader_hint = members[0].address
        self.lock = threading.Lock()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()

    def wait_leader(self, timeout_s: float, exclude: str = "", older_than: int = -1) -> tuple[Member, cp.LeaderInfo, float]:
        """The first member to answer as leader (token newer than ``older_than``); every member is asked in
        parallel, so one slow to answer does not delay seeing another lead. Returns it with when it answered."""
        deadline = time.monotonic() + timeout_s
        found: list[tuple[Member, cp.LeaderInfo, float]] = []
        done = threading.Event()

        def ask(m: Member) -> None:
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    info = self.conns[m.address].control.GetLeader(cp.GetLeaderRequest(), timeout=1.0)
                except grpc.RpcError:
                    info = None
                if info is not None and info.is_leader and info.fencing_token > older_than:
                    with self.lock:
                        found.append((m, info, time.monotonic()))
                        self.leader_hint = m.address
                    done.set()
                    return
                time.sleep(0.02)

        askers = [threading.Thread(target=ask, args=(m,), daemon=True) for m in self.members if m.address != exclude]
        for t in askers:
            t.start()
        done.wait(max(0.0, deadline - time.monotonic()))
        done.set()
        for t in askers:
            t.join()
        if not found:
            raise RuntimeError(f"no leader within {timeout_s:.0f}s")
        return found[0]

    def write(self, method: str, request: Any, deadline_s: float = 60.0) -> tuple[Any, grpc.StatusCode | None]:
        """Call ``method`` on the leader, retrying through crashes and hand-overs until an answer is definitive."""
        deadline = time.monotonic() + deadline_s
        order = [m.address for m in self.members]
        i = 0
        while time.monotonic() < deadline:
            with self.lock:
                target = self.leader_hint if i == 0 else order[i % len(order)]
            try:
                return getattr(self.conns[target].control, method)(request, timeout=CALL_S), None
            except grpc.RpcError as exc:
                code = exc.code()
                hint = dict(exc.trailing_metadata() or ()).get("fedplane-leader", "")  # type: ignore[attr-defined]
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    if hint and hint in self.conns:
                        with self.lock:
                            self.leader_hint = hint
                        i = 0
                    else:
                        i += 1
                    time.sleep(0.05)
                    continue
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                    i += 1
                    time.sleep(0.1)
                    continue
                return None, code
        return None, grpc.StatusCode.DEADLINE_EXCEEDED

    def read(self, method: str, request: Any) -> Any:
        answer, code = self.write(method, request, 30.0)  # reads go to the leader too: it knows readiness
        if code is not None:
            raise RuntimeError(f"{method} failed: {code.name}")
        return answer


def _spec(name: str, replicas: int = 2) -> cp.WorkloadSpec:
    return cp.WorkloadSpec(name=name, replicas=replicas, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64),
                           policy=cp.PlacementPolicy(spread=cp.SPREAD_CLUSTERS, movable=True))


def _placements(fleet: Fleet) -> dict[str, list[cp.ClusterPlacement]]:
    found = fleet.read("GetPlacements", cp.GetPlacementsRequest())
    return {w.workload: list(w.placements) for w in found.workloads}


def _settled(fleet: Fleet, desired: dict[str, int]) -> bool:
    if fleet.read("ListMigrations", cp.ListMigrationsRequest(active_only=True)).migrations:
        return False
    now = _placements(fleet)
    return all(sum(p.ready for p in now.get(w, [])) >= n for w, n in desired.items())


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def stale_writes(etcd: EtcdClient, first: int, tokens: list[int]) -> int:
    """Revisions after ``first`` written under a token older than the newest election before them."""
    key = base64.b64encode((PREFIX + WRITER_KEY).encode()).decode()
    last = int(etcd.post("/kv/range", {"key": key})["header"]["revision"])
    stale, rev = 0, first
    while rev <= last:
        found = etcd.post("/kv/range", {"key": key, "revision": str(rev)}).get("kvs", [])
        if found:
            mod = int(found[0]["mod_revision"])
            if mod == rev:
                stamp = json.loads(base64.b64decode(found[0]["value"]))
                newest = max((t for t in tokens if t < rev), default=0)
                stale += int(stamp["token"]) < newest
        rev += 1
    return stale


def _one_run(i: int, fleet: Fleet, etcd: EtcdClient | None, config: HaDrillConfig, steady: dict[str, int]) -> HaRun:
    solo = etcd is None  # one process on SQLite: it is killed and started again
    mode = "SIGKILL" if i % 2 == 0 or solo else "SIGSTOP"
    notes: list[str] = []
    leader, info, _ = fleet.wait_leader(30.0)
    tokens = [int(info.fencing_token)]
    # migrations, started just before the crash
    where = _placements(fleet)
    started: list[str] = []
    ordered = sorted(steady)
    for name in [ordered[(i * config.migrations + k) % len(ordered)] for k in range(min(config.migrations, len(ordered)))]:
        here = [p for p in where.get(name, []) if p.replicas > 0 and p.state == "placed"]
        if not here:
            continue
        source = here[0].cluster
        targets = [f"c{k}" for k in range(config.clusters) if f"c{k}" not in {p.cluster for p in where.get(name, [])}]
        m, code = fleet.write("StartMigration", cp.StartMigrationRequest(workload=name, source=source, target=targets[0] if targets else ""))
        if m is not None:
            started.append(m.id)
        else:
            notes.append(f"migration of {name} not started: {code.name if code else '?'}")
    # the submit burst, with the crash in its middle
    names = [f"r{i}-w{j}" for j in range(config.burst)]
    ids = {n: uuid.uuid4().hex for n in names}
    answers: dict[str, tuple[Any, grpc.StatusCode | None]] = {}
    answered = threading.Semaphore(0)

    def submit(name: str) -> None:
        answers[name] = fleet.write("SubmitWorkload", cp.SubmitWorkloadRequest(workload=_spec(name), request_id=ids[name]))
        answered.release()

    first_rev = 0 if etcd is None else int(etcd.post("/kv/range", {"key": "eA=="})["header"]["revision"])
    with ThreadPoolExecutor(config.burst) as pool:
        futures = [pool.submit(submit, n) for n in names]
        for _ in range(config.crash_after):
            answered.acquire(timeout=30)
        in_flight = config.burst - len(answers)
        active = fleet.read("ListMigrations", cp.ListMigrationsRequest(active_only=True)).migrations
        moving = sum(1 for m in active if m.id in started)
        crashed = time.monotonic()
        leader.signal(signal.SIGKILL if mode == "SIGKILL" else signal.SIGSTOP)
        if solo:
            assert leader.proc is not None
            leader.proc.wait(10)
            leader.start()  # the same file, a fresh process
        new, new_info, seen = fleet.wait_leader(60.0, exclude="" if solo else leader.address, older_than=-1 if solo else tokens[0])
        takeover = seen - crashed
        tokens.append(int(new_info.fencing_token))
        for f in futures:
            f.result()
    refused = 0
    if solo:
        pass
    elif mode == "SIGKILL":
        assert leader.proc is not None
        leader.proc.wait(10)
        leader.start()  # a fresh process: it joins as a standby
    else:
        leader.signal(signal.SIGCONT)  # the paused leader wakes believing it leads, and tries to write
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            try:
                woke = fleet.conns[leader.address].control.GetLeader(cp.GetLeaderRequest(), timeout=1.0)
            except grpc.RpcError:
                time.sleep(0.1)
                continue
            refused = int(woke.writes_refused)
            if not woke.is_leader:
                break
            time.sleep(0.1)
    # settle, then audit
    desired = dict(steady)
    accepted = {n for n, (a, _) in answers.items() if a is not None and a.accepted}
    for n, (a, code) in sorted(answers.items()):
        if n not in accepted:
            notes.append(f"submit {n} refused: {code.name if code else '; '.join(r.message for r in a.reasons)}")
    desired.update({n: 2 for n in accepted})
    if not _until(lambda: _settled(fleet, desired), config.settle_s):
        notes.append(f"not settled within {config.settle_s:.0f}s")
    now = _placements(fleet)
    place_decisions = {d.workload for d in fleet.read("ListDecisions", cp.ListDecisionsRequest(limit=20_000)).decisions if d.kind == "place"}
    lost = sum(1 for n in accepted if n not in now)
    half = sum(1 for n, (_, code) in answers.items() if code == grpc.StatusCode.ALREADY_EXISTS)
    duplicated = 0
    for name, rows in now.items():
        want = desired.get(name, 0)
        placed = sum(p.replicas for p in rows if p.state == "placed")
        if name in names and (placed != 2 or name not in place_decisions):
            half += 1
        ready = sum(p.ready for p in rows)
        lost += max(0, want - ready)
        duplicated += max(0, ready - want)
    migrations = {m.id: m for m in fleet.read("ListMigrations", cp.ListMigrationsRequest()).migrations}
    done = sum(1 for mid in started if migrations[mid].state == cp.MIGRATION_DONE)
    rolled = sum(1 for mid in started if migrations[mid].state in (cp.MIGRATION_FAILED, cp.MIGRATION_CANCELLED)
                 and "rolled back" in migrations[mid].error)
    for mid in started:
        if migrations[mid].state not in (cp.MIGRATION_DONE, cp.MIGRATION_FAILED, cp.MIGRATION_CANCELLED):
            notes.append(f"migration {mid} still {cp.MigrationState.Name(migrations[mid].state)}")
    stale = 0 if etcd is None else stale_writes(etcd, first_rev, tokens)
    for n in accepted:  # the next run starts from the steady fleet again
        fleet.write("DeleteWorkload", cp.DeleteWorkloadRequest(workload=n))
    return HaRun(mode, takeover, float(new_info.take_over_s), len(started), done, rolled, moving, config.burst, in_flight, len(accepted), lost, duplicated, half,
                 stale, refused, notes)


def run_ha_drill(runs: int, config: HaDrillConfig = HaDrillConfig(), on_run: Callable[[int, HaRun], None] = lambda i, r: None) -> tuple[dict[str, Any], list[HaRun]]:
    """``runs`` leader crashes on one replicated control plane; returns the summary (the drill JSON) and every run."""
    solo = config.members == 1
    cluster = EtcdCluster(3)
    tmp = tempfile.TemporaryDirectory(prefix="fedplane-crash-")
    endpoints = [] if solo else cluster.start()
    ports = free_ports(config.members)
    db = str(Path(tmp.name) / "cp.db") if solo else ""
    members = [Member(f"m{k}", ports[k], endpoints, config, db) for k in range(config.members)]
    fleet: Fleet | None = None
    results: list[HaRun] = []
    try:
        for m in members:
            m.start()
        fleet = Fleet(members)
        fleet.wait_leader(60.0)
        steady = {f"steady-{k}": 2 for k in range(config.steady_workloads)}
        for name in steady:
            answer, code = fleet.write("SubmitWorkload", cp.SubmitWorkloadRequest(workload=_spec(name), request_id=f"steady-{name}"))
            if answer is None or not answer.accepted:
                raise RuntimeError(f"steady workload {name} not placed ({code.name if code else 'refused'})")
        if not _until(lambda: _settled(fleet, steady), 30.0):  # type: ignore[arg-type]
            raise RuntimeError("the steady workloads never became ready")
        etcd = None if solo else EtcdClient(endpoints)
        for i in range(runs):
            result = _one_run(i, fleet, etcd, config, steady)
            results.append(result)
            on_run(i, result)
    finally:
        if fleet is not None:
            fleet.close()
        for m in members:
            m.stop()
        cluster.stop()
        tmp.cleanup()
    return summarise(results, config), results


def summarise(results: list[HaRun], config: HaDrillConfig) -> dict[str, Any]:
    takeovers = [r.takeover_s for r in results if r.takeover_s is not None]
    by_mode = {mode: [r.takeover_s for r in results if r.mode == mode and r.takeover_s is not None] for mode in ("SIGKILL", "SIGSTOP")}
    return {
        "scenario": "control-plane-crash",
        "ha": config.members,
        "runs": len(results),
        "takeover_s_p50": round(stats.percentile(takeovers, 50), 3),
        "takeover_s_p99": round(stats.percentile(takeovers, 99), 3),
        "takeover_s_max": round(max(takeovers, default=0.0), 3),
        "takeover_s_p50_by_crash": {k: round(stats.percentile(v, 50), 3) for k, v in by_mode.items()},
        "take_over_work_s_p50": round(stats.percentile([r.take_over_work_s for r in results], 50), 3),
        "take_over_work_s_max": round(max((r.take_over_work_s for r in results), default=0.0), 3),
        "migrations_completed": sum(r.migrations_completed for r in results),
        "migrations_rolled_back": sum(r.migrations_rolled_back for r in results),
        "migrations_total": sum(r.migrations_total for r in results),
        "migrations_in_flight_at_crash": sum(r.migrations_in_flight for r in results),
        "stale_writes": sum(r.stale_writes for r in results),
        "stale_writes_refused": sum(r.refused_writes for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "lost": sum(r.lost for r in results),
        "half_recorded": sum(r.half_recorded for r in results),
        "submits": sum(r.submits for r in results),
        "submits_in_flight_at_crash": sum(r.submits_in_flight for r in results),
        "submits_accepted": sum(r.accepted for r in results),
        "crashes": {"SIGKILL": sum(r.mode == "SIGKILL" for r in results), "SIGSTOP": sum(r.mode == "SIGSTOP" for r in results)},
        "notes": [f"run {i}: {n}" for i, r in enumerate(results) for n in r.notes],
        "evidence": (f"{config.members} 'fedplane controlplane serve --etcd' processes on a 3-member etcd (loopback); leader crashed by "
                     "SIGKILL (restarted fresh) or SIGSTOP (woken after the take-over); embedded twins rebuilt from etcd by the new leader; "
                     "stale writes audited from etcd's revision history") if config.members > 1 else (
                     "one 'fedplane controlplane serve --db' process (embedded mode) killed by SIGKILL mid-burst and mid-migration and "
                     "started again on the same SQLite file; twins rebuilt from it; stale writes: not applicable (one process, file lock)"),
        "fleet": {"clusters": config.clusters, "regions": config.regions, "nodes_per_cluster": config.nodes_per_cluster,
                  "steady_workloads": config.steady_workloads, "burst": config.burst, "migrations_per_run": config.migrations,
                  "ready_delay_s": config.ready_delay_s, "lease_ttl_s": 5},
    }
