"""The agent's /metrics text: valid Prometheus exposition, histogram semantics, and a light import."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families

from fedcore.nodes import Node

from edgeagent.config import PlacementSection
from edgeagent.ledger import Ledger
from edgeagent.metrics import AgentMetrics, Histogram
from edgeagent.placing import Placer
from edgeagent.scoring import HeuristicScorer


def test_exposition_parses_as_prometheus_text_with_every_family() -> None:
    node = Node("n0", 8000, 8192)
    placer = Placer(node, Ledger("n0", "n0", node.capacity), HeuristicScorer(), PlacementSection(), 0.0)
    placer.counters.binds = 3
    metrics = AgentMetrics(placer, lambda: 5, lambda: True, lambda: 1234)
    for seconds in (0.01, 0.1, 0.1, 7.0):
        metrics.decisions.observe(seconds)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("fedplane_agent_binds_total", ())] == 3
    assert samples[("fedplane_agent_peers_alive", ())] == 5
    assert samples[("fedplane_agent_journal_bytes", ())] == 1234
    assert samples[("fedplane_agent_model_info", (("artifact", ""), ("canary", ""), ("version", "heuristic")))] == 1
    assert samples[("fedplane_agent_decision_seconds_bucket", (("le", "0.025"),))] == 1
    assert samples[("fedplane_agent_decision_seconds_bucket", (("le", "0.1"),))] == 3, "le is inclusive"
    assert samples[("fedplane_agent_decision_seconds_bucket", (("le", "5.0"),))] == 3
    assert samples[("fedplane_agent_decision_seconds_bucket", (("le", "+Inf"),))] == 4
    assert samples[("fedplane_agent_decision_seconds_count", ())] == 4
    assert abs(samples[("fedplane_agent_decision_seconds_sum", ())] - 7.21) < 1e-9
    assert families["fedplane_agent_binds"].type == "counter"
    assert families["fedplane_agent_decision_seconds"].type == "histogram"
    assert samples[("process_resident_memory_bytes", ())] > 1 << 20
    assert samples[("process_start_time_seconds", ())] > 1.6e9
    assert ("process_cpu_seconds_total", ()) in samples


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((1.0, 2.0))
    for v in (0.5, 1.5, 1.5, 3.0):
        h.observe(v)
    assert h.samples("x")[:3] == ['x_bucket{le="1.0"} 1', 'x_bucket{le="2.0"} 3', 'x_bucket{le="+Inf"} 4']


def test_the_agent_imports_neither_prometheus_client_nor_grpc_nor_unused_back_ends() -> None:
    """Footprint: what the twin-backed agent does not use is not imported (each costs MiBs of RSS)."""
    probe = ("import sys, edgeagent.entry, edgeagent.daemon, edgeagent.planeclient; "
             "print(sorted(m for m in ('prometheus_client', 'cryptography', 'kubernetes', 'torch', 'flwr', 'grpc', 'google.protobuf', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
