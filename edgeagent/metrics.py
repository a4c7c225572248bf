"""Prometheus metrics of one agent, rendered in the text exposition format (0.0.4) at scrape time.

The placement core keeps plain integers (it must stay free of I/O and libraries); they
are read only when scraped, so counting costs nothing on the hot path. The format is
written here rather than through prometheus_client: that library imports http.server,
email, wsgiref and the compression modules (~4 MiB resident, 6% of the footprint budget)
for the two dozen lines an agent exposes.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable

from edgeagent.placing import Placer
from edgeagent.contextkeeping import ContextKeeper

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DECISION_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Histogram:
    """Prometheus histogram semantics: cumulative ``le`` buckets, ``+Inf``, ``_sum`` and ``_count``."""

    def __init__(self, buckets: Iterable[float]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def samples(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip((*map(_number, self.buckets), "+Inf"), self.counts):
            total += count
            out.append(f'{name}_bucket{{le="{bound}"}} {total}')
        return [*out, f"{name}_count {total}", f"{name}_sum {_number(self.sum)}"]


class AgentMetrics:
    """What /metrics serves: the core's counters, a few gauges, decision latency and the process."""

    def __init__(self, placer: Placer, peers_alive: Callable[[], int], backend_up: Callable[[], bool],
                 journal_bytes: Callable[[], int], context: ContextKeeper | None = None) -> None:
        self.placer = placer
        self.context = context or ContextKeeper()
        self.peers_alive = peers_alive
        self.backend_up = backend_up
        self.journal_bytes = journal_bytes
        self.decisions = Histogram(DECISION_BUCKETS)
        self._started = _start_time()

    def render(self) -> bytes:
        lines: list[str] = []

        def family(name: str, kind: str, doc: str, samples: list[str]) -> None:
            lines.extend((f"# HELP {name} {doc}", f"# TYPE {name} {kind}", *samples))

        c = self.placer.counters
        for name, value, doc in (
            ("claims", c.claims, "Claims this agent posted"),
            ("binds", c.binds, "Pods this agent bound to its node"),
            ("lost_claims", c.lost, "Claims released after losing"),
            ("evictions", c.evictions, "Pods to stop because their node was re-placed"),
            ("evictions_done", c.evictions_done, "Evictions the cluster confirmed (evicted, or already gone)"),
            ("refused_binds", c.refused_binds, "Binds the back end refused (fencing or capacity)"),
            ("replaced_pods", c.replaced, "Pods of dead peers this agent re-placed"),
            ("completed_pods", c.completed, "Pods that completed on this node"),
            ("bad_records", c.bad_records, "Malformed gossip records dropped"),
            ("workload_context_refused", self.context.refused, "Workload contexts from the control plane refused as malformed"),
        ):
            family(f"fedplane_agent_{name}", "counter", doc, [f"fedplane_agent_{name}_total {value}"])
        for name, value, doc in (
            ("pending_pods", len(self.placer.pending), "Pods pending in the cluster"),
            ("running_pods", len(self.placer.running), "Pods bound to this node"),
            ("peers_alive", self.peers_alive(), "Live gossip peers"),
            ("backend_up", int(self.backend_up()), "1 when the cluster API answers"),
            ("journal_bytes", self.journal_bytes(), "Size of the claims journal"),
            ("workload_cpu_pressure", _number(self.context.current.cpu_pressure),
             "The workload context the policy scores with: the cluster's CPU per requested GPU over its GPU nodes' CPU per GPU"),
            ("workload_context_version", self.context.current.version,
             "When the control plane adopted that context (its clock, ms); 0 = none received"),
            ("workload_profile_shapes", len(self.context.current.profile.shapes) if self.context.current.profile else 0,
             "Typical pod shapes of the cluster's workload profile the policy scores against; 0 = the model artifact's own"),
        ):
            family(f"fedplane_agent_{name}", "gauge", doc, [f"fedplane_agent_{name} {value}"])
        scorer = self.placer.scorer
        family("fedplane_agent_model_info", "gauge",
               "Policy in use: its version, its artifact (registry version) name and the artifact on canary trial, if any",
               [f'fedplane_agent_model_info{{version="{_label(scorer.version)}",artifact="{_label(scorer.artifact)}",'
                f'canary="{_label(scorer.canary)}"}} 1'])
        family("fedplane_agent_scorer_family_info", "gauge",
               "The scorer family the cluster's workload context names: learned (the policy), fgd or bestfit",
               [f'fedplane_agent_scorer_family_info{{family="{_label(self.context.current.scorer)}"}} 1'])
        family("fedplane_agent_decision_seconds", "histogram", "From seeing a pod pending to binding it here",
               self.decisions.samples("fedplane_agent_decision_seconds"))
        for name, kind, doc, reading in self._process():
            family(name.removesuffix("_total"), kind, doc, [f"{name} {_number(reading)}"])
        return ("\n".join(lines) + "\n").encode()

    def _process(self) -> list[tuple[str, str, str, float]]:
        """The standard process metrics (what prometheus_client's ProcessCollector exports), from /proc."""
        times = os.times()
        out = [("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds",
                times.user + times.system)]
        try:
            with open("/proc/self/statm") as f:
                vsz, rss = (int(x) * _PAGE for x in f.read().split()[:2])
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:  # not Linux: CPU time only
            return out
        out += [
            ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes", rss),
            ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes", vsz),
            ("process_open_fds", "gauge", "Number of open file descriptors", fds),
        ]
        if self._started is not None:
            out.append(("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds",
                        self._started))
        return out


def _start_time() -> float | None:
    """When this process started (seconds since the epoch), from /proc; None where there is no /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

