"""Agents as operators see them: ``controlplane agents`` rows and the per-agent series of ``/metrics``.

An agent's report says how many pods it holds, but a cut-off agent's last report outlives its pods: the back end
(the twin) moves them to other nodes while the silent agent's row still shows them. Rows therefore show the pods the
back end has bound on each node, when it answers; the agent's own word otherwise.

Per-agent series (health, last report age, pods held) are computed at each scrape from the evidence book, so an
agent that left no series behind once it is gone: rows older than :data:`GONE_S` are dropped, which bounds the
series to the agents seen in the last ten minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controlplane.evidence import AgentRow, EvidenceBook
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend
from fedcore.backends.model import Phase

GONE_S = 600.0
"""An agent silent this long has no series any more."""


def as_backend_sees(backend: Callable[[str], ClusterBackend], cluster: str, rows: Sequence[AgentRow]) -> list[AgentRow]:
    """``rows`` with each agent's pods as the back end of ``cluster`` binds them now (unchanged if it does not answer)."""
    try:
        pods = backend(cluster).list_pods()
    except errors.BackendError:
        return list(rows)
    held: dict[str, int] = {}
    for p in pods:
        if p.node and p.phase in (Phase.PENDING, Phase.RUNNING):
            held[p.node] = held.get(p.node, 0) + 1
    return [replace(r, report=replace(r.report, summary=replace(r.report.summary, pods=held.get(r.report.node, 0)))) for r in rows]


class AgentSeries(Collector):  # type: ignore[misc]
    """``fedplane_agent_healthy``, ``fedplane_agent_report_age_seconds`` and ``fedplane_agent_pods`` per (cluster, node)."""

    def __init__(self, evidence: Callable[[], EvidenceBook], clusters: Callable[[], Sequence[str]], clock: Callable[[], float]) -> None:
        """``evidence``: the plane's book now (a new leader starts a new one); ``clusters``: the ones it judges."""
        self.evidence, self.clusters, self.clock = evidence, clusters, clock

    def collect(self) -> Iterator[Any]:
        healthy = GaugeMetricFamily("fedplane_agent_healthy", "1: the agent reports on time and calls itself healthy",
                                    labels=["cluster", "node"])
        age = GaugeMetricFamily("fedplane_agent_report_age_seconds", "Seconds since the agent's newest report",
                                labels=["cluster", "node"])
        pods = GaugeMetricFamily("fedplane_agent_pods", "Pods the agent said it holds in its newest report",
                                 labels=["cluster", "node"])
        book, now = self.evidence(), self.clock()
        for cluster in self.clusters():
            for row in book.agents(cluster, now):
                if row.age > GONE_S:
                    continue
                labels = [cluster, row.report.node]
                healthy.add_metric(labels, 1.0 if row.fresh and row.report.healthy else 0.0)
                age.add_metric(labels, round(row.age, 3))
                pods.add_metric(labels, float(row.report.summary.pods))
        yield from (healthy, age, pods)
