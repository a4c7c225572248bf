"""The stateful drill: a key-value service's volume handed across clusters while a client writes, killed mid-hand-off.

Each run builds the failover drill's world (:class:`Drill`: twin clusters, the served control plane, real agents)
with a volume host per cluster (:class:`~fedcore.backends.volumes.DirectoryVolumes` under the run's directory),
submits one ``stateful`` workload and seeds its volume with :data:`STATE_MIB` MiB. A lab kubelet runs one real
:mod:`~fedplane.lab.drills.kvservice` process for every running pod of it, on its cluster's volume at the pod's
epoch, and kills it when the pod goes; a client writes without pause to the newest replica and counts the writes it
got ``OK`` for. Then the drill asks the control plane to migrate the workload (gRPC ``StartMigration``), and in
two runs of three kills something mid-hand-off at a seeded step: the control plane (a crash, restarted from its
journal) or the source's key-value process (SIGKILL). Judged from the volumes and the writers, not from logs:
``writes_lost`` counts acknowledged writes missing from the final volume's log, ``two_writers_s`` the time the
writers' own audit trails overlap across epochs, ``migration_s`` the time from the request to the migration done
and the client's first acknowledged write at the target.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.metrics import Metrics
from controlplane.migrations import SimulatedCrash
from fedapi import controlplane_pb2 as cp
from fedapi import controlplane_pb2_grpc
from fedcore import stats
from fedcore.backends.model import Phase
from fedcore.agentcmd import dies_with_starter
from fedcore.backends.volumes import DirectoryVolumes
from fedcore.loopback import free_ports
from fedplane.lab.drills import agentfleet
from fedplane.lab.drills.failoverdrill import POLL_S, Drill, DrillConfig, SourceFactory

STATE_MIB = 64
FAULTS = ("plane", "source", "none")
"""Run i kills FAULTS[i % 3] mid-hand-off."""
POINTS = (("fence-source", "after"), ("checkpoint", "before"), ("checkpoint", "after"), ("restore-target", "before"),
          ("restore-target", "after"))
WRITE_BEFORE_S = 3.0
WRITE_AFTER_S = 3.0
"""The client writes this long before the migration and after it: a few hundred fsynced writes a run on a busy host."""
MIGRATION_DEADLINE_S = 40.0
CONFIG = DrillConfig(clusters=2, regions=2, nodes_per_cluster=2, workloads=0)


@dataclass(slots=True)
class StateResult:
    acknowledged: int
    lost: int
    two_writers_s: float
    migration_s: float | None
    state_mib: float
    fault: str
    point: str
    killed: bool
    refused: int
    """Writes the fence refused (the old replica asked to write after the hand-off began)."""


class HandoffFault:
    """The control plane's crash hook for one run: at one hand-off step, crash the plane or kill the source replica."""

    def __init__(self, fault: str, point: tuple[str, str], kill_source: Callable[[], bool]) -> None:
        self.fault, self.point, self.kill_source = fault, point, kill_source
        self.armed = self.fired = False

    def __call__(self, step: str, when: str) -> None:
        if not self.armed or self.fired or (step, when) != self.point or self.fault == "none":
            return
        self.fired = True
        if self.fault == "plane":
            raise SimulatedCrash(f"control plane crashed at {step}/{when}")
        self.fired = self.kill_source()


@dataclass(slots=True)
class Replica:
    cluster: str
    epoch: int
    port: int
    process: subprocess.Popen[bytes]


@dataclass(slots=True)
class Client:
    """Writes ``k<n> v<n>`` to the newest live replica; what it got ``OK`` for is acknowledged."""

    acked: dict[str, tuple[str, int, float]] = field(default_factory=dict)  # key -> (value, epoch, when)
    refused: int = 0
    n: int = 0


class StatefulDrill(Drill):
    scenarios = ("stateful",)

    def __init__(self, scenario: str, seed: int, config: DrillConfig, workdir: Path, source: SourceFactory, metrics: Metrics) -> None:
        super().__init__(scenario, seed, config, workdir, source, metrics)
        root = workdir / f"run-{seed}"
        self.volumes = DirectoryVolumes({c: root / "volumes" / c for c in self.twins}, root / "snapshots")
        self.audit = root / "audit"
        self.audit.mkdir(parents=True)
        self.fault = HandoffFault(FAULTS[seed % len(FAULTS)], self.rng.choice(POINTS), self._kill_source)
        self.crash = self.fault  # type: ignore[assignment]
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.client = Client()
        self.stopping = False
        """Ends the kubelet and the client (a flag, not a cancel: ``wait_for`` in Python 3.11 may swallow a cancel)."""
        self.migrating_from = ""

    async def _run(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> StateResult:  # type: ignore[override]
        for name, region in self.regions.items():
            await stub.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name=name, region=region, backend=cp.BACKEND_TWIN)))
        await self._until(lambda: self._all_healthy(stub), 10.0, "clusters never became healthy")
        source = self.rng.choice(sorted(self.twins))
        data = self.volumes.volume(source, "kv") / "data"
        data.mkdir(parents=True)
        with open(data / "blob.bin", "wb") as f:  # the bulk of the state: what a hand-off must carry
            for _ in range(STATE_MIB):
                f.write(os.urandom(1 << 20))
        spec = cp.WorkloadSpec(name="kv", replicas=1, stateful=True, pod=cp.PodTemplate(cpu_milli=500, memory_mib=512),
                               policy=cp.PlacementPolicy(spread=cp.SPREAD_NONE, clusters=[source], movable=True))
        decision = await stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec))
        if not decision.accepted:
            raise RuntimeError(f"kv not placed: {[r.message for r in decision.reasons]}")
        kubelet = asyncio.create_task(self._kubelet())
        writer = asyncio.create_task(self._write())
        try:
            await self._until(self._serving, self.config.ready_timeout_s + 10, "kv never served a write")
            await asyncio.sleep(WRITE_BEFORE_S)
            target = next(c for c in sorted(self.twins) if c != source)
            self.migrating_from = source
            self.fault.armed = True
            started = self.clock()
            m = await stub.StartMigration(cp.StartMigrationRequest(workload="kv", source=source, target=target, force=True))
            done_at = await self._migrated(m.id, started)
            first_new = await self._first_ack_after(m.epoch, started)
            migration_s = None if done_at is None or first_new is None else max(done_at, first_new) - started
            await asyncio.sleep(WRITE_AFTER_S)
        finally:
            self.stopping = True
            await asyncio.gather(writer, kubelet, return_exceptions=True)
            for r in list(self.replicas.values()):
                self._stop(r)
        migration = self._plane().journal.get(m.id)
        ref = json.loads(migration.checkpoint or "{}") if migration else {}
        lost = self._lost(target)
        fault = self.fault
        return StateResult(len(self.client.acked), lost, self._two_writers_s(), migration_s, ref.get("bytes", 0) / 2**20,
                           fault.fault, "/".join(fault.point), fault.fired, self.client.refused)

    # -- the lab kubelet: a key-value process per running pod -------------------------------------------
    async def _kubelet(self) -> None:
        while not self.stopping:
            want = {(c, p.epoch) for c, t in self.twins.items() for p in t.snapshot("kv") if p.phase is Phase.RUNNING}
            for key in want - set(self.replicas):
                cluster, epoch = key
                port = free_ports(1)[0]
                argv = [sys.executable, "-m", "fedplane.lab.drills.kvservice", "--volume", str(self.volumes.volume(cluster, "kv")),
                        "--epoch", str(epoch), "--port", str(port), "--audit", str(self.audit / f"{cluster}-{epoch}.log")]
                # dies with the drill even when it is SIGKILLed (a replica in a session of its own would run on)
                self.replicas[key] = Replica(cluster, epoch, port, subprocess.Popen(dies_with_starter(argv), start_new_session=True))
            for key in set(self.replicas) - want:
                self._stop(self.replicas.pop(key))
            await asyncio.sleep(POLL_S)

    def _stop(self, r: Replica) -> None:
        if r.process.poll() is None:
            os.killpg(r.process.pid, signal.SIGKILL)
        r.process.wait()

    def _kill_source(self) -> bool:
        """SIGKILL the source's key-value process (the hand-off's other failure: the source dies during it)."""
        for r in list(self.replicas.values()):  # called from the plane's tick
            if r.cluster == self.migrating_from and r.process.poll() is None:
                os.killpg(r.process.pid, signal.SIGKILL)
                return True
        return False

    # -- the client ------------------------------------------------------------------------------
    async def _write(self) -> None:
        conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        while not self.stopping:
            live = sorted((r for r in self.replicas.values() if r.process.poll() is None), key=lambda r: -r.epoch)
            if not live:
                await asyncio.sleep(0.01)
                continue
            r = live[0]
            key, value = f"k{self.client.n}", f"v{self.client.n}"
            try:
                async with asyncio.timeout(2.0):
                    if r.port not in conns:
                        conns[r.port] = await asyncio.open_connection("127.0.0.1", r.port)
                    reader, w = conns[r.port]
                    w.write(f"PUT {key} {value}\n".encode())
                    reply = (await reader.readline()).decode().strip()
            except (OSError, asyncio.TimeoutError):
                conns.pop(r.port, None)
                await asyncio.sleep(0.02)
                continue
            if reply == "OK":
                self.client.acked[key] = (value, r.epoch, self.clock())
                self.client.n += 1
            elif reply == "FENCED":
                self.client.refused += 1
                await asyncio.sleep(0.01)
            else:
                conns.pop(r.port, None)
                await asyncio.sleep(0.02)
        for _, w in conns.values():
            w.close()

    async def _serving(self) -> bool:
        return len(self.client.acked) > 0

    async def _migrated(self, mid: str, started: float) -> float | None:
        while self.clock() - started < MIGRATION_DEADLINE_S:
            if self.running is not None and self.running.loop.done():
                await self._crash_and_restart()
            m = self._plane().journal.get(mid)
            if m is not None and m.state.terminal:
                return self.clock() if m.state.value == "done" else None
            await asyncio.sleep(POLL_S)
        return None

    async def _first_ack_after(self, epoch: int, started: float) -> float | None:
        while self.clock() - started < MIGRATION_DEADLINE_S:
            new = [t for _, e, t in self.client.acked.values() if e >= epoch]
            if new:
                return min(new)
            await asyncio.sleep(POLL_S)
        return None

    # -- judging from the volumes and the writers ---------------------------------------------------------
    def _lost(self, target: str) -> int:
        """Acknowledged writes whose value the final volume's log does not hold."""
        log = self.volumes.volume(target, "kv") / "data" / "kv.log"
        held: dict[str, str] = {}
        if log.exists():
            for line in log.read_text().splitlines():
                key, _, value = line.partition(" ")
                held[key] = value
        return sum(1 for key, (value, _, _) in self.client.acked.items() if held.get(key) != value)

    def _two_writers_s(self) -> float:
        """Seconds during which writers of two epochs both wrote: the overlap of each epoch's first-to-last write."""
        spans = []
        for path in self.audit.glob("*.log"):
            times = [float(line.split()[0]) for line in path.read_text().splitlines() if line]
            if times:
                spans.append((min(times), max(times)))
        overlap = 0.0
        for i, (a0, a1) in enumerate(spans):
            for b0, b1 in spans[i + 1:]:
                overlap += max(0.0, min(a1, b1) - max(a0, b0))
        return overlap


async def run_stateful(
    runs: int, seed: int = 0, config: DrillConfig = CONFIG, source: SourceFactory = agentfleet.AgentFleet,
    on_run: Callable[[int, StateResult], None] = lambda i, r: None, evidence: str = agentfleet.EVIDENCE,
) -> tuple[dict[str, Any], list[StateResult]]:
    """``runs`` runs of the stateful drill; returns the summary (the drill JSON) and every run's result."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    metrics, results = Metrics(), []
    with tempfile.TemporaryDirectory(prefix="fedplane-drill-") as tmp:
        for i in range(runs):
            result = await StatefulDrill("stateful", seed + i, config, Path(tmp), source, metrics).run()  # type: ignore[arg-type]
            results.append(result)
            on_run(i, result)
    migrations = [r.migration_s for r in results if r.migration_s is not None]
    return {
        "scenario": "stateful",
        "runs": len(results),
        "writes_acknowledged": sum(r.acknowledged for r in results),
        "writes_lost": sum(r.lost for r in results),
        "two_writers_s": round(sum(r.two_writers_s for r in results), 3),
        "migration_s_p99": round(stats.percentile(migrations, 99), 3) if migrations else None,
        "state_mib": round(min(r.state_mib for r in results), 1),
        "killed_mid_handoff": sum(1 for r in results if r.killed),
        "migrated": len(migrations),
        "writes_refused_by_fence": sum(r.refused for r in results),
        "faults": [f"{r.fault}@{r.point}" + ("" if r.killed or r.fault == "none" else " (not fired)") for r in results],
        "per_run": [{"acknowledged": r.acknowledged, "lost": r.lost, "migration_s": r.migration_s} for r in results],
        "evidence": evidence,
    }, results
