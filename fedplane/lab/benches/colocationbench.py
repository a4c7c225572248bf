"""``fedplane bench colocation``: online and batch on one fleet, four policies, online latency measured here.

The fleet figures (utilization, batch work, preemptions) come from :mod:`colocationfleet` over the trace;
the latency figures from :mod:`colocationnode`, replaying on this machine, under the agent's cgroup
isolation, the node each policy packed hardest.
"""

from __future__ import annotations

import json
import os
import time

import click
import numpy as np

from edgeagent import isolation
from fedplane.lab.benches import colocationfleet as fleet
from fedplane.lab.benches import colocationnode as node


def segments(series: list[float], count: int) -> list[float]:
    """A day compressed to ``count`` segments, each the mean of its strides."""
    return [float(np.mean(part)) for part in np.array_split(np.asarray(series), count) if len(part)]


def measure(hours: float, count: int, segment_s: float, repeats: int) -> dict[str, object]:
    online = fleet.online_series(hours)
    try:
        layout = isolation.detect()
    except isolation.IsolationError as exc:
        raise click.ClickException(f"the latency replay needs cgroups: {exc}") from None
    outcomes = {name: fleet.run(name, online) for name in fleet.POLICIES}
    started = time.monotonic()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in fleet.POLICIES}
    for k in range(repeats):  # round robin: a disturbance of this shared host lands on one run, not on one policy
        for name, out in outcomes.items():
            try:
                runs[name].append(node.replay(segments(out.hardest_online, count), segments(out.hardest_batch, count), segment_s, seed=k))
            except isolation.IsolationError as exc:
                raise click.ClickException(f"the latency replay needs root and writable cgroups: {exc}") from None
    policies: dict[str, dict[str, object]] = {}
    for name, out in outcomes.items():
        lat = sorted(runs[name], key=lambda r: r["online_p99_ms"])[len(runs[name]) // 2]  # the median run by p99
        policies[name] = {
            "utilization": round(out.utilization, 2), "batch_cpu_hours": round(out.batch_cpu_hours, 1),
            "preemptions": out.preemptions, "batch_cpu_hours_lost_to_preemption": round(out.lost_cpu_hours, 1),
            "online_p99_ms": round(lat["online_p99_ms"], 2), "online_p50_ms": round(lat["online_p50_ms"], 2),
            "online_slo_miss_pct": round(lat["online_slo_miss_pct"], 3), "replayed_node": out.hardest_node,
            "replayed_requests": int(lat["requests"]),
            "replayed_peak_online_share": round(max(out.hardest_online), 3), "replayed_peak_batch_quota_share": round(max(out.hardest_batch), 3),
            "replay_runs": [{"online_p99_ms": round(r["online_p99_ms"], 2), "online_slo_miss_pct": round(r["online_slo_miss_pct"], 3)}
                            for r in runs[name]],
        }
    return {
        "latency_measured_on": "real-node", "trace": fleet.TRACE, "trace_hours": hours,
        "fleet": {"nodes": fleet.NODES, "online_nodes": fleet.ONLINE_NODES, "cores_per_node": fleet.CAPACITY // 1000,
                  "online_requests_share": fleet.ONLINE_PACK, "batch": "backlog of 1-core, 1-CPU-hour tasks (never runs dry)",
                  "simulation": "lean fleet loop over controlplane.reclaiming + controlplane.auctions (not the twin)"},
        "real_node": {"cores": os.cpu_count(), "isolation": layout.describe(), "segments": count, "segment_s": segment_s,
                      "repeats": repeats, "reported_run": "the median of the repeats by p99 (every run in replay_runs)",
                      "server": f"{node.WORKERS} processes, {node.WORK_MS} ms sha256 job per request", "slo_ms": node.SLO_MS,
                      "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "seconds": round(time.monotonic() - started, 1)},
        "policies": policies,
    }


@click.command("colocation")
@click.option("--hours", default=24.0, show_default=True, type=click.FloatRange(1, 72), help="Trace hours measured (after a warm-up day).")
@click.option("--segments", "count", default=96, show_default=True, type=click.IntRange(4, 2880), help="Segments the replayed day is cut into.")
@click.option("--segment-s", default=0.4, show_default=True, type=click.FloatRange(0.1, 60), help="Seconds each segment is replayed.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 9), help="Replays per policy, round robin; the median run is reported.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_colocation(hours: float, count: int, segment_s: float, repeats: int, as_json: bool) -> None:
    """Separate pools, a static quota, a Koordinator-like reclaim and the quota auction on one fleet (needs root)."""
    out = measure(hours, count, segment_s, repeats)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for name, p in out["policies"].items():  # type: ignore[union-attr]
        click.echo(f"{name:17} util {p['utilization']:5.1f}%  batch {p['batch_cpu_hours']:7.1f} CPU-h  preempt {p['preemptions']:4}  "
                   f"p99 {p['online_p99_ms']:6.1f} ms  SLO miss {p['online_slo_miss_pct']:.3f}%")
