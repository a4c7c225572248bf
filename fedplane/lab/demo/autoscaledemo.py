"""``fedplane demo``'s autoscaling part: one workload autoscaled by the control plane, in a few seconds.

A small second control plane (in-process, on a simulated clock: no agents, nothing listening) runs
one workload on a twin cluster whose pods take ``STARTUP_S`` to become ready. Its demand is a real
series' held-out part (a DLRM service's instance count, whose day swings 2×; Google 2019 CPU from
the ``autoscale`` extra when no traces are found) replayed ``SPEED``× faster, and the forecast-fed HPA scales it through the
twin back end exactly as ``fedplane autoscale enable`` does. The workload starts cold (2 replicas);
the report says how replicas followed demand, how much of it was late once the first scale-up was
ready, the journaled reasons; a PNG shows demand, desired and ready pods.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.autoscaling.specs import AutoscaleSpec
from fedcore import reporting

STARTUP_S = 30.0     # a new pod's start-up on the demo's twin cluster (simulated seconds)
SPEED = 60.0         # series seconds per simulated second: a 300 s sample every 5 s
SPAN_S = 1440.0      # simulated seconds: a day of the series
STEP_S = 2.0         # the control plane's reconcile period in the demo
PEAK_REPLICAS = 20.0


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    demand: float
    desired: int
    ready: int


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def series_name(traces: Path | None) -> str:
    """A DLRM service from the traces folder, else a packaged series (HPA with a notice if neither is there)."""
    from fedcore.traces.errors import TraceError
    from fedcore.traces.locate import DLRM, traces_dir

    try:
        if (traces_dir(traces) / DLRM).is_file():
            return "dlrm-app_87"
    except TraceError:
        pass
    return "google2019-cpu"


def run(traces: Path | None = None) -> dict[str, Any]:
    """Autoscale one workload for ``SPAN_S`` simulated seconds; the report section (samples under ``timeline``)."""
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Policy, Template, Workload

    clock = _Clock()
    with tempfile.TemporaryDirectory(prefix="fedplane-demo-autoscale-") as tmp:
        plane = ControlPlane(Path(tmp) / "cp.db", Backends(clock, twin_ready_delay_s=STARTUP_S), clock, traces=traces)
        try:
            plane.register_cluster(ClusterSpec("edge-a", "r0"))
            plane.tick(0.0)
            plane.submit(Workload("web", 2, Template(250, 256), Policy(clusters=("edge-a",))), dry_run=False)
            spec = AutoscaleSpec("web", series_name(traces), startup_s=STARTUP_S, peak_replicas=PEAK_REPLICAS, speed=SPEED, max_replicas=60)
            status = plane.autoscaling.enable(spec, 0.0)
            samples = []
            while clock.t < SPAN_S:
                clock.t += STEP_S
                plane.tick(clock.t)
                s = plane.autoscaling.status("web")
                samples.append(Sample(clock.t, s.demand, s.desired, s.ready))
            decisions = [d for d in reversed(plane.registry.decisions(10_000)) if d.kind == "autoscale"]  # oldest first
        finally:
            plane.close()
    warm = next((i for i, s in enumerate(samples) if s.ready >= s.demand), len(samples))
    served = samples[warm:]  # once the cold start's first scale-up is ready
    demand = sum(s.demand for s in served)
    late = sum(max(0.0, s.demand - s.ready) for s in served)
    return {
        "workload": "web", "series": spec.series, "policy": spec.policy, "startup_s": STARTUP_S, "speed": SPEED,
        "series_hours": round(SPAN_S * SPEED / 3600, 1), "fallback": status.fallback or None,
        "replicas_min": min(s.desired for s in samples), "replicas_max": max(s.desired for s in samples),
        "scaling_decisions": len(decisions), "warm_after_s": samples[warm].t if served else None,
        "late_pct_after_warm": round(100 * late / max(demand, 1e-12), 3),
        "util_mean": round(100 * sum(min(1.0, s.demand / max(s.ready, 1)) for s in served) / max(len(served), 1), 1),
        "reasons": [f"t={d.at:.0f} s: {d.reasons[0]}" for d in (decisions if len(decisions) <= 4 else decisions[:2] + decisions[-2:])],
        "timeline": [[s.t, round(s.demand, 2), s.desired, s.ready] for s in samples],
    }


def plot(section: dict[str, Any], path: Path) -> Path:
    t, demand, desired, ready = zip(*section["timeline"], strict=True)
    return reporting.plot_series(
        path, f"fedplane demo: workload {section['workload']} autoscaled ({section['policy']}, {section['series']} "
        f"replayed {section['speed']:.0f}x, start-up {section['startup_s']:.0f} s)", t,
        {"demand (replicas at 100%)": demand, "desired replicas": desired, "ready replicas": ready}, "simulated seconds",
        ylabel="replicas")


def show(section: dict[str, Any]) -> None:
    reporting.table(f"autoscaling: one workload, {section['series']} ({section['series_hours']} h of it), "
                    f"pods ready {section['startup_s']:.0f} s after they are asked for",
                    [{"metric": k, "value": v} for k, v in section.items() if k not in ("timeline", "reasons", "png")])
    for line in section["reasons"]:
        reporting.stdout.print(f"autoscale decision: {line}")
