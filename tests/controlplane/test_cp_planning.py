"""Cluster-level placement (filters, scores, reasons), the planner (failover, rebalance, rate limit) and forecasts."""

from __future__ import annotations

import pytest

from controlplane import admission
from controlplane.forecast import LoadForecast
from controlplane.journal import Kind
from controlplane.planner import Load, Planner, PlannerConfig
from controlplane.registry import Placement
from controlplane.verdicts import Health, Verdict
from controlplane.workloads import Policy, Spread, Template, Workload
from fedcore.resources import Resources
from fedcore.topology import Cluster, Topology

CAP = Resources(16000, 65536)


def view(name: str, region: str, used: int = 0, arch: str = "amd64", health: Health = Health.HEALTHY, labels: dict[str, str] | None = None) -> admission.ClusterView:
    return admission.ClusterView(name, region, {arch: CAP}, Resources(used, 0), labels or {}, Verdict(health, ()).taints)


def topology(*views: admission.ClusterView) -> Topology:
    t = Topology()
    for v in views:
        t.add(Cluster(v.name, v.region))
    t.set_latency("r0", "r1", 80.0)
    return t


def wl(name: str = "web", replicas: int = 4, **policy: object) -> Workload:
    return Workload(name, replicas, Template(1000, 1024), Policy(**policy))  # type: ignore[arg-type]


VIEWS = [view("a", "r0"), view("b", "r0"), view("c", "r1"), view("d", "r1")]


def test_spread_over_regions_balances_regions() -> None:
    choice = admission.choose(wl(spread=Spread.REGIONS), VIEWS, topology(*VIEWS))
    assert choice.ok
    per_region = {"r0": choice.counts.get("a", 0) + choice.counts.get("b", 0), "r1": choice.counts.get("c", 0) + choice.counts.get("d", 0)}
    assert per_region == {"r0": 2, "r1": 2}


def test_pack_keeps_replicas_together() -> None:
    choice = admission.choose(wl(spread=Spread.NONE), VIEWS, topology(*VIEWS))
    assert list(choice.counts.values()) == [4]


@pytest.mark.parametrize("policy, allowed", [
    (dict(clusters=("c",)), {"c"}),
    (dict(regions=("r0",)), {"a", "b"}),
    (dict(avoid_clusters=("a", "b", "c")), {"d"}),
    (dict(cluster_labels={"tier": "gold"}), {"b"}),
])
def test_policy_filters_clusters(policy: dict[str, object], allowed: set[str]) -> None:
    views = [view("a", "r0"), view("b", "r0", labels={"tier": "gold"}), view("c", "r1"), view("d", "r1")]
    choice = admission.choose(wl(spread=Spread.CLUSTERS, **policy), views, topology(*views))
    assert choice.ok and set(choice.counts) <= allowed


def test_failed_cluster_is_tainted_out_unless_tolerated() -> None:
    views = [view("a", "r0", health=Health.DOWN), view("b", "r0", used=15500)]
    choice = admission.choose(wl(replicas=1), views, topology(*views))
    assert not choice.ok and "TaintToleration" in choice.reasons[0] and "NodeResourcesFit" in choice.reasons[0]
    tolerant = Workload("tol", 1, Template(1000, 1024, tolerations=(("fedplane.io/unreachable", "", ""),)))
    assert admission.choose(tolerant, views, topology(*views)).counts == {"a": 1}


def test_arch_and_capacity_filters() -> None:
    views = [view("x86", "r0"), view("pi", "r1", arch="arm64")]
    arm = Workload("arm", 2, Template(1000, 1024, archs=("arm64",)))
    assert admission.choose(arm, views, topology(*views)).counts == {"pi": 2}
    huge = Workload("huge", 1, Template(20000, 1024))
    refused = admission.choose(huge, views, topology(*views))
    assert refused.unplaced == 1 and "0/2" in refused.reasons[-1]


def test_latency_prefers_home_region() -> None:
    choice = admission.choose(wl(replicas=1, home_region="r1"), VIEWS, topology(*VIEWS))
    assert set(choice.counts) <= {"c", "d"}


def test_bad_template_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown arch"):
        Template(1, 1, archs=("sparc",))
    with pytest.raises(ValueError, match="replicas"):
        wl(replicas=0)


PLACED = [Placement("web", "a", 2, 1), Placement("web", "c", 2, 1), Placement("db", "b", 1, 1)]
WORKLOADS = {"web": wl("web", 4, spread=Spread.REGIONS), "db": wl("db", 1, movable=False)}


def verdicts(**health: Health) -> dict[str, Verdict]:
    return {c: Verdict(health.get(c, Health.HEALTHY), ("test",)) for c in "abcd"}


def test_failover_moves_every_placement_off_a_failed_cluster_with_reasons() -> None:
    planner = Planner(topology(*VIEWS))
    views = [view(v.name, v.region, health=Health.DOWN if v.name == "a" else Health.HEALTHY) for v in VIEWS]
    plans, notes = planner.plan(0.0, verdicts(a=Health.DOWN), views, {}, WORKLOADS, PLACED, [])
    assert notes == []
    assert [p.kind for p in plans] == [Kind.FAILOVER] * len(plans)
    assert sum(p.replicas for p in plans) == 2 and all(p.source == "a" and p.target != "a" for p in plans)
    assert all(p.target == "b" for p in plans), "spread over regions: r0 lost its replicas, so they stay in r0"
    assert plans[0].reasons[0] == "a is down"


def test_failover_is_not_replanned_while_a_migration_is_in_flight() -> None:
    from controlplane.journal import Migration

    planner = Planner(topology(*VIEWS))
    inflight = Migration("m1", "web", "a", "b", 2, 2, 2, Kind.FAILOVER)
    plans, _ = planner.plan(0.0, verdicts(a=Health.PARTITIONED), VIEWS, {}, WORKLOADS, PLACED, [inflight])
    assert plans == []


def test_replicas_a_failover_could_not_place_are_planned_again_when_room_appears() -> None:
    from controlplane.registry import PlacementState

    planner = Planner(topology(*VIEWS))
    big = {"big": wl("big", 10, spread=Spread.NONE)}
    full = [view("a", "r0", health=Health.DOWN), view("b", "r0", used=13000), view("c", "r1", used=16000), view("d", "r1", used=16000)]
    plans, notes = planner.plan(0.0, verdicts(a=Health.DOWN), full, {}, big, [Placement("big", "a", 10, 1)], [])
    assert [(p.target, p.replicas) for p in plans] == [("b", 3)] and notes and "7 replica(s) unplaced" in notes[0]
    # the migration ran; remove-source found a unreachable and left the 7 unmoved replicas on it, stale
    after = [Placement("big", "a", 7, 1, PlacementState.STALE), Placement("big", "b", 3, 2)]
    roomier = [full[0], view("b", "r0", used=16000), view("c", "r1", used=9000), full[3]]
    plans, notes = planner.plan(1.0, verdicts(a=Health.DOWN), roomier, {}, big, after, [])
    assert [(p.kind, p.source, p.target, p.replicas, p.target_total) for p in plans] == [(Kind.FAILOVER, "a", "c", 7, 7)] and notes == []
    # once every replica has a home the stale copy holds none and nothing more is planned
    done = [Placement("big", "a", 0, 1, PlacementState.STALE), Placement("big", "b", 3, 2), Placement("big", "c", 7, 3)]
    assert planner.plan(2.0, verdicts(a=Health.DOWN), roomier, {}, big, done, [])[0] == []


def test_failover_avoids_clusters_where_the_workload_is_already_moving() -> None:
    from controlplane.journal import Migration

    planner = Planner(topology(*VIEWS))
    web = {"web": wl("web", 4, spread=Spread.NONE)}
    placed = [Placement("web", "a", 2, 1), Placement("web", "b", 2, 1)]
    rebalance = Migration("m1", "web", "b", "c", 2, 2, 2, Kind.REBALANCE)  # b's remove-source will scale b down to 0
    plans, _ = planner.plan(0.0, verdicts(a=Health.DOWN), VIEWS, {}, web, placed, [rebalance])
    assert plans and all(p.target not in ("a", "b", "c") for p in plans) and sum(p.replicas for p in plans) == 2


def test_rebalance_is_rate_limited_and_skips_pinned_workloads() -> None:
    planner = Planner(topology(*VIEWS), PlannerConfig(evictions_per_window=1, window_s=30.0))
    loads = {"a": Load(0.95, 0.97), "b": Load(0.9, 0.9), "c": Load(0.2, 0.2), "d": Load(0.1, 0.1)}
    plans, _ = planner.plan(0.0, verdicts(), VIEWS, loads, WORKLOADS, PLACED, [])
    assert {(p.kind, p.workload, p.source) for p in plans} == {(Kind.REBALANCE, "web", "a")}  # db on b is pinned
    assert sum(p.replicas for p in plans) == 2 and {p.target for p in plans} <= {"c", "d"}
    assert "forecast" in plans[0].reasons[0]
    again, _ = planner.plan(10.0, verdicts(), VIEWS, loads, WORKLOADS, PLACED, [])
    assert again == []  # one eviction per cluster per 30 s
    later, _ = planner.plan(31.0, verdicts(), VIEWS, loads, WORKLOADS, PLACED, [])
    assert {p.source for p in later} == {"a"}


def test_forecast_ignores_steps_and_follows_sustained_trends() -> None:
    f = LoadForecast(min_span_s=30.0)
    f.add(0.0, 0.1)
    f.add(1.0, 0.6)  # a failover landing: a step, not growth
    assert f.trend() == 0.0 and f.at(60.0) < 0.6
    g = LoadForecast(min_span_s=30.0)
    for t in range(0, 61, 5):
        g.add(float(t), 0.2 + 0.01 * t)  # +0.01 per second for a minute
    assert g.trend() == pytest.approx(0.01, rel=1e-6)
    assert g.at(30.0) > 0.8


def test_return_home_waits_for_the_hold_and_is_off_by_default() -> None:
    from controlplane.registry import Home

    homes = [Home("web", "a", "b", 2)]
    placed = [Placement("web", "b", 2, 2), Placement("web", "c", 2, 1)]
    off = Planner(topology(*VIEWS))
    assert off.plan(100.0, verdicts(), VIEWS, {}, WORKLOADS, placed, [], homes, {"a": 0.0})[0] == []
    on = Planner(topology(*VIEWS), PlannerConfig(return_after_s=30.0))
    assert on.plan(20.0, verdicts(), VIEWS, {}, WORKLOADS, placed, [], homes, {"a": 0.0})[0] == []
    plans, _ = on.plan(31.0, verdicts(), VIEWS, {}, WORKLOADS, placed, [], homes, {"a": 0.0})
    assert [(p.kind, p.source, p.target, p.replicas, p.target_total) for p in plans] == [(Kind.RETURN, "b", "a", 2, 2)]
