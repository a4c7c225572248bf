"""Predictive autoscaling: the controllers' documented rules, forecasts that never see the future,
calibrated quantiles, bad series falling back to HPA, and the product path (twin and Kubernetes API
double through the back end's scale call, journal, metrics, gRPC and the CLI)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from controlplane.autoscaling import controllers as ctl, feeds, forecasters as fc, series as sr
from fedplane.lab.benches import autoscalebench
from fedplane.lab.benches.autoscalebounds import Foresight
from controlplane.autoscaling.actuating import shares
from controlplane.autoscaling.learned import Residual, adjusted, floor_rule as learned_floor
from controlplane.autoscaling.peaks import PeakForecast
from controlplane.autoscaling.scaler import Autoscaler
from controlplane.autoscaling.replicas import TICK_S, simulate
from controlplane.autoscaling.specs import AutoscaleSpec
from controlplane.registry import Placement

DAY = 288  # samples per day at 300 s


def obs(now: float, demand: float, ready: int, replicas: int | None = None, forecast: float | None = None) -> ctl.Observation:
    return ctl.Observation(now, demand, ready, ready if replicas is None else replicas, forecast)


# -- controllers ----------------------------------------------------------------------------------
def test_hpa_skips_changes_within_its_tolerance() -> None:
    hpa = ctl.Hpa()
    assert hpa.decide(obs(0, 10 * 0.7 * 1.09, 10, 10)) == 10   # 9% over target: within 0.1
    assert ctl.Hpa().decide(obs(0, 10 * 0.7 * 1.2, 10, 10)) == 12  # ceil(10 × 1.2)


def test_hpa_scale_up_is_limited_to_double_or_four_pods_per_period() -> None:
    hpa = ctl.Hpa()
    assert hpa.decide(obs(0, 100.0, 2, 2)) == 6        # +4 beats +100% at 2 pods
    hpa = ctl.Hpa()
    assert hpa.decide(obs(0, 1000.0, 10, 10)) == 20    # +100% beats +4 at 10 pods
    assert hpa.decide(obs(5, 1000.0, 10, 20)) == 20    # no new decision inside the 15 s period
    assert hpa.decide(obs(15, 1000.0, 10, 20)) == 40   # the next period: double again


def test_hpa_scale_down_waits_for_the_stabilization_window() -> None:
    hpa = ctl.Hpa()
    hpa.decide(obs(0, 0.7 * 20, 20, 20))
    t, got = 15.0, []
    while t <= 330:
        got.append((t, hpa.decide(obs(t, 0.7 * 5, 20, 20))))
        t += 15
    assert all(n == 20 for tt, n in got if tt < 300)   # the highest recommendation of the last 300 s
    assert got[-1][1] == 5


def test_keda_scales_down_only_after_its_cooldown() -> None:
    k = ctl.Keda()
    assert k.decide(obs(0, 7.0, 1)) == 10
    assert k.decide(obs(30, 1.4, 10)) == 10
    assert k.decide(obs(300, 1.4, 10)) == 2


def test_kpa_panics_at_twice_the_ready_pods_and_never_scales_down_in_panic() -> None:
    k = ctl.Kpa()
    for t in range(0, 55, 5):
        k.decide(obs(t, 3.5, 5))
    assert k.desired == 5
    k.decide(obs(55, 14.0, 5))
    assert k.decide(obs(60, 14.0, 5)) == 20            # panic window desire 20 ≥ 2 × 5 ready
    assert k.decide(obs(65, 3.5, 20)) == 20            # in panic: no scale-down
    assert k.decide(obs(200, 3.5, 20)) == 5            # a stable window later, calm again


def test_learned_residual_never_acts_alone() -> None:
    o = obs(0, 8.0, 20, 20, forecast=12.0)
    assert adjusted(20, o, -1.0, 0.8) == 18 and adjusted(20, o, 0.0, 0.8) == 15 and adjusted(20, o, 1.0, 0.8) == 14  # 70/80/90%
    assert adjusted(10, o, 1.0) == 10                  # never above the base: the residual only removes headroom
    demand = np.full(400, 7.0)
    a = simulate(Residual(lambda x: -1.0, ceiling=0.8), demand, 60.0, 10, lambda i: (7.0, 7.0, 1.0))
    b = simulate(ctl.Hpa(forecast_metric=True, name="forecast_hpa"), demand, 60.0, 10, lambda i: (7.0, 7.0, 1.0))
    assert np.array_equal(a.replicas, b.replicas)      # at the HPA's own target the residual changes nothing


@pytest.mark.parametrize("a", [-1.0, -0.2, 0.6, 1.0, 7.0])
def test_learned_residual_moves_at_most_its_stretch_from_the_floor_rule(a: float) -> None:
    o = ctl.Observation(0.0, 8.0, 30, 30, forecast=12.0, tail=14.0)   # the rule is sized on the tail (q99) peak
    assert adjusted(30, o, 0.0, ceiling=0.9) == math.ceil(14.0 / 0.9)  # action 0: the floor rule itself
    assert math.ceil(14.0 / 1.0) <= adjusted(30, o, a, ceiling=0.9) <= math.ceil(14.0 / 0.8) <= 30  # 90% ± 10 points


def test_the_hold_scales_down_only_to_its_highest_answer_of_the_hold() -> None:
    demand = np.r_[np.full(60, 20.0), np.full(240, 5.0)]
    at_once = simulate(Residual(learned_floor, ceiling=1.0), demand, 60.0, 30, lambda i: (float(demand[i]),) * 2 + (1.0,))
    held = simulate(Residual(learned_floor, ceiling=1.0, hold_s=600.0), demand, 60.0, 30, lambda i: (float(demand[i]),) * 2 + (1.0,))
    drop = 60 + int(300 / TICK_S)   # past the base's own 300 s stabilization
    assert at_once.replicas[drop] < 20 and held.replicas[drop] == 20
    assert held.replicas[-1] < 20   # the hold ends: it delays scale-down, never adds


def test_an_untrusted_forecast_leaves_the_residual_no_headroom_to_remove() -> None:
    untrusted = ctl.Observation(0.0, 8.0, 30, 30, forecast=9.0, tail=40.0, trust=0.0)  # the guarded q95 near the level,
    assert adjusted(12, untrusted, 1.0, ceiling=1.0) == 12                               # the tail as calibrated: no cut


@pytest.mark.parametrize(("trust", "replicas"), [(1.0, 10), (0.0, 15)])
def test_the_residual_steps_aside_where_the_forecast_has_no_trust(trust: float, replicas: int) -> None:
    demand = np.full(120, 10.0)
    run = simulate(Residual(learned_floor, ceiling=1.0), demand, 60.0, 15, lambda i: (10.0, 10.0, trust))
    assert run.replicas[-1] == replicas   # the base (HPA at 70%) holds 15; trusted, the floor cuts to the tail


def test_trust_falls_on_spiky_demand_and_the_guarded_peak_drops_the_tail() -> None:
    rng = np.random.default_rng(3)
    calm = daily(6, 0.5)
    spiky = np.where(rng.random(6 * DAY) < 0.1, 10 * calm, 0.2 * calm)   # request bursts over a trickle
    trusts, tails = {}, {}
    for name, x in (("calm", calm), ("spiky", spiky)):
        pf = PeakForecast(fc.make("mstl_ets", x[: 4 * DAY], DAY, 300.0, 3), 3)
        for v in x:
            pf.observe(float(v))
        trusts[name], tails[name] = pf.trust(), (pf.peak(tail=True), pf.guarded(tail=True))
    assert trusts["calm"] == 1.0 and tails["calm"][0] == tails["calm"][1]
    assert trusts["spiky"] == 0.0 and tails["spiky"][1] < 0.5 * tails["spiky"][0]


# -- forecasts ------------------------------------------------------------------------------------
def daily(days: int, noise: float, seed: int = 0) -> np.ndarray:
    t = np.arange(days * DAY)
    return 20 + 8 * np.sin(2 * np.pi * t / DAY) + np.random.default_rng(seed).normal(0, noise, len(t))


@pytest.mark.parametrize("name", fc.MODELS)
def test_forecasts_never_see_the_future(name: str) -> None:
    x = daily(4, 1.0)
    f1 = fc.forecasts(fc.make(name, x[:600], DAY, 300.0, 12), x, 12)
    y = x.copy()
    y[700:] = 0.0
    f2 = fc.forecasts(fc.make(name, x[:600], DAY, 300.0, 12), y, 12)
    assert np.array_equal(f1[:700], f2[:700])


def test_mstl_ets_beats_naive_an_hour_ahead_on_a_daily_series() -> None:
    x = daily(6, 1.0)
    split = 4 * DAY
    err = {m: fc.mae(fc.forecasts(fc.make(m, x[:split], DAY, 300.0, 12), x, 12), x, 12, split) for m in ("naive", "mstl_ets")}
    assert err["mstl_ets"] < 0.6 * err["naive"]


def test_peak_quantile_is_calibrated_on_history() -> None:
    x = daily(6, 2.0, seed=1)
    pf = PeakForecast(fc.make("mstl_ets", x[: 4 * DAY], DAY, 300.0, 3), 3)
    hits = total = 0
    preds = []
    for i, v in enumerate(x):
        pf.observe(float(v))
        preds.append(pf.peak())
        if i >= 4 * DAY and i + 3 < len(x):
            total += 1
            hits += x[i: i + 4].max() <= preds[i]
    assert 0.88 <= hits / total <= 0.99


# -- bad series -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("values", "message"), [
    ([1.0, math.nan, 2.0] * 100, "non-finite"),
    ([1.0, 2.0], "at least"),
    ([1.0, -1.0] * 100, "negative"),
])
def test_series_checks_name_the_series_and_the_fault(values: list[float], message: str) -> None:
    with pytest.raises(sr.SeriesError, match=f"'web'.*{message}"):
        sr.checked("web", values, 10)


def test_a_series_too_short_to_forecast_falls_back_to_hpa_with_a_message() -> None:
    a = Autoscaler.build(AutoscaleSpec("web", "load.csv", stride_s=10.0, values=(5.0, 6.0, 7.0)))
    assert a.peaks is None and "no history" in a.fallback and "HPA" in a.fallback
    for t in range(0, 120, 5):
        d = a.step(float(t), 2, 2)
        assert d.desired >= 1 and "hpa" in d.reason


def test_a_series_naming_a_file_is_refused_on_enable_and_an_hpa_when_stored(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("1\n2\n3\n")
    with pytest.raises(sr.SeriesError, match="neither a packaged series"):
        Autoscaler.build(AutoscaleSpec("web", str(tmp_path / "x.csv")), strict=True)
    assert "neither a packaged series" in Autoscaler.build(AutoscaleSpec("web", str(tmp_path / "x.csv"))).fallback


def test_shares_grow_the_largest_placement_and_shrink_it_first() -> None:
    placed = [Placement("w", "a", 3, 1), Placement("w", "b", 5, 1)]
    assert shares(placed, 10) == {"a": 3, "b": 7}
    assert shares(placed, 4) == {"a": 2, "b": 2}
    assert shares(placed, 2) == {"a": 1, "b": 1}
    assert shares(placed, 1) == {"a": 1, "b": 1}       # every placement keeps one


# -- the benchmark's shape on a small real-shaped series ---------------------------------------------
def test_bench_reports_every_policy_and_model(tmp_path: Path) -> None:
    s = sr.as_demand("sine", 300.0, daily(8, 1.5))
    out = autoscalebench.bench([s], train_steps=0, seed=0, plot_dir=tmp_path)
    assert out["series"] == 1 and set(out["startup_s"]) == {"60", "300"}
    row = out["startup_s"]["300"]
    assert set(row) == {"hpa", "keda", "kpa", "static", "forecast_hpa", "learned"} | set(out["variants"])
    shipped = out["schedule_attempt"]["shipped"]["300"]
    assert out["learned_is"]["300"] == ("floor_rule+schedule" if shipped else "floor_rule")
    assert shipped or row["learned"] == row["floor_rule"]
    assert set(out["variants"]) == {"hpa_80", "floor_rule"}
    assert row["hpa_80"]["util_mean"] > row["hpa"]["util_mean"]
    assert out["chosen_on_training"]["learned_ceiling"]["300"] in autoscalebench.CEILINGS + (0.7,)
    assert row["hpa"]["cost_rel_hpa"] == 1.0 and row["static"]["late_pct"] == 0.0
    assert set(out["forecast_mae_vs_naive"]) == set(fc.MODELS)
    assert (tmp_path / "autoscale-sine-300s.png").stat().st_size > 10_000
    b = out["bounds"]["300"]
    assert b["foresight_late_pct"] == 0.0
    assert b["ready_only_cost_rel_hpa"] <= b["foresight_cost_rel_hpa"] <= b["foresight_95_cost_rel_hpa"] < 1.0


def test_foresight_is_never_late_on_a_step_that_makes_hpa_late() -> None:
    demand = np.r_[np.full(200, 5.0), np.full(200, 30.0)]
    seen = simulate(Foresight(demand, 300.0), demand, 300.0, 8)
    assert seen.late.sum() == 0.0 and seen.replicas[-1] == 30
    assert simulate(ctl.Hpa(), demand, 300.0, 8).late.sum() > 0.0


def test_simulated_pods_serve_only_after_their_start_up() -> None:
    demand = np.full(int(600 / TICK_S), 10.0)
    run = simulate(ctl.Static(20), demand, 300.0, 1)
    assert run.late[: int(300 / TICK_S)].min() == 9.0 and run.late[-1] == 0.0


# -- the product path ---------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def wave(days: int = 3) -> tuple[float, ...]:
    """A daily wave at 60 s samples: demand the control plane replays."""
    return tuple(round(10 + 8 * math.sin(2 * math.pi * i / 1440), 3) for i in range(days * 1440))


def wave_csv(path: Path, days: int = 3) -> Path:
    """The wave as a client's CSV file (the client reads it and sends the samples)."""
    path.write_text("\n".join(f"{v:.3f}" for v in wave(days)))
    return path


def test_twin_workload_is_autoscaled_through_the_back_end_journaled_and_exported(tmp_path: Path) -> None:
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Policy, Template, Workload

    clock = Clock()
    plane = ControlPlane(tmp_path / "cp.db", Backends(clock, twin_ready_delay_s=5.0), clock)
    try:
        plane.register_cluster(ClusterSpec("a", "r0"))
        plane.tick(0.0)
        plane.submit(Workload("web", 2, Template(250, 256), Policy(clusters=("a",))), dry_run=False)
        status = plane.autoscaling.enable(AutoscaleSpec("web", "wave.csv", stride_s=60.0, startup_s=5.0, values=wave(),
                                                        peak_replicas=20.0, speed=120.0, max_replicas=40), 0.0)
        assert status.fallback == ""
        seen = set()
        while clock.t < 240:
            clock.t += 1.0
            plane.tick(clock.t)
            seen.add(plane.registry.placements("web")[0].replicas)
        twin = plane.backends("a")
        placed = plane.registry.placements("web")[0].replicas
        assert len(seen) > 3 and twin.get_workload("web").spec.replicas == placed == plane.registry.workload("web").replicas
        decisions = [d for d in plane.registry.decisions(1000) if d.kind == "autoscale"]
        assert decisions and all("replicas:" in d.reasons[0] for d in decisions)
        assert any("forecast peak" in d.reasons[0] or "utilization" in d.reasons[0] for d in decisions)
        got = plane.metrics.registry.get_sample_value("fedplane_autoscale_desired_replicas", {"workload": "web"})
        assert got == plane.autoscaling.status("web").desired
        assert plane.metrics.registry.get_sample_value("fedplane_autoscale_forecast", {"workload": "web"}) > 0
        plane.autoscaling.disable("web", clock.t)
        for _ in range(30):
            clock.t += 1.0
            plane.tick(clock.t)
        assert plane.registry.placements("web")[0].replicas == placed
    finally:
        plane.close()


def test_autoscaler_survives_a_restart_of_the_control_plane(tmp_path: Path) -> None:
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Policy, Template, Workload

    clock = Clock()
    plane = ControlPlane(tmp_path / "cp.db", Backends(clock), clock)
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.tick(0.0)
    plane.submit(Workload("web", 2, Template(250, 256), Policy(clusters=("a",))), dry_run=False)
    plane.autoscaling.enable(AutoscaleSpec("web", "wave.csv", stride_s=60.0, values=wave(1)), 0.0)
    plane.autoscaling.book.put(AutoscaleSpec("old", str(tmp_path / "missing.csv")))  # as a plane that read client paths stored it
    plane.close()
    again = ControlPlane(tmp_path / "cp.db", Backends(clock), clock)
    try:
        assert [s.spec.workload for s in again.autoscaling.statuses()] == ["old", "web"]
        assert again.autoscaling.status("web").fallback == "" and again.autoscaling.status("web").spec.values == wave(1)
        assert "neither a packaged series" in again.autoscaling.status("old").fallback
    finally:
        again.close()


def test_kubernetes_workload_is_scaled_through_the_scale_subresource(tmp_path: Path) -> None:
    from cp_kmock import DEPLOYMENTS, kube_double

    from controlplane.registry import BackendKind, ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Template, Workload
    from fedcore.backends.kubernetes import KubernetesCluster

    clock = Clock()
    with kube_double() as double:
        backends = Backends(clock)
        backends.by_name["k"] = KubernetesCluster("k", double.client())
        plane = ControlPlane(tmp_path / "cp.db", backends, clock)
        try:
            plane.register_cluster(ClusterSpec("k", "r0", BackendKind.KUBERNETES, kube_context="k"))
            w = Workload("api", 2, Template(250, 256))
            plane.registry.put_workload(w)
            plane.registry.set_placement(Placement("api", "k", 2, 1))
            backends("k").create_workload(w.spec(2, 1, scheduler_name=""))
            plane.autoscaling.enable(AutoscaleSpec("api", "wave.csv", stride_s=60.0, startup_s=30.0, values=wave(),
                                                   peak_replicas=12.0), 0.0)
            for t in range(0, 60, 5):
                clock.t = float(t)
                plane.autoscaling.tick(clock.t)
            want = plane.autoscaling.status("api").desired
            assert want != 2
            assert double.get(DEPLOYMENTS, "default", "api")["spec"]["replicas"] == want  # type: ignore[index]
            assert plane.registry.placements("api")[0].replicas == want
        finally:
            plane.close()


def test_grpc_and_cli_enable_status_disable(tmp_path: Path) -> None:
    import json
    import time

    from controlplane import server
    from controlplane.auth import INSECURE
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.verdicts import Timings
    from controlplane.workloads import Template, Workload
    from fedplane.cli import main

    async def scenario() -> None:
        plane = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic, 0.1), time.monotonic, Timings(probe_interval_s=0.05, report_interval_s=0.05, fresh_s=0.5))
        plane.register_cluster(ClusterSpec("a", "r0"))
        plane.tick(time.monotonic())
        plane.submit(Workload("web", 2, Template(250, 256)), dry_run=False)
        running = await server.start(plane, auth=INSECURE)
        target = ["--target", f"127.0.0.1:{running.port}"]
        runner = CliRunner()

        def cli(*args: str) -> tuple[int, str]:
            r = runner.invoke(main, ["autoscale", *args])
            return r.exit_code, r.output

        try:
            code, out = await asyncio.to_thread(cli, "enable", "web", "--series", str(wave_csv(tmp_path / "w.csv")), "--stride-s", "60",
                                                "--speed", "60", "--startup-s", "1", *target, "--json")
            assert code == 0, out
            assert json.loads(out)["autoscalers"][0]["spec"]["policy"] == "forecast_hpa"
            await asyncio.sleep(1.0)
            code, out = await asyncio.to_thread(cli, "status", *target)
            assert code == 0 and "web" in out
            code, out = await asyncio.to_thread(cli, "enable", "nope", *target)
            assert code == 2 and "NOT_FOUND" in out and "unknown workload 'nope'" in out
            code, out = await asyncio.to_thread(cli, "enable", "web", "--min", "5", "--max", "2", *target)
            assert code == 2 and "INVALID_ARGUMENT" in out
            code, out = await asyncio.to_thread(cli, "disable", "web", *target, "--json")
            assert code == 0, out
            code, out = await asyncio.to_thread(cli, "status", "web", *target)
            assert code == 2 and "is not" in out and "autoscaled" in out
        finally:
            await running.stop(0)
            plane.close()

    asyncio.run(scenario())


def test_forecast_target_is_chosen_on_training_parts_only() -> None:
    s = sr.as_demand("sine", 300.0, daily(10, 1.5, seed=3))
    held_out = np.full(len(s.values) - s.split, 50.0)   # a wholly different held-out part
    t = sr.Series("sine", 300.0, np.concatenate([s.values[: s.split], held_out]))
    mine = {(v.name, 300.0): feeds.peak_feed(v, 300.0, autoscalebench.CHOSEN) for v in (s,)}
    other = {(v.name, 300.0): feeds.peak_feed(v, 300.0, autoscalebench.CHOSEN) for v in (t,)}
    assert np.array_equal(mine[("sine", 300.0)][: s.split], other[("sine", 300.0)][: s.split])
    assert autoscalebench.choose_forecast_target([s], mine, 300.0) == autoscalebench.choose_forecast_target([t], other, 300.0)
    assert autoscalebench.choose_ceiling([s], mine, 300.0, 0.85) == autoscalebench.choose_ceiling([t], other, 300.0, 0.85)


def test_demo_section_autoscales_one_workload_through_the_control_plane(tmp_path: Path) -> None:
    from fedplane.lab.demo import autoscaledemo

    section = autoscaledemo.run(None)
    assert section["fallback"] is None and section["series"] in ("dlrm-app_87", "google2019-cpu")
    assert section["scaling_decisions"] >= 3 and section["replicas_max"] > section["replicas_min"] >= 1
    assert all("replicas:" in r for r in section["reasons"])
    assert section["late_pct_after_warm"] < 1.0 and 0 < section["util_mean"] <= 100
    assert autoscaledemo.plot(section, tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
