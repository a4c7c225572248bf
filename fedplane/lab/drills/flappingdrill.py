"""The flapping drill: a cluster goes down and comes back every 20 s; its workloads must move out once and home once.

Each run builds the failover drill's world (twin clusters, the served control plane, real agents: :class:`Drill`),
submits workloads with a ``stable`` failback policy (:class:`Flapping`: a 15 s window) in groups of three, then takes
one cluster down (outage, agents killed) and back (healed, agents restarted) six times, 20 s apart, and leaves it
healthy. Measured per run, from the back end and the journal, never from logs: the moves each workload
made (migrations the journal holds for it), when every workload was home again (its pre-fault replicas ready on the
victim, nothing running beyond desired) relative to the end of the stabilization window the policy asks after the
last heal (the window stretched by the falls, :func:`controlplane.failbacks.required_s`), then pods lost, duplicated
and evicted from healthy nodes.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.failbacks import required_s
from controlplane.metrics import Metrics
from controlplane.planner import PlannerConfig
from fedapi import controlplane_pb2 as cp
from fedapi import controlplane_pb2_grpc
from fedcore import stats
from fedcore.backends.model import Phase
from fedplane.lab.drills import agentfleet
from fedplane.lab.drills.failoverdrill import POLL_S, Drill, DrillConfig, SourceFactory

@dataclass(frozen=True, slots=True)
class Flapping:
    period_s: float = 20.0
    """Down for half of it, up for the other half (the issue's "down and up every 20 s")."""
    flaps: int = 6
    window_s: float = 15.0
    """The workloads' stabilization window: longer than one up-phase, so no window completes while the cluster flaps."""


GROUP_SIZE = 3
HOME_GRACE_S = 30.0
"""How long after the window's end the drill waits for every workload to be home before calling the run failed."""
BUDGET = PlannerConfig(evictions_per_window=2, window_s=30.0)
"""The drill's eviction budget: two moves per cluster per 30 s (a return of each group at once)."""


@dataclass(slots=True)
class FlapResult:
    flaps: int
    moves: dict[str, int]
    returned_home_s: float | None
    """Seconds from the end of the stabilization window to every workload home (None: not home in time)."""
    window_s: float
    lost: int
    duplicated: int
    healthy_evicted: int
    early_returns: int
    """Returns started before the window ended (hysteresis broken)."""


class FlappingDrill(Drill):
    scenarios = ("flapping",)
    flapping = Flapping()

    async def _run(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> FlapResult:  # type: ignore[override]
        for name, region in self.regions.items():
            await stub.RegisterCluster(cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name=name, region=region, backend=cp.BACKEND_TWIN)))
        await self._until(lambda: self._all_healthy(stub), 10.0, "clusters never became healthy")
        desired = {}
        for i, spec in enumerate(self.workloads):
            spec.policy.failback, spec.policy.failback_window_s, spec.policy.group = "stable", self.flapping.window_s, f"g{i // GROUP_SIZE}"
            decision = await stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec))
            if not decision.accepted:
                raise RuntimeError(f"drill workload {spec.name} not placed: {[r.message for r in decision.reasons]}")
            desired[spec.name] = spec.replicas
        await self._until(lambda: self._ready_everywhere(desired), self.config.ready_timeout_s, "workloads never became ready")
        victim = self.rng.choice(sorted(self.twins))
        home = {w: self._ready_on(victim, w) for w in desired}
        falls: list[float] = []
        f = self.flapping
        for _ in range(f.flaps):
            falls.append(self.clock())
            self.twins[victim].outage()
            self.source.kill_agents(victim)
            await asyncio.sleep(f.period_s / 2)
            self.twins[victim].heal()
            self.source.heal(victim)
            healed = self.clock()
            if len(falls) < f.flaps:
                await asyncio.sleep(f.period_s / 2)
        need, _ = required_s(f.window_s, falls, healed)
        window_end = healed + need
        home_at = None
        while self.clock() < window_end + HOME_GRACE_S:
            if self._home(victim, home, desired):
                home_at = self.clock()
                break
            await asyncio.sleep(POLL_S)
        await self._settle()
        lost, duplicated = self._count(desired)
        plane = self._plane()
        moves = {w: 0 for w in desired}
        early = 0
        for m in plane.journal.all():
            moves[m.workload] = moves.get(m.workload, 0) + 1
            early += m.kind.value == "return" and m.created < window_end - 0.5  # the plane's clock is the drill's
        evicted = sum(n for c, t in self.twins.items() if c != victim for n in t.safety.released.values())
        return FlapResult(len(falls), moves, None if home_at is None else home_at - window_end, need, lost, duplicated, evicted, early)

    def _ready_on(self, cluster: str, workload: str) -> int:
        return sum(1 for p in self.twins[cluster].snapshot(workload) if p.ready)

    def _home(self, victim: str, home: dict[str, int], desired: dict[str, int]) -> bool:
        """Ground truth: every workload's pre-fault replicas ready on the victim, none running beyond desired."""
        for w, want in desired.items():
            running = [p for t in self.twins.values() for p in t.snapshot(w) if p.phase is Phase.RUNNING]
            if self._ready_on(victim, w) != home[w] or len(running) != want or not all(p.ready for p in running):
                return False
        return True


async def run_flapping(
    runs: int, seed: int = 0, config: DrillConfig = DrillConfig(planner=BUDGET), source: SourceFactory = agentfleet.AgentFleet,
    on_run: Callable[[int, FlapResult], None] = lambda i, r: None, evidence: str = agentfleet.EVIDENCE, flapping: Flapping = Flapping(),
) -> tuple[dict[str, Any], list[FlapResult]]:
    """``runs`` runs of the flapping drill; returns the summary (the drill JSON) and every run's result."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    metrics, results = Metrics(), []
    with tempfile.TemporaryDirectory(prefix="fedplane-drill-") as tmp:
        for i in range(runs):
            drill = FlappingDrill("flapping", seed + i, config, Path(tmp), source, metrics)
            drill.flapping = flapping
            result = await drill.run()  # type: ignore[arg-type]
            results.append(result)
            on_run(i, result)
    homes = [r.returned_home_s for r in results if r.returned_home_s is not None]
    return {
        "scenario": "flapping",
        "runs": len(results),
        "flaps": min(r.flaps for r in results),
        "moves_per_workload_max": max(max(r.moves.values(), default=0) for r in results),
        "returned_home": len(homes),
        "returned_home_s_p99": round(stats.percentile(homes, 99), 3) if homes else None,
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "healthy_evicted": sum(r.healthy_evicted for r in results),
        "early_returns": sum(r.early_returns for r in results),
        "window_s": flapping.window_s,
        "window_after_flapping_s": max(r.window_s for r in results),
        "period_s": flapping.period_s,
        "eviction_budget": f"{config.planner.evictions_per_window} per cluster per {config.planner.window_s:g}s",
        "groups_of": GROUP_SIZE,
        "moves_per_run": [dict(sorted(r.moves.items())) for r in results],
        "evidence": evidence,
    }, results

