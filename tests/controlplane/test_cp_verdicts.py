"""Verdicts from multi-vantage evidence: crash vs partition vs silent agents, and the evidence book."""

from __future__ import annotations

import pytest

from controlplane.evidence import AgentReport, EvidenceBook, NodeSummary, PeerState
from controlplane.verdicts import Health, Timings, judge
from fedcore.backends.model import NodeState
from fedcore.resources import Resources

T = Timings()
NODES = [NodeState("a-n0", Resources(1000, 1000)), NodeState("a-n1", Resources(1000, 1000))]


def report(cluster: str, node: str, seq: int, peers: dict[tuple[str, str], PeerState], heard_s: float | None = None) -> AgentReport:
    """``heard_s``: how long before the report its agent heard from each peer (None: it keeps no such record)."""
    return AgentReport(cluster, node, f"agent-{node}", seq, NodeSummary(node, Resources(1000, 1000), Resources()),
                       tuple((c, n, s) for (c, n), s in peers.items()),
                       heard=() if heard_s is None else tuple((c, n, heard_s) for c, n in peers))


def book_with(probe_ok: bool, insiders: PeerState | None, outsiders: PeerState | None, now: float = 10.0,
              failing_for: float = 0.4) -> EvidenceBook:
    book = EvidenceBook(T.fresh_s)
    book.add_probe("a", 0.0, NODES)
    if not probe_ok:
        for i in range(3):
            book.add_probe("a", now - failing_for + failing_for / 2 * i, None, "connection refused")
    seq = 1
    if insiders is not None:
        for n in ("a-n0", "a-n1"):
            other = "a-n1" if n == "a-n0" else "a-n0"
            book.add_report(report("a", n, seq, {("a", other): insiders}), now - 0.1)
            seq += 1
    else:
        book.add_report(report("a", "a-n0", seq, {}), now - 5.0)  # known but long silent
        seq += 1
    if outsiders is not None:
        book.add_report(report("b", "b-n0", seq, {("a", "a-n0"): outsiders, ("a", "a-n1"): outsiders}, heard_s=0.05), now - 0.1)
    return book


@pytest.mark.parametrize("probe_ok, insiders, outsiders, health", [
    (True, PeerState.ALIVE, PeerState.ALIVE, Health.HEALTHY),
    (True, PeerState.SUSPECT, PeerState.ALIVE, Health.DEGRADED),
    (True, None, PeerState.DEAD, Health.AGENTS_SILENT),         # API answers: no failover for silent agents
    (False, PeerState.ALIVE, None, Health.UNKNOWN),             # its agents reach us and see each other: an API blip so far
    (False, None, PeerState.ALIVE, Health.UNKNOWN),             # other clusters still see it: not yet confirmed
    (False, None, PeerState.DEAD, Health.DOWN),                 # nobody sees it: crash/outage
    (False, None, None, Health.DOWN),
])
def test_verdict_table(probe_ok: bool, insiders: PeerState | None, outsiders: PeerState | None, health: Health) -> None:
    verdict = judge(book_with(probe_ok, insiders, outsiders).about("a", 10.0), T)
    assert verdict.health is health
    assert verdict.reasons
    assert verdict.health.failed == (health in (Health.DOWN, Health.PARTITIONED))


@pytest.mark.parametrize("failing_for, health", [(0.4, Health.UNKNOWN), (T.confirm_s, Health.UNKNOWN), (T.settle_s, Health.DOWN)])
def test_silent_outsiders_are_waited_for_not_read_as_down(failing_for: float, health: Health) -> None:
    book = book_with(False, None, None, failing_for=failing_for)
    book.add_report(report("b", "b-n0", 99, {("a", "a-n0"): PeerState.ALIVE}), 10.0 - 3 * T.fresh_s)  # known, not fresh
    assert judge(book.about("a", 10.0), T).health is health


def test_other_clusters_views_read_partitioned_once_confirmed_and_stale_insiders_prove_nothing() -> None:
    verdict = judge(book_with(False, None, PeerState.ALIVE, failing_for=T.confirm_s).about("a", 10.0), T)
    assert verdict.health is Health.PARTITIONED and "other clusters see its nodes alive" in " | ".join(verdict.reasons)
    book = book_with(True, PeerState.ALIVE, None)  # reports at 9.9 s, then the probe fails from 9.95 s: sent before
    for i in range(3):
        book.add_probe("a", 9.95 + 0.02 * i, None, "connection refused")
    assert judge(book.about("a", 10.0), T).health is Health.DOWN, "an outage right after a report is no partition"


@pytest.mark.parametrize("failing_for, health", [(0.4, Health.UNKNOWN), (T.confirm_s - 0.1, Health.UNKNOWN), (T.confirm_s, Health.PARTITIONED)])
def test_an_api_blip_while_its_agents_report_fails_nothing_over(failing_for: float, health: Health) -> None:
    # Its agents report from inside, seeing each other alive, while the plane's probes of its API fail (an API server
    # restart): only after confirm_s is that a partition to fail over from; before, no taint that evicts anything.
    verdict = judge(book_with(False, PeerState.ALIVE, None, failing_for=failing_for).about("a", 10.0), T)
    assert verdict.health is health
    assert not verdict.health.failed or failing_for >= T.confirm_s
    assert "alive but cut off from us" in " | ".join(verdict.reasons)


def outage_seen_alive(failing_for: float, heard_s: float | None, agents: int = 3) -> EvidenceBook:
    """The flaky drill run: other clusters' agents report fresh views holding every node of ``a`` ALIVE, none suspect
    yet (none of them has probed one since), each having last heard from them ``heard_s`` before its report."""
    book = book_with(False, None, None, failing_for=failing_for)
    for i in range(agents):
        book.add_report(report(f"o{i}", f"o{i}-n0", 70 + i, {("a", "a-n0"): PeerState.ALIVE, ("a", "a-n1"): PeerState.ALIVE},
                               heard_s), 9.9)
    return book


@pytest.mark.parametrize("before_failure", [None, 0.2])  # no record, or heard 0.2 s before the probe first failed
def test_views_still_alive_but_unheard_since_the_probe_failed_are_no_partition(before_failure: float | None) -> None:
    # at confirm_s the old rule read such sticky views (the drill's: 9 agents x 3 nodes) as PARTITIONED
    for failing_for, health in ((T.confirm_s, Health.UNKNOWN), (T.settle_s, Health.DOWN)):
        heard_s = None if before_failure is None else failing_for + before_failure - 0.1  # the reports arrive at 9.9
        verdict = judge(outage_seen_alive(failing_for, heard_s).about("a", 10.0), T)
        text = " | ".join(verdict.reasons)
        assert verdict.health is health and ("0 agents heard from it" in text or "0 of their agents heard" in text), text


@pytest.mark.parametrize("failed_before_heard, health", [
    (T.heard_margin_s + 0.1, Health.PARTITIONED),  # heard after the failure: alive now, cut off from us
    (T.heard_margin_s - 0.1, Health.UNKNOWN),      # so soon after it that the report's transit may have dated it so
])
def test_a_node_heard_from_after_the_probe_failed_proves_a_partition(failed_before_heard: float, health: Health) -> None:
    # the probe first failed at 10 - confirm_s; the views' agents heard from a's nodes failed_before_heard later
    heard_s = 9.9 - (10.0 - T.confirm_s + failed_before_heard)
    book = outage_seen_alive(T.confirm_s, heard_s, agents=1)
    assert judge(book.about("a", 10.0), T).health is health


def test_only_fresh_outside_reports_are_heard_and_only_while_the_probe_fails() -> None:
    book = outage_seen_alive(T.confirm_s, 0.05, agents=0)
    book.add_report(report("o1", "o1-n0", 81, {("a", "a-n0"): PeerState.ALIVE}, 0.05), 10.0 - 3 * T.fresh_s)  # not fresh
    book.add_report(report("a", "a-n1", 82, {("a", "a-n0"): PeerState.ALIVE}, 0.05), 7.0)  # an insider: its own rule
    assert book.about("a", 10.0).outsider_heard == ()
    book.add_report(report("o2", "o2-n0", 83, {("a", "a-n0"): PeerState.ALIVE, ("b", "b-n0"): PeerState.ALIVE}, 0.05), 9.9)
    assert book.about("a", 10.0).outsider_heard == pytest.approx((0.15,))
    book.add_report(report("o2", "o2-n0", 84, {("a", "a-n0"): PeerState.ALIVE}, None), 9.95)  # its newest holds no record
    assert book.about("a", 10.0).outsider_heard == ()
    book.add_report(report("o0", "o0-n0", 80, {("a", "a-n0"): PeerState.SUSPECT}, 0.05), 9.9)  # heard: it is refuting
    assert book.about("a", 10.0).outsider_heard == pytest.approx((0.15,))
    assert judge(book.about("a", 10.0), T).health is Health.UNKNOWN, "a suspicion is no partition: split, waited on"
    book.add_probe("a", 10.0, NODES)
    book.add_report(report("o3", "o3-n0", 85, {("a", "a-n0"): PeerState.ALIVE}, 0.05), 10.0)
    assert book.about("a", 10.0).outsider_heard == (), "nothing to prove while the probe answers"


def test_the_wires_heard_ms_reaches_the_book_in_seconds_and_zero_is_no_record() -> None:
    from controlplane import convert
    from fedapi import controlplane_pb2 as cp

    wire = cp.AgentReport(cluster="b", node="b-n0", agent_id="x", sequence=1, summary=cp.NodeSummary(node="b-n0"), peers=[
        cp.PeerView(node="a-n0", cluster="a", state=cp.PEER_ALIVE, heard_ms=250),
        cp.PeerView(node="a-n1", cluster="a", state=cp.PEER_ALIVE)])
    assert convert.agent_report(wire).heard == (("a", "a-n0", 0.25),)


def test_hostile_heard_records_prove_nothing_they_should_not() -> None:
    # A report's heard_ms at the field's maximum (49 days), for its own cluster (no cluster named), for a cluster
    # the plane does not know: nothing raises, its own cluster and the ancient hearing count for no partition.
    from controlplane import convert
    from fedapi import controlplane_pb2 as cp

    wire = cp.AgentReport(cluster="b", node="b-n0", agent_id="x", sequence=7, summary=cp.NodeSummary(node="b-n0"), peers=[
        cp.PeerView(node="a-n0", cluster="a", state=cp.PEER_ALIVE, heard_ms=2**32 - 1),
        cp.PeerView(node="b-n1", state=cp.PEER_ALIVE, heard_ms=1),
        cp.PeerView(node="z-n9", cluster="zz", state=cp.PEER_ALIVE, heard_ms=1)])
    book = book_with(False, None, None, failing_for=T.confirm_s)
    book.add_report(convert.agent_report(wire), 9.9)
    ev = book.about("a", 10.0)
    assert len(ev.outsider_heard) == 1 and ev.outsider_heard[0] > 4e6
    assert judge(ev, T).health is Health.UNKNOWN, "alive views heard from 49 days ago: still waited on, no partition"
    assert book.about("b", 10.0).outsider_heard == ()


def split_views(failing_for: float, suspects: int) -> EvidenceBook:
    """Two other clusters' agents view a's two nodes: ``suspects`` of the four views suspect, the rest alive."""
    book = book_with(False, None, None, failing_for=failing_for)
    states = [PeerState.SUSPECT] * suspects + [PeerState.ALIVE] * (4 - suspects)
    book.add_report(report("b", "b-n0", 50, {("a", "a-n0"): states[0], ("a", "a-n1"): states[1]}), 9.9)
    book.add_report(report("c", "c-n0", 51, {("a", "a-n0"): states[2], ("a", "a-n1"): states[3]}), 9.9)
    return book


def test_one_suspect_view_from_elsewhere_reads_down_once_settle_s_passed_however_many_still_see_it_alive() -> None:
    assert judge(split_views(T.settle_s, 1).about("a", 10.0), T).health is Health.DOWN, "an outage is being noticed"


@pytest.mark.parametrize("failing_for", [0.4, T.confirm_s])
@pytest.mark.parametrize("suspects, health", [(1, Health.UNKNOWN), (2, Health.UNKNOWN), (3, Health.DOWN)])
def test_before_settle_s_a_minority_of_suspect_views_is_waited_on_and_a_majority_reads_down(
        failing_for: float, suspects: int, health: Health) -> None:
    # one slow prober on a busy host suspects a node of a partitioned region its peers still see alive: the node
    # refutes within the suspicion timeout, so reading DOWN at once would misname a partition (CI, netns drill)
    verdict = judge(split_views(failing_for, suspects).about("a", 10.0), T)
    assert verdict.health is health, verdict.reasons


def test_fresh_outside_reports_without_a_view_of_the_cluster_are_no_outside_view() -> None:
    book = book_with(False, None, None, failing_for=0.4)
    book.add_report(report("b", "b-n0", 60, {("a", "a-n0"): PeerState.ALIVE}), 10.0 - 3 * T.fresh_s)  # seen before
    book.add_report(report("c", "c-n0", 61, {("b", "b-n0"): PeerState.ALIVE}), 9.9)  # fresh, says nothing of a
    assert judge(book.about("a", 10.0), T).health is Health.UNKNOWN


def test_down_verdict_carries_its_evidence_and_a_noexecute_taint() -> None:
    verdict = judge(book_with(False, None, PeerState.DEAD).about("a", 10.0), T)
    text = " | ".join(verdict.reasons)
    assert "3 probes failed" in text and "connection refused" in text and "2 suspect/dead" in text
    assert [(t.key, t.effect.value) for t in verdict.taints] == [("fedplane.io/unreachable", "NoExecute")]


def test_two_failed_probes_are_not_yet_a_verdict() -> None:
    book = EvidenceBook(T.fresh_s)
    book.add_probe("a", 0.0, NODES)
    book.add_probe("a", 0.2, None, "timeout")
    book.add_probe("a", 0.4, None, "timeout")
    assert judge(book.about("a", 0.4), T).health is Health.HEALTHY
    book.add_probe("a", 0.6, None, "timeout")
    assert judge(book.about("a", 0.6), T).health is Health.DOWN


def test_unprobed_cluster_is_unknown_and_not_schedulable() -> None:
    verdict = judge(EvidenceBook(1.0).about("new", 0.0), T)
    assert verdict.health is Health.UNKNOWN and verdict.taints[0].effect.value == "NoSchedule"


def test_replayed_or_old_reports_are_refused() -> None:
    book = EvidenceBook(1.0)
    assert book.add_report(report("a", "a-n0", 5, {}), 0.0)
    assert not book.add_report(report("a", "a-n0", 5, {}), 0.1)
    assert not book.add_report(report("a", "a-n0", 4, {}), 0.2)
    assert book.add_report(report("a", "a-n0", 6, {}), 0.3)


def test_reports_go_stale_after_the_fresh_window() -> None:
    book = EvidenceBook(1.0)
    book.add_report(report("a", "a-n0", 1, {}), 0.0)
    assert book.about("a", 0.9).agents_fresh == 1
    assert book.about("a", 1.1).agents_fresh == 0 and book.about("a", 1.1).agents_known == 1
