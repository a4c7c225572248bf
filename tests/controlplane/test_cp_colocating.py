"""The plane's colocation round on a real twin cluster (no server): offers from measured online use, batch on reclaimed
CPU booked outside allocatable, suppression before preemption, preemptions lowest bid first at the bounded rate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from controlplane.colocating import Colocation, ColocationConfig
from controlplane.evidence import AgentReport, NodeSummary
from controlplane.metrics import Metrics
from controlplane.admission import ClusterView
from controlplane.planner import Load, Planner, online_load
from controlplane.registry import ClusterSpec, DecisionRecord, Placement
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Policy, Template, Workload
from fedcore.backends.model import BindOutcome, Phase, WorkloadSpec
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedcore.nodes import Taint
from fedcore.resources import Resources
from fedcore.topology import Cluster, Topology
from fedplane.cli import main

NODE = "c0-n0"


def report(used: int, seq: int) -> AgentReport:
    return AgentReport("c0", NODE, "a", seq, NodeSummary(NODE, Resources(4000, 8192), Resources(), online_used_milli=used), ())


@pytest.fixture
def fleet() -> tuple[TwinCluster, dict[str, Workload]]:
    clock = [0.0]
    twin = TwinCluster("c0", make_nodes("c0", "r0", 1, cpu_milli=4000), lambda: clock[0], 0.0, Binder.EXTERNAL)
    twin.create_workload(WorkloadSpec("web", 1, 3000, 128))
    twin.create_workload(WorkloadSpec("crunch", 3, 1000, 128, qos="batch"))
    twin.create_workload(WorkloadSpec("api", 1, 100, 128))
    workloads = {"web": Workload("web", 1, Template(3000, 128)), "crunch": Workload("crunch", 3, Template(1000, 128, priority=5, qos="batch"))}
    return twin, workloads


def test_online_use_becomes_an_offer_batch_binds_on_it_and_online_demand_preempts_it_at_the_bounded_rate(
        fleet: tuple[TwinCluster, dict[str, Workload]]) -> None:
    twin, workloads = fleet
    decisions: list[DecisionRecord] = []
    metrics = Metrics()
    colo = Colocation(metrics, decisions.append, ColocationConfig(stride_s=1.0, evictions_per_s=1 / 60, burst=2))
    web = next(p for p in twin.list_pods("web"))
    assert twin.bind_pod(web.name, NODE, web.epoch).outcome is BindOutcome.BOUND
    batch = twin.list_pods("crunch")
    api = twin.list_pods("api")[0]
    refused = twin.bind_pod(api.name, NODE, api.epoch, reclaimed_milli=50)  # online pods never take reclaimed CPU
    assert refused.outcome is BindOutcome.REJECTED and "only batch pods run on reclaimed capacity" in refused.reason
    twin.delete_workload("api")
    listing = twin.list_nodes()
    for t in range(80):  # online uses 0.4 of its 3 requested cores: once calibrated, ~2.6 cores are reclaimed
        colo.tick(float(t), "c0", twin, listing, [report(400, t)], workloads)
    offer = colo.offer("c0", NODE)
    assert offer is not None and 2400 <= offer.reclaimed_milli <= 2600
    assert colo.refusal("c0", NODE, 2000) == "" and "not 2700m" in colo.refusal("c0", NODE, 2700)
    assert twin.bind_pod(batch[0].name, NODE, batch[0].epoch).outcome is BindOutcome.BOUND  # the 1 core left unrequested
    for p in batch[1:]:  # the rest only on reclaimed CPU: refused without it, booked outside allocatable with it
        assert twin.bind_pod(p.name, NODE, p.epoch).outcome is BindOutcome.REJECTED
        assert twin.bind_pod(p.name, NODE, p.epoch, reclaimed_milli=1000).outcome is BindOutcome.BOUND
    colo.tick(80.0, "c0", twin, listing, [report(400, 80)], workloads)
    offer = colo.offer("c0", NODE)
    assert offer is not None and offer.quota_milli == 3600 and colo.share("crunch", "c0").reclaimed_milli == 2000  # the supply

    colo.tick(81.0, "c0", twin, listing, [report(3600, 81)], workloads)  # online needs 3.6 of 4 cores: floors (300m) still fit
    assert not decisions and colo.offer("c0", NODE).quota_milli == 400  # type: ignore[union-attr]  # suppressed, not evicted
    colo.tick(82.0, "c0", twin, listing, [report(4000, 82)], workloads)  # the whole node: two evicted at once (the burst)...
    colo.tick(83.0, "c0", twin, listing, [report(4000, 83)], workloads)  # ...and the third waits for a token
    assert [d.kind for d in decisions] == ["preempt", "preempt"] and all("online demand outbid it" in d.reasons[1] for d in decisions)
    assert metrics.preemptions.labels("c0")._value.get() == 2 and colo.share("crunch", "c0").preemptions == 2
    phases = sorted(p.phase.value for p in twin.list_pods("crunch"))
    assert phases == ["Pending", "Pending", "Running"]  # preempted replicas wait, pending, for capacity to come back
    colo.tick(143.0, "c0", twin, listing, [report(4000, 143)], workloads)  # a minute later the bucket holds a token again
    assert len(decisions) == 3 and all(p.phase is Phase.PENDING for p in twin.list_pods("crunch"))
    assert "offers 0m of reclaimed CPU now" in colo.refusal("c0", NODE, 1000)  # an agent's stale offer cannot bring it back


def test_a_new_leader_still_learning_a_node_preempts_nothing_there(fleet: tuple[TwinCluster, dict[str, Workload]]) -> None:
    twin, workloads = fleet
    twin.delete_workload("api")
    web = twin.list_pods("web")[0]
    twin.bind_pod(web.name, NODE, web.epoch)
    for p in twin.list_pods("crunch"):  # batch on reclaimed CPU, placed under the old leader's forecast
        assert twin.bind_pod(p.name, NODE, p.epoch, reclaimed_milli=1000).outcome is BindOutcome.BOUND
    decisions: list[DecisionRecord] = []
    colo = Colocation(Metrics(), decisions.append, ColocationConfig(stride_s=1.0))
    for t in range(10):  # uncalibrated: online may use all it requests, yet the batch already running keeps its place
        colo.tick(float(t), "c0", twin, twin.list_nodes(), [report(3000, t)], workloads)
    offer = colo.offer("c0", NODE)
    assert not decisions and offer is not None and offer.reclaimed_milli == 0 and offer.quota_milli == 3000


def test_a_bad_configuration_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="stride_s > 0"):
        ColocationConfig(stride_s=0)


def test_an_online_pod_pending_because_batch_holds_the_node_outbids_it(fleet: tuple[TwinCluster, dict[str, Workload]]) -> None:
    twin, workloads = fleet
    workloads["api"] = Workload("api", 1, Template(100, 128))
    web = twin.list_pods("web")[0]
    twin.bind_pod(web.name, NODE, web.epoch)
    batch = twin.list_pods("crunch")
    assert twin.bind_pod(batch[0].name, NODE, batch[0].epoch).outcome is BindOutcome.BOUND  # the last unrequested core
    for p in batch[1:]:
        twin.bind_pod(p.name, NODE, p.epoch, reclaimed_milli=1000)
    decisions: list[DecisionRecord] = []
    colo = Colocation(Metrics(), decisions.append, ColocationConfig(stride_s=1.0))
    full = AgentReport("c0", NODE, "a", 1, NodeSummary(NODE, Resources(4000, 8192), Resources(4000, 512)), ())
    colo.tick(0.0, "c0", twin, twin.list_nodes(), [full], workloads)
    assert not decisions  # one round's grace: the agents may place it
    colo.tick(1.0, "c0", twin, twin.list_nodes(), [full], workloads)
    assert [d.kind for d in decisions] == ["preempt"] and "a pending online pod outbid it" in decisions[0].reasons[1]
    assert sum(p.phase is Phase.RUNNING for p in twin.list_pods("crunch")) == 2
    room = AgentReport("c0", NODE, "a", 2, NodeSummary(NODE, Resources(4000, 8192), Resources(3000, 512)), ())
    colo.tick(2.0, "c0", twin, twin.list_nodes(), [room], workloads)  # the escrow it freed is there: no more evictions
    assert len(decisions) == 1


def test_batch_neither_pushes_online_work_away_nor_keeps_it_out(tmp_path: Path) -> None:
    """A cluster nearly full of batch reads as unloaded to rebalancing and has room for online work (online outbids it)."""
    clock = [0.0]
    plane = ControlPlane(tmp_path / "cp.db", Backends(lambda: clock[0], twin_ready_delay_s=0.0), lambda: clock[0])
    for name in ("a", "b"):
        plane.register_cluster(ClusterSpec(name, "r0", twin_nodes=2, twin_cpu_milli=8000))
    plane.tick(0.0)
    (home,) = plane.submit(Workload("web", 1, Template(500, 128)), dry_run=False).counts  # movable, to either cluster
    away = "b" if home == "a" else "a"
    assert plane.submit(Workload("crunch", 14, Template(1000, 128, qos="batch"), Policy(clusters=(home,))), dry_run=False).counts == {home: 14}
    for t in range(1, 40):
        clock[0] = float(t)
        plane.tick(clock[0])
    assert plane.loads[home].now == pytest.approx(500 / 16000) and away in plane.loads  # not (14000 + 500) / 16000, past the 0.85 overload
    assert not plane.journal.active() and not [d for d in plane.registry.decisions() if d.kind == "rebalance"]
    online = plane.submit(Workload("api", 4, Template(1000, 128), Policy(clusters=(home,))), dry_run=True)
    assert online.counts == {home: 4}  # batch's requests are not in online's way
    assert plane.submit(Workload("more", 4, Template(1000, 128, qos="batch"), Policy(clusters=(home,))), dry_run=True).unplaced
    plane.close()


def test_online_load_takes_batch_bookings_out_of_what_agents_report() -> None:
    cap = Resources(16000, 32768)
    batch = Resources(6000, 1024)  # 2000m of it on reclaimed CPU: agents book 4000m (and all its memory)
    assert online_load(cap, Resources(2000, 1024), Resources(9000, 4096), batch, 2000) == pytest.approx(5000 / 16000)
    assert online_load(cap, Resources(2000, 1024), Resources(9000, 4096), Resources(), 0) == pytest.approx(9000 / 16000)


def test_serve_takes_the_colocation_round_from_its_flags_and_refuses_a_stride_shorter_than_a_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ColocationConfig] = []

    class Seen(ControlPlane):
        def __init__(self, *args: object, colocation: ColocationConfig = ColocationConfig(), **kwargs: object) -> None:
            seen.append(colocation)
            raise OSError("stopped before serving")

    monkeypatch.setattr("controlplane.runtime.ControlPlane", Seen)
    base = ["controlplane", "serve", "--db", str(tmp_path / "cp.db"), "--metrics-port", "-1"]
    result = CliRunner().invoke(main, [*base, "--colocation-round-s", "2", "--colocation-stride-s", "10", "--colocation-headroom-milli", "250"])
    assert result.exit_code == 2 and "stopped before serving" in result.output
    assert seen == [ColocationConfig(stride_s=10.0, round_s=2.0, headroom_milli=250)]
    result = CliRunner().invoke(main, [*base, "--colocation-round-s", "20", "--colocation-stride-s", "10"])
    assert result.exit_code == 2 and "--colocation-stride-s 10 is shorter than --colocation-round-s 20" in result.output
    assert "Traceback" not in result.output and len(seen) == 1


@pytest.mark.parametrize("why, evicted", [
    ("selector", 0),  # it asks for a label no node has: pending whatever batch does
    ("taint", 0),  # the node's taint keeps it off
    ("tolerated", 1),  # it tolerates the taint: batch alone holds the node, batch goes
])
def test_only_a_pod_that_batch_keeps_off_the_node_costs_batch_an_eviction(why: str, evicted: int) -> None:
    dedicated = ("dedicated", "ml", "NoSchedule")
    node = make_nodes("c0", "r0", 1, cpu_milli=4000)[0]
    twin = TwinCluster("c0", [replace(node, taints=(Taint("dedicated", "ml"),))], lambda: 0.0, 0.0, Binder.EXTERNAL)
    twin.create_workload(WorkloadSpec("web", 1, 3000, 128, tolerations=(dedicated,)))
    twin.create_workload(WorkloadSpec("crunch", 3, 1000, 128, tolerations=(dedicated,), qos="batch"))
    twin.create_workload(WorkloadSpec("api", 1, 100, 128, node_selector={"disk": "ssd"} if why == "selector" else {},
                                      tolerations=(dedicated,) if why != "taint" else ()))
    workloads = {"web": Workload("web", 1, Template(3000, 128)), "api": Workload("api", 1, Template(100, 128)),
                 "crunch": Workload("crunch", 3, Template(1000, 128, priority=5, qos="batch"))}
    web = twin.list_pods("web")[0]
    assert twin.bind_pod(web.name, NODE, web.epoch).outcome is BindOutcome.BOUND
    for i, p in enumerate(twin.list_pods("crunch")):
        assert twin.bind_pod(p.name, NODE, p.epoch, reclaimed_milli=1000 if i else 0).outcome is BindOutcome.BOUND
    decisions: list[DecisionRecord] = []
    colo = Colocation(Metrics(), decisions.append, ColocationConfig(stride_s=1.0))
    full = AgentReport("c0", NODE, "a", 1, NodeSummary(NODE, Resources(4000, 8192), Resources(4000, 512)), ())
    for t in (0.0, 1.0):
        colo.tick(t, "c0", twin, twin.list_nodes(), [full], workloads)
    assert [d.kind for d in decisions] == ["preempt"] * evicted


def test_rebalancing_moves_online_work_not_batch() -> None:
    """The load rebalancing reads is online's: moving batch away would relieve none of it (and batch yields on its own)."""
    views = [ClusterView(c, "r0", {"amd64": Resources(16000, 65536)}) for c in ("a", "b")]
    topology = Topology()
    for v in views:
        topology.add(Cluster(v.name, v.region))
    workloads = {"crunch": Workload("crunch", 8, Template(1000, 128, qos="batch")), "web": Workload("web", 2, Template(1000, 128))}
    placed = [Placement("crunch", "a", 8, 1), Placement("web", "a", 2, 1)]
    plans, _ = Planner(topology).plan(0.0, {}, views, {"a": Load(0.9, 0.9), "b": Load(0.1, 0.1)}, workloads, placed, [])
    assert [(p.workload, p.source, p.target) for p in plans] == [("web", "a", "b")]
