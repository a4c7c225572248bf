"""``fedplane demo``: the whole system on the embedded twin, then a cluster outage, in one readable report.

The run is one cluster-outage drill (:class:`fedplane.lab.drills.failoverdrill.Drill`, so the demo measures exactly
what ``fedplane drill failover`` measures) with trace-shaped workloads and real agents
(:class:`fedplane.lab.drills.agentfleet.AgentFleet`): the control plane's gRPC service with 3 twin clusters
in 2 regions, one ``fedplane agent`` process per twin node placing the pods, then one cluster goes
dark (its agents die, its API stops answering), the planner fails its workloads over and the
surviving clusters' agents place the recreated pods. Then, in a few seconds of simulated time, one
workload is autoscaled by the control plane (:mod:`fedplane.lab.demo.autoscaledemo`). The report is
printed as tables and written as JSON beside PNG timelines in the output directory.

Pods are a seeded sample of the openb trace; their CPU and memory requests are scaled by one factor
so that all of them fill ``FILL`` of the demo fleet (the 9 edge nodes are far smaller than the trace's
1,523-node cluster) and two clusters can absorb the third's. GPU requests are dropped: the demo's
edge nodes have none and workload templates count whole GPUs while most trace pods ask for shares.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.metrics import Metrics
from fedapi import controlplane_pb2 as cp
from fedcore import reporting, stats
from fedcore.pods import Pod
from fedcore.traces import TraceError, locate, openb, synthetic
from fedplane.lab.demo import autoscaledemo as autoscale_demo
from fedplane.lab.drills import failoverdrill
from fedplane.lab.drills.agentfleet import AgentFleet, Histogram

FILL = 0.4
NODE_CPU_MILLI, NODE_MEMORY_MIB = 32_000, 131_072
RECOVERY_TARGET_S = 10.0


@dataclass(frozen=True, slots=True)
class DemoSettings:
    pods: int = 300
    seed: int = 0
    traces: str | None = None
    out: Path = Path("fedplane-demo")
    clusters: int = 3
    regions: int = 2
    nodes_per_cluster: int = 3


@dataclass(frozen=True, slots=True)
class Workloads:
    specs: list[cp.WorkloadSpec]
    source: str
    scale: float


def sample_pods(settings: DemoSettings, notice: Callable[[str], None]) -> tuple[list[Pod], str]:
    """A seeded sample of the openb pod list, or synthetic pods (with a notice) when no traces are found."""
    try:
        path = locate.trace_file(None, locate.OPENB_PODS, settings.traces)
        pods = openb.load_pods(path)
        return random.Random(settings.seed).sample(pods, min(settings.pods, len(pods))), f"openb trace ({path.name}), seed {settings.seed}"
    except TraceError as exc:
        if settings.traces is not None:
            raise
        notice(f"no traces ({exc}); using {settings.pods} synthetic pods instead")
        return [i.pod for i in synthetic.generate(settings.pods, settings.seed)], f"synthetic pods, seed {settings.seed}"


def workloads(pods: list[Pod], source: str, capacity_cpu: int, capacity_mem: int) -> Workloads:
    """Scale requests to fill ``FILL`` of the fleet; pods of one (cpu, memory) shape become one workload's replicas."""
    scale = min(1.0, FILL * capacity_cpu / max(1, sum(p.cpu_milli for p in pods)),
                FILL * capacity_mem / max(1, sum(p.memory_mib for p in pods)))
    shapes = Counter((max(50, round(p.cpu_milli * scale / 50) * 50), max(64, round(p.memory_mib * scale / 64) * 64)) for p in pods)
    specs = [
        cp.WorkloadSpec(name=f"trace-{i:02d}", replicas=n, pod=cp.PodTemplate(cpu_milli=cpu, memory_mib=mem),
                        policy=cp.PlacementPolicy(spread=cp.SPREAD_REGIONS, movable=True))
        for i, ((cpu, mem), n) in enumerate(shapes.most_common())
    ]
    return Workloads(specs, source, scale)


@dataclass(slots=True)
class DemoRun:
    """What the run produced, for the report."""

    settings: DemoSettings
    workloads: Workloads
    drill: failoverdrill.Drill
    result: failoverdrill.RunResult
    agents: int
    initial: Histogram  # agents' decisions for the first placement (all agents)
    final: Histogram    # ... over the whole run, survivors only (they placed the failed-over pods too)
    autoscale: dict[str, Any]  # one workload autoscaled (fedplane.lab.demo.autoscaledemo.run)


async def run(settings: DemoSettings, notice: Callable[[str], None] = lambda m: None) -> DemoRun:
    pods, source = sample_pods(settings, notice)
    nodes = settings.clusters * settings.nodes_per_cluster
    load = workloads(pods, source, nodes * NODE_CPU_MILLI, nodes * NODE_MEMORY_MIB)
    config = failoverdrill.DrillConfig(
        clusters=settings.clusters, regions=settings.regions, nodes_per_cluster=settings.nodes_per_cluster,
        agents_bind=True, node_cpu_milli=NODE_CPU_MILLI, node_memory_mib=NODE_MEMORY_MIB, ready_timeout_s=60.0, deadline_s=30.0,
    )
    fleets: list[AgentFleet] = []
    initial: list[Histogram] = []

    def source_factory(names: dict[str, list[str]], clock: Callable[[], float], credentials: Mapping[str, Path]) -> failoverdrill.EvidenceSource:
        fleets.append(AgentFleet(names, clock, credentials=credentials))
        return fleets[-1]

    async def on_ready() -> None:
        initial.append(await fleets[0].decisions())

    with tempfile.TemporaryDirectory(prefix="fedplane-demo-") as tmp:
        drill = failoverdrill.Drill("cluster-outage", settings.seed, config, Path(tmp), source_factory, Metrics(), load.specs, on_ready)
        result = await drill.run()
    fleet = fleets[0]
    scaled = autoscale_demo.run(Path(settings.traces) if settings.traces else None)
    return DemoRun(settings, load, drill, result, len(fleet.agents), initial[0], fleet.final, scaled)


def summary(demo: DemoRun) -> dict[str, Any]:
    """The report as one JSON-able object (also what the tables print)."""
    d, r = demo.drill, demo.result
    victim = d.victims[0]
    before, at_recovery = d.samples[0][1], d.samples[-1][1]
    after = d.ready_per_cluster()
    verdicts = [x for x in d.decisions if x.kind.startswith("verdict:") and x.source == victim]
    down = next((x for x in reversed(verdicts) if x.kind in ("verdict:down", "verdict:partitioned")), None)
    failovers = [x for x in d.decisions if x.kind == "failover"]
    ok = r.recovery_s is not None and r.recovery_s <= RECOVERY_TARGET_S and r.lost == 0 and r.duplicated == 0
    return {
        "workload": {"source": demo.workloads.source, "pods": sum(s.replicas for s in demo.workloads.specs),
                     "workloads": len(demo.workloads.specs), "request_scale": round(demo.workloads.scale, 4)},
        "fleet": {"clusters": d.config.clusters, "regions": d.config.regions, "nodes": len(d.twins) * d.config.nodes_per_cluster,
                  "agent_processes": demo.agents},
        "placements": [{"cluster": c, "region": d.regions[c], "ready_before_fault": before[c], "ready_at_recovery": at_recovery[c],
                        "ready_after_heal": after[c]} for c in sorted(d.twins)],
        "latency": {
            "controlplane_decision_ms_p50": round(1000 * stats.percentile(d.submit_s, 50), 1),
            "controlplane_decision_ms_p99": round(1000 * stats.percentile(d.submit_s, 99), 1),
            "agent_decision_s_p50": _finite(demo.initial.quantile(0.5)), "agent_decision_s_p99": _finite(demo.initial.quantile(0.99)),
            "agent_decisions": int(demo.initial.count), "all_pods_ready_s": round(d.ready_s, 2),
            "agent_decision_s_p99_whole_run_survivors": _finite(demo.final.quantile(0.99)),
        },
        "drill": {
            "scenario": "cluster-outage", "victim": victim, "pods_affected": before[victim],
            "detect_s": None if r.detect_s is None else round(r.detect_s, 3),
            "recovery_s": None if r.recovery_s is None else round(r.recovery_s, 3),
            "pods_lost": r.lost, "pods_duplicated": r.duplicated, "duplicate_binds_refused": r.refused_binds, "failover_migrations": r.failovers,
            "verdict": "PASS" if ok else "FAIL",
            "evidence": _evidence(victim, down, failovers),
        },
        "autoscale": {k: v for k, v in demo.autoscale.items() if k != "timeline"},
    }


def _evidence(victim: str, down: cp.Decision | None, failovers: list[cp.Decision]) -> list[str]:
    """The verdict on the victim and a sample failover, with the control plane's own reasons."""
    lines = [f"{down.kind} on {victim}: " + "; ".join(x.message for x in down.reasons) if down else f"no failure verdict on {victim}"]
    if failovers:
        f = failovers[-1]
        lines.append(f"{len(failovers)} failover migrations, e.g. {f.workload} {f.source} -> {f.target}: " + "; ".join(x.message for x in f.reasons))
    return lines


def plot(demo: DemoRun, path: Path) -> Path:
    """Ready pods per cluster from the fault to recovery; the drill's recovery measure on the right axis."""
    d, r = demo.drill, demo.result
    xs = [t for t, _ in d.samples]
    shares = dict(r.timeline)
    detected = "not detected" if r.detect_s is None else f"detected {r.detect_s:.2f} s"
    recovered = "not recovered" if r.recovery_s is None else f"recovered {r.recovery_s:.2f} s"
    return reporting.plot_series(
        path, f"fedplane demo: {d.victims[0]} goes dark at t=0 ({detected}, {recovered})", xs,
        {f"{c} ready pods": [s[c] for _, s in d.samples] for c in sorted(d.twins)}, "seconds since the outage",
        right={"affected workloads' replicas ready on healthy clusters (%)": [100 * shares.get(t, 0.0) for t in xs]},
        right_label="replicas ready elsewhere, %", ylabel="ready pods per cluster",
        marks=[(0.0, f"{d.victims[0]} dark"), *([(r.detect_s, "detected")] if r.detect_s is not None else []),
               *([(r.recovery_s, "recovered")] if r.recovery_s is not None else [])],
    )


def write(demo: DemoRun, out: Path) -> dict[str, Any]:
    """Print the report's tables, write ``demo-report.json`` and ``demo-timeline.png``; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    report = summary(demo)
    report["png"] = str(plot(demo, out / "demo-timeline.png"))
    report["autoscale"]["png"] = str(autoscale_demo.plot(demo.autoscale, out / "demo-autoscale.png"))
    (out / "demo-report.json").write_text(json.dumps(report, indent=2))
    w, f = report["workload"], report["fleet"]
    reporting.table(f"{w['pods']} pods in {w['workloads']} workloads from {w['source']} (requests x{w['request_scale']}); "
                    f"{f['clusters']} clusters in {f['regions']} regions, {f['agent_processes']} agent processes",
                    report["placements"])
    reporting.table("decision latency", [{"metric": k, "value": v} for k, v in report["latency"].items()])
    reporting.table("cluster-outage drill", [{"metric": k, "value": v} for k, v in report["drill"].items() if k != "evidence"])
    for line in report["drill"]["evidence"]:
        reporting.stdout.print(f"evidence: {line}")
    autoscale_demo.show(report["autoscale"])
    reporting.stdout.print(f"report: {out / 'demo-report.json'}  timelines: {report['png']}, {report['autoscale']['png']}")
    return report


def _finite(value: float) -> float | None:
    """JSON has no nan/inf: an empty or overflowing histogram says null."""
    return value if math.isfinite(value) else None
