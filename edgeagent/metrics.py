"""Prometheus metrics of one agent, read from the core's counters at scrape time.

The placement core keeps plain integers (it must stay free of I/O and libraries);
:class:`AgentCollector` turns them into Prometheus families only when scraped, so
counting costs nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from edgeagent.placing import Placer

DECISION_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0)


class AgentCollector(Collector):
    def __init__(self, placer: Placer, peers_alive: Callable[[], int], backend_up: Callable[[], bool],
                 journal_bytes: Callable[[], int]) -> None:
        self.placer = placer
        self.peers_alive = peers_alive
        self.backend_up = backend_up
        self.journal_bytes = journal_bytes

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | InfoMetricFamily]:
        c = self.placer.counters
        for name, value, doc in (
            ("claims", c.claims, "Claims this agent posted"),
            ("binds", c.binds, "Pods this agent bound to its node"),
            ("lost_claims", c.lost, "Claims released after losing"),
            ("evictions", c.evictions, "Pods stopped because their node was re-placed"),
            ("refused_binds", c.refused_binds, "Binds the back end refused (fencing or capacity)"),
            ("replaced_pods", c.replaced, "Pods of dead peers this agent re-placed"),
            ("completed_pods", c.completed, "Pods that completed on this node"),
            ("bad_records", c.bad_records, "Malformed gossip records dropped"),
        ):
            yield CounterMetricFamily(f"fedplane_agent_{name}", doc, value=value)
        yield GaugeMetricFamily("fedplane_agent_pending_pods", "Pods pending in the cluster", value=len(self.placer.pending))
        yield GaugeMetricFamily("fedplane_agent_running_pods", "Pods bound to this node", value=len(self.placer.running))
        yield GaugeMetricFamily("fedplane_agent_peers_alive", "Live gossip peers", value=self.peers_alive())
        yield GaugeMetricFamily("fedplane_agent_backend_up", "1 when the cluster API answers", value=int(self.backend_up()))
        yield GaugeMetricFamily("fedplane_agent_journal_bytes", "Size of the claims journal", value=self.journal_bytes())
        yield InfoMetricFamily("fedplane_agent_model", "Policy in use", value={"version": self.placer.scorer.version})


class AgentMetrics:
    """The registry served at /metrics."""

    def __init__(self, collector: AgentCollector) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.registry.register(collector)
        self.decisions = Histogram(
            "fedplane_agent_decision_seconds", "From seeing a pod pending to binding it here",
            buckets=DECISION_BUCKETS, registry=self.registry)
