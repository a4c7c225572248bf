"""The report carries the pods the agent runs (with their epochs) only when the plane's last ack asked (a rebuilt twin
adopts them, controlplane.adopting); a plane that never asks never sees the field."""

from __future__ import annotations

from edgeagent import reporting
from edgeagent.clusters import BindOutcome, BindResult
from test_agent_placing import _asked_to_bind_once


def test_held_pods_go_out_only_when_asked() -> None:
    node, placer = _asked_to_bind_once()
    placer.bind_done("p0001", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)
    assert "held" not in reporting.report(placer, "c0", "a1", 1, {}, {}, {}, None)
    assert reporting.report(placer, "c0", "a1", 2, {}, {}, {}, None, held=True)["held"] == [{"pod": "p0001", "epoch": 1}]
