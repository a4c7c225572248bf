"""The report carries the pods the agent runs (with their epochs) only when the plane's last ack asked (a rebuilt twin
adopts them, controlplane.adopting); a plane that never asks never sees the field. Other clusters' members carry how
long ago the agent last heard from them (the plane's proof of life for a cluster it cannot reach)."""

from __future__ import annotations

from edgeagent import reporting
from edgeagent.clusters import BindOutcome, BindResult
from test_agent_placing import _asked_to_bind_once


def test_held_pods_go_out_only_when_asked() -> None:
    node, placer = _asked_to_bind_once()
    placer.bind_done("p0001", BindResult(BindOutcome.BOUND, node.name, 1), 0.21)
    assert "held" not in reporting.report(placer, "c0", "a1", 1, {}, {}, {}, None)
    assert reporting.report(placer, "c0", "a1", 2, {}, {}, {}, None, held=True)["held"] == [{"pod": "p0001", "epoch": 1}]


def test_other_clusters_members_carry_how_long_ago_they_were_heard_and_ours_do_not() -> None:
    from gossip.members import MemberState, MemberView

    _, placer = _asked_to_bind_once()
    lan = {"10.0.0.2:7946": MemberView("10.0.0.2:7946", 1, MemberState.ALIVE)}
    wan = {m: MemberView(m, 1, MemberState.ALIVE) for m in ("w1", "w2", "w3")}
    ids = {"w1": "c1/n1", "w2": "c1/n2", "w3": "c2/n3"}
    peers = reporting.report(placer, "c0", "a1", 1, lan, wan, ids, None, wan_heard={"w1": 0.0, "w2": 2.0004})["peers"]
    heard = {(p["cluster"], p["node"]): p.get("heard_ms") for p in peers}
    assert heard == {("c0", "10.0.0.2:7946"): None, ("c1", "n1"): 1, ("c1", "n2"): 2001, ("c2", "n3"): None}
    assert reporting.heard_ms(1e9) == reporting.HEARD_MS_MAX
