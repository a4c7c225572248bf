"""The migration executor: make-before-break order, crash at every step and resume from the journal,
retries with backoff against a failing API server, permanent failures, timeouts and cancellation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.journal import Kind, MigrationState
from controlplane.migrations import CrashHook, RetryPolicy, SimulatedCrash, no_crash
from controlplane.registry import BackendKind, ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Policy, Template, Workload
from cp_kmock import DEPLOYMENTS, KubeDouble, kube_double
from fedcore.backends import errors
from fedcore.backends.kubernetes import KubernetesCluster
from fedcore.backends.model import Phase
from fedcore.backends.twin import TwinCluster, make_nodes

RETRY = RetryPolicy(base_s=0.1, max_s=1.0, max_attempts=5, ready_timeout_s=5.0)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make_plane(db: Path, backends: Backends, clock: Clock, crash: CrashHook = no_crash) -> ControlPlane:
    return ControlPlane(db, backends, clock, retry=RETRY, crash=crash)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Backends, Clock]:
    clock = Clock()
    backends = Backends(clock, twin_ready_delay_s=1.0)
    plane = make_plane(tmp_path / "cp.db", backends, clock)
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.register_cluster(ClusterSpec("b", "r1"))
    plane.tick(0.0)
    assert plane.submit(Workload("web", 3, Template(500, 512), Policy(clusters=("a",))), dry_run=False).counts == {"a": 3}
    clock.t = 1.0
    plane.tick(1.0)
    plane.close()
    return tmp_path / "cp.db", backends, clock


def run_until(plane: ControlPlane, clock: Clock, done: object, limit: float = 30.0, step: float = 0.2) -> None:
    while clock.t < limit:
        clock.t = round(clock.t + step, 3)
        plane.tick(clock.t)
        if callable(done) and done():
            return
    raise AssertionError("did not finish in time")


def twin(backends: Backends, name: str) -> TwinCluster:
    t = backends.twins()[name]
    return t


def test_make_before_break_removes_the_source_only_after_the_target_is_ready(world: tuple[Path, Backends, Clock]) -> None:
    db, backends, clock = world
    plane = make_plane(db, backends, clock)
    m = plane.start_migration("web", "a", "b", clock.t, force=True)
    seen: list[tuple[str, int, int]] = []

    def done() -> bool:
        state = plane.journal.get(m.id)
        assert state is not None
        a_ready = sum(p.ready for p in twin(backends, "a").snapshot("web"))
        b_ready = sum(p.ready for p in twin(backends, "b").snapshot("web"))
        seen.append((state.state.value, a_ready, b_ready))
        return state.state is MigrationState.DONE

    run_until(plane, clock, done)
    assert all(a + b >= 3 for _, a, b in seen), f"capacity dipped during the move: {seen}"
    assert [p.cluster for p in plane.registry.placements("web")] == ["b"]
    assert plane.registry.placements("web")[0].epoch == m.epoch == 2
    with pytest.raises(errors.NotFound):
        backends("a").get_workload("web")
    steps = [(e.step, e.phase) for e in plane.journal.entries(m.id)]
    assert steps == [("plan", "done"), ("create-target", "intent"), ("create-target", "done"), ("await-ready", "intent"),
                     ("await-ready", "done"), ("remove-source", "intent"), ("remove-source", "done")]


CRASHES = [("create-target", "before"), ("create-target", "after"), ("await-ready", "before"),
           ("remove-source", "before"), ("remove-source", "after")]


@pytest.mark.parametrize("step, when", CRASHES)
def test_crash_at_any_step_resumes_with_nothing_lost_or_doubled(world: tuple[Path, Backends, Clock], step: str, when: str) -> None:
    db, backends, clock = world
    fired: list[str] = []

    def crash(s: str, w: str) -> None:
        if (s, w) == (step, when) and not fired:
            fired.append(s)
            raise SimulatedCrash(f"{s}/{w}")

    first = make_plane(db, backends, clock, crash)
    m = first.start_migration("web", "a", "b", clock.t, force=True)
    with pytest.raises(SimulatedCrash):
        run_until(first, clock, lambda: False)
    first.close()  # the process is gone; only SQLite and the clusters remain

    second = make_plane(db, backends, clock)
    run_until(second, clock, lambda: second.journal.get(m.id).state is MigrationState.DONE)  # type: ignore[union-attr]
    b_pods = twin(backends, "b").snapshot("web")
    assert len(b_pods) == 3 and all(p.phase is Phase.RUNNING and p.ready for p in b_pods)
    assert twin(backends, "a").snapshot("web") == []
    assert [(p.cluster, p.replicas) for p in second.registry.placements("web")] == [("b", 3)]
    assert len(second.journal.all()) == 1, "the resumed migration must not be planned twice"
    assert all(t.safety.duplicate_binds == 0 for t in backends.twins().values())


@pytest.fixture
def kube(world: tuple[Path, Backends, Clock]) -> Iterator[tuple[ControlPlane, KubeDouble, Clock]]:
    db, backends, clock = world
    with kube_double() as double:
        backends.by_name["k"] = KubernetesCluster("k", double.client())
        plane = make_plane(db, backends, clock)
        plane.registry.add_cluster(ClusterSpec("k", "r1", BackendKind.KUBERNETES, kube_context="test"))
        yield plane, double, clock
        plane.close()


def mark_ready(double: KubeDouble, name: str) -> None:
    """kmock has no controllers: report the Deployment's replicas ready, as a controller would."""
    obj = double.get(DEPLOYMENTS, "default", name)
    assert obj is not None
    obj["status"] = {"readyReplicas": obj["spec"]["replicas"]}
    double.put(DEPLOYMENTS, "default", name, obj)


def test_api_server_failing_mid_migration_is_retried_with_backoff(kube: tuple[ControlPlane, KubeDouble, Clock]) -> None:
    plane, double, clock = kube
    double.fail(3, 503, method="POST")  # creates fail; probes (GET) still answer
    m = plane.start_migration("web", "a", "k", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m.id).state is MigrationState.TARGET_CREATED, step=0.05)  # type: ignore[union-attr]
    retries = [e for e in plane.journal.entries(m.id) if e.step == "retry"]
    assert len(retries) == 3 and "503" in retries[0].detail
    gaps = [b.at - a.at for a, b in zip(retries, retries[1:])]
    assert gaps[1] > gaps[0], f"backoff must grow: {gaps}"
    mark_ready(double, "web")
    run_until(plane, clock, lambda: plane.journal.get(m.id).state is MigrationState.DONE)  # type: ignore[union-attr]
    assert backends_workloads(plane, "k") == {"web": 3}
    assert plane.backends("k").get_workload("web").spec.epoch == m.epoch


def backends_workloads(plane: ControlPlane, cluster: str) -> dict[str, int]:
    return {w.spec.name: w.spec.replicas for w in plane.backends(cluster).list_workloads()}


def test_permanent_error_fails_clearly_and_leaves_the_workload_where_it_was(kube: tuple[ControlPlane, KubeDouble, Clock]) -> None:
    plane, double, clock = kube
    double.fail(1, 422, method="POST")
    m = plane.start_migration("web", "a", "k", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m.id).state.terminal)  # type: ignore[union-attr]
    failed = plane.journal.get(m.id)
    assert failed is not None and failed.state is MigrationState.FAILED
    assert "permanent error" in failed.error and "422" in failed.error and "left on a" in failed.error
    assert plane.backends("a").get_workload("web").ready_replicas == 3
    assert [p.cluster for p in plane.registry.placements("web")] == ["a"]


def test_giving_up_after_repeated_5xx_reports_it(kube: tuple[ControlPlane, KubeDouble, Clock]) -> None:
    plane, double, clock = kube
    double.fail(10_000, 500, method="POST")
    m = plane.start_migration("web", "a", "k", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m.id).state.terminal)  # type: ignore[union-attr]
    failed = plane.journal.get(m.id)
    assert failed is not None and failed.state is MigrationState.FAILED
    assert f"gave up after {RETRY.max_attempts} attempts" in failed.error
    assert plane.backends("a").get_workload("web").ready_replicas == 3
    double.fail(0)


def test_target_never_ready_times_out_and_rolls_back(world: tuple[Path, Backends, Clock]) -> None:
    db, backends, clock = world
    backends.by_name["tiny"] = TwinCluster("tiny", make_nodes("tiny", "r1", 1, 100, 128), clock, 1.0)
    plane = make_plane(db, backends, clock)
    plane.registry.add_cluster(ClusterSpec("tiny", "r1"))
    m = plane.start_migration("web", "a", "tiny", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m.id).state.terminal)  # type: ignore[union-attr]
    failed = plane.journal.get(m.id)
    assert failed is not None and failed.state is MigrationState.FAILED and "0/3 ready" in failed.error
    assert backends_workloads(plane, "tiny") == {}
    assert plane.backends("a").get_workload("web").ready_replicas == 3


def test_cancel_rolls_back_until_the_target_serves(world: tuple[Path, Backends, Clock]) -> None:
    db, backends, clock = world
    plane = make_plane(db, backends, clock)
    m = plane.start_migration("web", "a", "b", clock.t, force=True)
    clock.t += 0.1
    plane.tick(clock.t)
    assert plane.journal.get(m.id).state is MigrationState.TARGET_CREATED  # type: ignore[union-attr]
    cancelled = plane.cancel_migration(m.id, clock.t)
    assert cancelled.state is MigrationState.CANCELLED and backends_workloads(plane, "b") == {}
    m2 = plane.start_migration("web", "a", "b", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m2.id).state is MigrationState.DONE)  # type: ignore[union-attr]
    assert plane.cancel_migration(m2.id, clock.t).state is MigrationState.DONE  # terminal: nothing to do
    with pytest.raises(KeyError):
        plane.cancel_migration("nope", clock.t)


def test_manual_migration_input_errors_are_clear(world: tuple[Path, Backends, Clock]) -> None:
    db, backends, clock = world
    plane = make_plane(db, backends, clock)
    with pytest.raises(KeyError, match="unknown workload"):
        plane.start_migration("nope", "a", "b", 0.0)
    with pytest.raises(ValueError, match="no replicas on 'b'"):
        plane.start_migration("web", "b", "a", 0.0)
    with pytest.raises(errors.UnknownCluster):
        plane.start_migration("web", "a", "mars", 0.0)
    with pytest.raises(ValueError, match="ClusterPolicy"):  # a fresh process probed its clusters when it took over
        plane.start_migration("web", "a", "", clock.t)  # the workload's policy allows only a
    with pytest.raises(ValueError, match=r"b breaks web's placement policy \(only clusters a are allowed\); pass --force"):
        plane.start_migration("web", "a", "b", clock.t)
    forced = plane.start_migration("web", "a", "b", clock.t, force=True)  # an operator may override it, on the record
    assert forced.kind is Kind.MANUAL and "forced past the placement policy: only clusters a are allowed" in forced.reasons
    assert plane.registry.decisions(1)[0].reasons == forced.reasons


def test_failed_over_replicas_return_home_after_a_healthy_hold(tmp_path: Path) -> None:
    from controlplane.planner import PlannerConfig

    clock = Clock()
    backends = Backends(clock, twin_ready_delay_s=0.5)
    plane = ControlPlane(tmp_path / "cp.db", backends, clock, retry=RETRY, planner=PlannerConfig(return_after_s=3.0))
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.register_cluster(ClusterSpec("b", "r1"))
    plane.tick(0.0)
    home = next(iter(plane.submit(Workload("web", 2, Template(500, 512), Policy(clusters=("a", "b"))), dry_run=False).counts))
    away = "b" if home == "a" else "a"
    twin(backends, home).outage()
    failed_over = sorted([(away, "placed"), (home, "stale")])
    run_until(plane, clock, lambda: sorted((p.cluster, p.state.value) for p in plane.registry.placements("web")) == failed_over)
    assert [(h.home, h.away, h.replicas) for h in plane.registry.homes()] == [(home, away, 2)]
    twin(backends, home).heal()
    healed = clock.t
    run_until(plane, clock, lambda: any(m.kind is Kind.RETURN and m.state is MigrationState.DONE for m in plane.journal.all()))
    back = next(m for m in plane.journal.all() if m.kind is Kind.RETURN)
    assert back.created - healed >= 3.0 and (back.source, back.target) == (away, home)
    assert [(p.cluster, p.replicas) for p in plane.registry.placements("web")] == [(home, 2)]
    assert plane.registry.homes() == []
    assert sum(p.ready for p in twin(backends, home).snapshot("web")) == 2 and twin(backends, away).snapshot("web") == []
    plane.close()


def test_a_migration_whose_source_goes_dark_keeps_what_it_made_and_nothing_runs_twice(world: tuple[Path, Backends, Clock]) -> None:
    """make-before-break meets an outage: the target serves, the dark source is left stale, no failover doubles it."""
    db, backends, clock = world
    plane = make_plane(db, backends, clock)
    m = plane.start_migration("web", "a", "b", clock.t, force=True)
    run_until(plane, clock, lambda: plane.journal.get(m.id).state is MigrationState.TARGET_CREATED)  # type: ignore[union-attr]
    twin(backends, "a").outage()  # while b's new pods are starting
    run_until(plane, clock, lambda: plane.journal.active() == [] and plane.verdicts["a"][0].health.failed)
    clock_end = clock.t + 5.0
    run_until(plane, clock, lambda: clock.t >= clock_end)
    assert plane.journal.get(m.id).state is MigrationState.DONE  # type: ignore[union-attr]
    assert [(p.cluster, p.replicas, p.state.value) for p in plane.registry.placements("web")] == [("a", 0, "stale"), ("b", 3, "placed")]
    assert [m.kind for m in plane.journal.all()] == [Kind.MANUAL], "nothing left to fail over"
    assert sum(p.ready for p in twin(backends, "b").snapshot("web")) == 3
    twin(backends, "a").heal()
    run_until(plane, clock, lambda: [p.cluster for p in plane.registry.placements("web")] == ["b"])
    assert twin(backends, "a").snapshot("web") == [] and len(twin(backends, "b").snapshot("web")) == 3
    plane.close()
