"""Failback policies: hysteresis against a flapping home, stabilization and maintenance windows, groups moving
together, the eviction budget, bad values, and what old stored workloads load as."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from controlplane import convert, returning, server
from controlplane import admission
from controlplane.auth import INSECURE
from controlplane.failbacks import MAX_STRETCH, Failback, FailbackMode, Falls, in_maintenance, minutes, required_s
from controlplane.journal import Kind
from controlplane.migrations import RetryPolicy
from controlplane.planner import Planner, PlannerConfig
from controlplane.registry import ClusterSpec, Home, Placement, PlacementState
from controlplane.runtime import Backends, ControlPlane
from controlplane.verdicts import Health, Verdict
from controlplane.workloads import Policy, Spread, Template, Workload
from fedapi import client, controlplane_pb2_grpc
from fedapi import controlplane_pb2 as cp
from fedcore.resources import Resources
from fedcore.topology import Cluster, Topology

CAP = Resources(16000, 65536)
VIEWS = [admission.ClusterView(n, r, {"amd64": CAP}, Resources(), {}, ()) for n, r in (("a", "r0"), ("b", "r0"), ("c", "r1"))]
TICK = 0.2
WINDOW = 15.0


def topology() -> Topology:
    t = Topology()
    for v in VIEWS:
        t.add(Cluster(v.name, v.region))
    return t


def wl(name: str, failback: Failback = Failback(FailbackMode.STABLE, WINDOW), group: str = "") -> Workload:
    return Workload(name, 2, Template(500, 512), Policy(spread=Spread.CLUSTERS, clusters=("a", "b"), failback=failback, group=group))


class World:
    """Placements and homes as the executor would leave them, each plan applied at once (a sans-IO stand-in)."""

    def __init__(self, workloads: list[Workload], config: PlannerConfig = PlannerConfig()) -> None:
        self.workloads = {w.name: w for w in workloads}
        self.planner = Planner(topology(), config)
        self.placements = {(w.name, "a"): 2 for w in workloads}
        self.homes: dict[tuple[str, str, str], int] = {}
        self.moves: dict[str, list[tuple[float, Kind]]] = {w: [] for w in self.workloads}
        self.healthy_since: dict[str, float] = {"a": 0.0, "b": 0.0, "c": 0.0}

    def tick(self, now: float, a_up: bool, wall: float = 0.0) -> None:
        if not a_up:
            self.healthy_since.pop("a", None)
        else:
            self.healthy_since.setdefault("a", now)
        verdicts = {c: Verdict(Health.HEALTHY if c in self.healthy_since else Health.DOWN, ()) for c in ("a", "b", "c")}
        placements = [Placement(w, c, k, 1) for (w, c), k in self.placements.items()]
        homes = [Home(w, h, a, k) for (w, h, a), k in self.homes.items()]
        plans, _ = self.planner.plan(now, verdicts, VIEWS, {}, self.workloads, placements, [], homes, dict(self.healthy_since), wall)
        for p in plans:
            self.moves[p.workload].append((now, p.kind))
            self.placements[(p.workload, p.source)] -= p.replicas
            if not self.placements[(p.workload, p.source)]:
                del self.placements[(p.workload, p.source)]
            self.placements[(p.workload, p.target)] = self.placements.get((p.workload, p.target), 0) + p.replicas
            if p.kind is Kind.FAILOVER:
                key = (p.workload, p.source, p.target)
                self.homes[key] = self.homes.get(key, 0) + p.replicas
            elif p.kind is Kind.RETURN:
                self.homes.pop((p.workload, p.target, p.source), None)

    def on(self, cluster: str) -> set[str]:
        return {w for (w, c), k in self.placements.items() if c == cluster and k}


def flapping(period_s: float = 20.0, flaps: int = 6) -> Iterator[tuple[float, bool]]:
    """Cluster ``a`` down for half of every period, ``flaps`` times, on ticks of TICK seconds."""
    for i in range(int(flaps * period_s / TICK)):
        now = 1.0 + i * TICK
        yield now, (now - 1.0) % period_s >= period_s / 2


def test_a_flapping_home_moves_each_workload_out_once_and_home_once() -> None:
    world = World([wl("web"), wl("api")], PlannerConfig(evictions_per_window=2))
    last = 0.0
    for now, up in flapping():
        world.tick(now, up)
        last = now
    up_since = world.healthy_since["a"]
    assert all(len(m) == 1 and m[0][1] is Kind.FAILOVER for m in world.moves.values()), world.moves
    # after the flapping: healthy for good; the window is stretched by the six recent falls
    need, falls = required_s(WINDOW, world.planner.falls.of("a"), last)
    assert falls == 6 and need == WINDOW * MAX_STRETCH
    now = last + TICK
    while now < up_since + need + 5:
        world.tick(now, True)
        now += TICK
    for name, moves in world.moves.items():
        assert [k for _, k in moves] == [Kind.FAILOVER, Kind.RETURN], (name, moves)
        assert up_since + need <= moves[1][0] <= up_since + need + 2 * TICK
    assert world.on("a") == {"web", "api"} and not world.homes


def test_the_window_restarts_at_every_fall() -> None:
    world = World([wl("web")])
    world.tick(1.0, False)
    for now in (2.0, 10.0):  # up 8 s, under the 15 s window
        world.tick(now, True)
    world.tick(12.0, False)  # fell again: the second fall doubles the window
    t = 13.0
    while t < 13.0 + 2 * WINDOW - 1:
        world.tick(t, True)
        t += 1.0
    assert [k for _, k in world.moves["web"]] == [Kind.FAILOVER]
    world.tick(13.0 + 2 * WINDOW, True)
    assert [k for _, k in world.moves["web"]] == [Kind.FAILOVER, Kind.RETURN]


@pytest.mark.parametrize("failback, returns", [
    (Failback(FailbackMode.NEVER), False),
    (Failback(FailbackMode.STABLE, WINDOW), True),
    (Failback(), False),  # the plane's default: --return-after 0 = never
])
def test_policy_modes(failback: Failback, returns: bool) -> None:
    world = World([wl("web", failback)])
    world.tick(1.0, False)
    for t in range(2, 40):
        world.tick(float(t), True)
    assert (Kind.RETURN in [k for _, k in world.moves["web"]]) is returns


def test_the_plane_default_window_applies_to_workloads_without_a_policy() -> None:
    world = World([wl("web", Failback())], PlannerConfig(return_after_s=5.0))
    world.tick(1.0, False)
    for t in range(2, 9):
        world.tick(float(t), True)
    assert [k for _, k in world.moves["web"]] == [Kind.FAILOVER, Kind.RETURN]


def test_maintenance_window_holds_a_return_until_it_opens() -> None:
    policy = Failback(FailbackMode.MAINTENANCE, 5.0, "02:00-04:00")
    world = World([wl("web", policy)])
    world.tick(1.0, False)
    one_am, two_am = 3600.0, 7200.0
    for t in range(2, 30):
        world.tick(float(t), True, wall=one_am + t)
    assert [k for _, k in world.moves["web"]] == [Kind.FAILOVER]
    world.tick(31.0, True, wall=two_am + 1)
    assert [k for _, k in world.moves["web"]] == [Kind.FAILOVER, Kind.RETURN]


def test_maintenance_windows_wrap_midnight() -> None:
    assert minutes("22:30-01:00") == (22 * 60 + 30, 60)
    assert in_maintenance("22:30-01:00", 23 * 3600) and in_maintenance("22:30-01:00", 86400 + 1800)
    assert not in_maintenance("22:30-01:00", 12 * 3600)


def test_a_group_returns_together_once_every_member_home_is_ready() -> None:
    web, db = wl("web", group="shop"), wl("db", Failback(FailbackMode.STABLE, 25.0), group="shop")
    world = World([web, db], PlannerConfig(evictions_per_window=1, window_s=30.0))
    world.tick(1.0, False)
    for t in range(2, 40):
        world.tick(float(t), True)
    returns = {name: [t for t, k in m if k is Kind.RETURN] for name, m in world.moves.items()}
    assert returns["web"] == returns["db"] == [27.0], returns  # web's 15 s window waited for db's 25 s


def test_failback_is_paced_by_the_eviction_budget() -> None:
    world = World([wl("web"), wl("api")], PlannerConfig(evictions_per_window=1, window_s=30.0))
    world.tick(1.0, False)
    for t in range(2, 60):
        world.tick(float(t), True)
    firsts = sorted(next(t for t, k in m if k is Kind.RETURN) for m in world.moves.values())
    assert firsts[0] == 17.0 and firsts[1] == firsts[0] + 30.0  # one eviction of b per 30 s: the second waits a window


def test_the_dry_run_says_why_a_home_waits_and_spends_nothing() -> None:
    planner = Planner(topology(), PlannerConfig())
    falls = Falls()
    for t in (0.0, 20.0, 40.0):
        falls.observe(t, {"a"})
        falls.observe(t + 10, set())
    x = returning.Inputs(60.0, 0.0, 0.0, {"a": 50.0}, falls)
    homes = [Home("web", "a", "b", 2)]
    placed = [Placement("web", "b", 2, 2)]
    waiting = planner.failback_preview(x, homes, {"web": wl("web")}, placed, set())
    assert waiting[0].moves == () and "healthy for 10s of the 60s needed (3 falls in 10 min: 4x the 15s window)" in waiting[0].reasons[0]
    x = returning.Inputs(111.0, 0.0, 0.0, {"a": 50.0}, falls)
    for _ in range(3):  # previewing spends no token
        ready = planner.failback_preview(x, homes, {"web": wl("web")}, placed, set())
        assert [(m.away, m.home, m.replicas) for m in ready[0].moves] == [("b", "a", 2)]


@pytest.mark.parametrize("make, message", [
    (lambda: Failback(FailbackMode.STABLE, 0.0), "failback window must be"),
    (lambda: Failback(FailbackMode.MAINTENANCE, 60.0), "needs a maintenance window"),
    (lambda: Failback(FailbackMode.MAINTENANCE, 60.0, "25:00-01:00"), "bad maintenance window"),
    (lambda: Failback(FailbackMode.MAINTENANCE, 60.0, "02:00-02:00"), "same minute"),
    (lambda: Failback.from_dict({"mode": "sometimes"}), "unknown failback 'sometimes'"),
    (lambda: Policy(group="Not A Name"), "group name"),
])
def test_bad_policy_values_get_clear_errors(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_workloads_stored_before_failback_policies_still_load() -> None:
    new = wl("web", Failback(FailbackMode.MAINTENANCE, 90.0, "02:00-04:00"), group="shop")
    assert Workload.from_dict(new.to_dict()) == new
    old = new.to_dict()
    del old["policy"]["failback"], old["policy"]["group"]
    loaded = Workload.from_dict(old)
    assert loaded.policy.failback == Failback() and loaded.policy.group == "" and not loaded.stateful


def test_stale_placements_on_the_home_are_not_counted_as_away() -> None:
    x = returning.Inputs(100.0, 0.0, 0.0, {"a": 0.0}, Falls())
    placed = [Placement("web", "b", 2, 2, PlacementState.STALE)]
    out = returning.plan([Home("web", "a", "b", 2)], {"web": wl("web")}, placed, set(), x, lambda cs: True)
    assert out[0].moves == ()


def test_the_plane_previews_failback_and_the_api_says_why_it_waits(tmp_path: Path) -> None:
    """``migrate --dry-run``'s answer: the return waits (and why) until the window passes, then would start; the preview
    starts nothing."""
    clock = Clock()
    backends = Backends(clock, twin_ready_delay_s=0.5)
    plane = ControlPlane(tmp_path / "cp.db", backends, clock, retry=RetryPolicy(base_s=0.1, ready_timeout_s=5.0))
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.register_cluster(ClusterSpec("b", "r1"))
    plane.tick(0.0)
    w = Workload("web", 2, Template(500, 512), Policy(clusters=("a", "b"), failback=Failback(FailbackMode.STABLE, 10.0)))
    home = next(iter(plane.submit(w, dry_run=False).counts))
    backends.twins()[home].outage()
    tick_until(plane, clock, lambda: bool(plane.registry.homes()))
    backends.twins()[home].heal()
    tick_until(plane, clock, lambda: home in {c for c, (v, _) in plane.verdicts.items() if v.health is Health.HEALTHY})
    waiting = convert.failback_preview(plane.failback_preview(clock.t))
    assert [(m.workload, m.target, m.kind) for m in waiting] == [("web", home, "return")]
    assert waiting[0].error.startswith("waits: ") and "of the 10s needed" in waiting[0].error
    clock.t += 10.0
    ready = convert.failback_preview(plane.failback_preview(clock.t))
    assert ready[0].error == "" and any("returning 2 replica(s)" in r.message for r in ready[0].reasons)
    assert not any(m.kind is Kind.RETURN for m in plane.journal.all()), "a preview starts nothing"
    plane.close()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def tick_until(plane: ControlPlane, clock: Clock, done: Callable[[], bool]) -> None:
    for _ in range(200):
        clock.t = round(clock.t + 0.2, 3)
        plane.tick(clock.t)
        if done():
            return
    raise AssertionError("did not happen in time")


@pytest.mark.parametrize("policy, message", [
    (cp.PlacementPolicy(failback="sometimes"), "unknown failback 'sometimes'"),
    (cp.PlacementPolicy(failback="maintenance"), "needs a maintenance window"),
    (cp.PlacementPolicy(failback="maintenance", maintenance_window="2am-4am"), "bad maintenance window '2am-4am'"),
    (cp.PlacementPolicy(failback="stable", failback_window_s=-5), "failback window must be 1..86400 seconds"),
    (cp.PlacementPolicy(group="Shop_1"), "group name 'Shop_1'"),
])
def test_the_api_refuses_bad_failback_policies_clearly_and_previews_through_list_migrations(
    tmp_path: Path, policy: cp.PlacementPolicy, message: str,
) -> None:
    async def go() -> None:
        backends = Backends(time.monotonic, twin_ready_delay_s=0.1)
        plane = ControlPlane(tmp_path / "cp.db", backends, time.monotonic)
        running = await server.start(plane, auth=INSECURE)
        channel = client.connect_aio(f"127.0.0.1:{running.port}")
        stub = controlplane_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]
        try:
            spec = cp.WorkloadSpec(name="web", replicas=1, pod=cp.PodTemplate(cpu_milli=100, memory_mib=64), policy=policy)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SubmitWorkload(cp.SubmitWorkloadRequest(workload=spec))
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT and message in (refused.value.details() or "")
            preview = await stub.ListMigrations(cp.ListMigrationsRequest(failback_dry_run=True))
            assert list(preview.migrations) == []
        finally:
            await channel.close()
            await running.stop(0)
            plane.close()

    asyncio.run(go())
