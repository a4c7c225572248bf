"""The drill: 16 agent processes on loopback place 1,000 trace pods through the twin service; 2 are SIGKILLed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fedplane.lab.benches.agentbench import BenchSettings, run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]  # 142 s alone (unloaded), ~230 s busy


def test_sixteen_agents_thousand_pods_two_killed(traces: Path) -> None:
    result = asyncio.run(run_bench(BenchSettings(agents=16, pods=1000, kill=2, idle_seconds=2.0, traces=str(traces))))
    assert result["backend"] == "twin-service", "through a control plane process over the twin link, as in production"
    assert result["double_bindings"] == 0, result
    assert result["lost_pods"] == 0, result
    assert result["overcommits"] == 0, result
    assert result["replaced_after_kill"] == result["pods_on_killed_nodes"], result
    assert len(result["killed"]) == 2
