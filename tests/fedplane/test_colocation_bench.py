"""A small colocation bench run: the fleet loop over a few trace hours and a short real-node replay (root and cgroups)."""

from __future__ import annotations

import os

import pytest

from edgeagent import isolation
from fedplane.lab.benches import colocationfleet as fleet
from fedplane.lab.benches import colocationnode as node
from fedplane.lab.benches.colocationbench import segments

pytestmark = pytest.mark.integration


def cgroups_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to write cgroups")
    try:
        isolation.detect()
    except isolation.IsolationError as exc:
        pytest.skip(str(exc))


def test_a_short_fleet_run_ranks_the_policies_and_the_node_replay_measures_latency() -> None:
    cgroups_or_skip()
    online = fleet.online_series(1)[:, -360:]  # the trace's 3 hours: 2 to warm the forecasts, 1 scored
    out = {p: fleet.run(p, online, warm=240) for p in fleet.POLICIES}
    assert min(out["auction"].utilization, out["koordinator_like"].utilization) > out["separate"].utilization
    assert out["auction"].batch_cpu_hours > out["separate"].batch_cpu_hours
    assert out["separate"].preemptions == out["static_quota"].preemptions == out["koordinator_like"].preemptions == 0  # suppress only
    a = out["auction"]
    lat = node.replay(segments(a.hardest_online, 8), segments(a.hardest_batch, 8), 0.5)
    assert lat["requests"] > 100
    assert 0 < lat["online_p50_ms"] <= lat["online_p99_ms"]
    assert 0 <= lat["online_slo_miss_pct"] <= 100
