"""The plane at scale: incremental evidence (same evidence and verdicts as the full scan it replaced), pod types kept
until their inputs move, the report pace, the fast wire parse, and a small run of ``bench scale``."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from google.protobuf import json_format

from controlplane.evidence import (
    AgentReport,
    ClusterEvidence,
    EvidenceBook,
    NodeSummary,
    PeerState,
)
from controlplane.forecast import LoadForecast
from controlplane.pacing import MAX_SLOWDOWN, MIN_FRESH_INTERVALS, REPORT_BUDGET_PER_S, WINDOW_S, Backpressure, Pacing
from controlplane.podtypesbook import PodTypesBook
from controlplane.registry import Placement, PlacementState
from controlplane.verdicts import Timings, judge
from controlplane.contextbook import cluster_fleets, cluster_profiles, largest
from controlplane.workloads import Policy, Template, Workload
from fedapi import controlplane_pb2 as cp
from fedapi import wireparsing
from fedcore.backends.model import NodeState
from fedcore.resources import Resources

T = Timings()
CLUSTERS = ("a", "b", "c")
NODES = {c: [f"{c}-n{i}" for i in range(4)] for c in CLUSTERS}


@dataclass
class FullScan:
    """The evidence book as it was before it went incremental: every report's peers scanned for every cluster."""

    fresh_s: float
    reports: dict[tuple[str, str], tuple[float, AgentReport]] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    probes: dict[str, list[float | int | str | list[NodeState]]] = field(default_factory=dict)

    def add_report(self, report: AgentReport, now: float) -> bool:
        if report.sequence <= self.sequences.get(report.agent_id, -1):
            return False
        self.sequences[report.agent_id] = report.sequence
        self.reports[(report.cluster, report.node)] = (now, report)
        return True

    def add_probe(self, cluster: str, now: float, nodes: list[NodeState] | None, error: str = "") -> None:
        p = self.probes.setdefault(cluster, [-1.0, 0, -1.0, [], ""])
        if nodes is not None:
            p[:] = [now, 0, -1.0, nodes, ""]
        else:
            if p[1] == 0:
                p[2] = now
            p[1] = int(p[1]) + 1  # type: ignore[call-overload]
            p[4] = error

    def about(self, cluster: str, now: float) -> ClusterEvidence:
        last_ok, failures, first_failure, nodes, error = self.probes.get(cluster, [-1.0, 0, -1.0, [], ""])
        assert isinstance(failures, int) and isinstance(first_failure, float) and isinstance(last_ok, float)
        assert isinstance(nodes, list) and isinstance(error, str)
        fresh = [(at, r) for (at, r) in self.reports.values() if now - at <= self.fresh_s]
        mine = [at for (c, _), (at, _r) in self.reports.items() if c == cluster]
        ia = idn = oa = od = 0
        failing_since = first_failure if failures else float("-inf")
        for at, r in fresh:
            alive = sum(1 for c, _n, s in r.peers if c == cluster and s is PeerState.ALIVE)
            down = sum(1 for c, _n, s in r.peers if c == cluster and s is not PeerState.ALIVE)
            if r.cluster != cluster:
                oa, od = oa + alive, od + down
            elif at > failing_since:
                ia, idn = ia + alive, idn + down
        seen = any(c != cluster and any(pc == cluster for pc, _n, _s in r.peers) for (c, _n), (_at, r) in self.reports.items())
        return ClusterEvidence(
            cluster, now, failures, now - first_failure if failures else 0.0, last_ok >= 0, error, len(mine),
            sum(1 for _at, r in fresh if r.cluster == cluster), now - max(mine) if mine else float("inf"), ia, idn, oa, od,
            seen and not (oa or od), tuple(nodes), tuple(r.summary for _at, r in fresh if r.cluster == cluster))


def _report(rng: random.Random, cluster: str, node: str, sequence: int, agent: str) -> AgentReport:
    peers = [(cluster, n, rng.choice(list(PeerState))) for n in NODES[cluster] if n != node and rng.random() < 0.9]
    peers += [(c, n, rng.choice([PeerState.ALIVE, PeerState.ALIVE, PeerState.SUSPECT, PeerState.DEAD]))
              for c in CLUSTERS if c != cluster for n in NODES[c] if rng.random() < 0.3]
    used = rng.randrange(0, 4000)
    return AgentReport(cluster, node, agent, sequence, NodeSummary(node, Resources(8000, 32768), Resources(used, used)), tuple(peers))


@pytest.mark.parametrize("seed", range(12))
def test_incremental_evidence_equals_the_full_scan(seed: int) -> None:
    """A table of reports (replaced, replayed, restarted agents, out-of-order times), probes failing and answering, and
    a fresh window that moves: every cluster's evidence and verdict, read at many moments, equal the full scan's."""
    rng = random.Random(seed)
    book, scan = EvidenceBook(T.fresh_s), FullScan(T.fresh_s)
    sequences: dict[str, int] = {}
    incarnations: dict[str, int] = {}
    now = 0.0
    for step in range(400):
        now += rng.choice([0.0, 0.05, 0.2, 0.7]) if rng.random() > 0.03 else -rng.uniform(0, 2)  # an injected clock may go back
        roll = rng.random()
        if roll < 0.6:
            cluster = rng.choice(CLUSTERS)
            node = rng.choice(NODES[cluster])
            if rng.random() < 0.05:  # a restart: a new id starting over (the old id never reports again)
                incarnations[node] = incarnations.get(node, 0) + 1
            agent = f"{node}-{incarnations.get(node, 0)}"
            sequences[agent] = sequences.get(agent, 0) + rng.choice([1, 1, 1, 0, -1])  # and some replays
            r = _report(rng, cluster, node, sequences[agent], agent)
            assert book.add_report(r, now) == scan.add_report(r, now)
        elif roll < 0.8:
            cluster = rng.choice(CLUSTERS)
            nodes = [NodeState(n, Resources(8000, 32768)) for n in NODES[cluster]] if rng.random() < 0.5 else None
            book.add_probe(cluster, now, nodes, "" if nodes else "refused")
            scan.add_probe(cluster, now, nodes, "" if nodes else "refused")
        elif roll < 0.82:
            book.fresh_s = scan.fresh_s = rng.choice([0.5, 1.0, 3.0])
        for cluster in CLUSTERS:
            at = now + rng.choice([0.0, 0.0, 0.3, 1.2])
            got, want = book.about(cluster, at), scan.about(cluster, at)
            assert got == want, f"step {step}, {cluster} at {at}"
            assert judge(got, T) == judge(want, T)


def test_a_restarted_agent_leaves_no_sequence_behind_and_no_peer_list_is_kept() -> None:
    """Memory per agent is bounded: one sequence per node's current agent id, its peers kept as counts."""
    book = EvidenceBook(1.0)
    rng = random.Random(1)
    for incarnation in range(50):
        assert book.add_report(_report(rng, "a", "a-n0", 1, f"a-n0-{incarnation}"), float(incarnation))
    assert list(book.sequences) == ["a-n0-49"]
    (row,) = book.agents("a", 50.0)
    assert row.report.peers == () and sum(row.tally.values()) > 0


def test_pod_types_are_recomputed_only_when_placements_or_the_fleet_move() -> None:
    workloads = {f"w{k}": Workload(f"w{k}", 10, Template(1000 * (k + 1), 1024, gpus=k % 2), Policy()) for k in range(3)}
    placements = [Placement("w0", "a", 10, 1), Placement("w1", "a", 4, 1), Placement("w2", "b", 10, 1),
                  Placement("w1", "b", 6, 1, PlacementState.STALE)]
    book = EvidenceBook(1.0)
    for c in ("a", "b"):
        for i, n in enumerate(NODES[c]):
            book.add_report(AgentReport(c, n, n, 1, NodeSummary(n, Resources(32000, 131072, 0, 4000 * (i + 1)), Resources()), ()), 0.0)
    kept = PodTypesBook()
    reports = [r for c in ("a", "b") for r in book.latest(c)]

    def expected() -> str:
        fleets = cluster_fleets(reports)
        return repr({c: (types, largest(fleets[c])) for c, types in cluster_profiles(workloads, placements, reports).items()})

    def update() -> str:  # PodTypes holds arrays: compared by their full repr
        return repr(kept.update(workloads, placements, book))

    assert update() == expected() and kept.recomputed == 2
    assert update() == expected() and kept.recomputed == 2, "nothing moved"
    placements[0] = Placement("w0", "a", 12, 1)
    assert update() == expected() and kept.recomputed == 3, "only a's placements moved"
    grown = AgentReport("b", "b-n0", "b-n0", 2, NodeSummary("b-n0", Resources(64000, 131072, 0, 8000), Resources()), ())
    book.add_report(grown, 1.0)
    reports = [r for c in ("a", "b") for r in book.latest(c)]
    assert update() == expected() and kept.recomputed == 4, "only b's fleet moved"


def test_the_pace_holds_ingest_within_its_budget_and_freshness_follows() -> None:
    pace = Pacing(T.report_interval_s, T.fresh_s)
    assert pace.interval_s(16) == T.report_interval_s and pace.fresh_for(16) == T.fresh_s, "a small fleet: the timings"
    for agents in (1_000, 10_000, 100_000):
        interval = pace.interval_s(agents)
        assert agents / interval <= REPORT_BUDGET_PER_S + 1e-9
        assert pace.fresh_for(agents) >= 3 * interval
    assert pace.interval_s(10_000) == 10_000 / REPORT_BUDGET_PER_S
    assert len({pace.interval_s(n) for n in range(10_001)}) <= 12, "a fleet joining one by one moves the pace a few times"


def test_a_late_event_loop_slows_a_large_fleet_s_pace_by_halves_and_an_on_time_one_brings_it_back() -> None:
    pace, pressure = Pacing(T.report_interval_s, T.fresh_s), Backpressure()
    now, paces = 0.0, []

    def window(lag_s: float) -> None:
        nonlocal now
        interval = pace.interval_s(10_000, pressure.slowdown)
        until = now + max(WINDOW_S, interval)
        while now <= until:
            pressure.lag(lag_s, now, interval)
            now += 0.25
        paces.append(pace.interval_s(10_000, pressure.slowdown))

    for _ in range(4):
        window(0.2)  # a starved loop
    assert paces == [20.0, 40.0, 40.0, 40.0] and pressure.slowdown == MAX_SLOWDOWN
    window(0.03)  # between the marks: held
    assert paces[-1] == 40.0
    before = pace.interval_s(10_000, pressure.slowdown)
    window(0.0)
    assert paces[-1] == 20.0 and pace.fresh_for(10_000, pressure.slowdown) >= MIN_FRESH_INTERVALS * 20.0 > before, \
        "a quickened pace still keeps an agent on the old one fresh"
    window(0.0)
    window(0.0)
    assert paces[-2:] == [10.0, 10.0] and pressure.slowdown == 1.0
    assert pace.interval_s(16, MAX_SLOWDOWN) == T.report_interval_s, "a small fleet's pace is the timings' whatever the lag"


def test_the_running_trend_is_the_least_squares_slope_over_the_window() -> None:
    """Running sums (re-based as time goes on) give the slope a full pass over the window gives."""
    def slope(samples: list[tuple[float, float]]) -> float:
        n = len(samples)
        mt, ml = sum(t for t, _ in samples) / n, sum(v for _, v in samples) / n
        var = sum((t - mt) ** 2 for t, _ in samples)
        return sum((t - mt) * (v - ml) for t, v in samples) / var if var else 0.0

    rng, forecast, t = random.Random(3), LoadForecast(), 10_000.0
    for _ in range(5_000):
        t += rng.uniform(0.05, 0.5)
        forecast.add(t, rng.random() * 0.5 + t * 1e-4)
        if forecast.samples[-1][0] - forecast.samples[0][0] >= forecast.min_span_s:
            assert forecast.trend() == pytest.approx(slope(list(forecast.samples)), abs=1e-12)


@pytest.mark.parametrize("message", [
    {"cluster": "a", "node": "a-n0", "sequence": 3, "peers": [{"node": "a-n1", "cluster": "a", "state": 1, "incarnation": 0}],
     "summary": {"node": "a-n0", "load": 0.5, "capacity": {"cpu_milli": 8000}}, "healthy": True},
    {"sequence": True}, {"sequence": 1.0}, {"sequence": "5"}, {"sequence": 2**70}, {"healthy": 1}, {"cluster": b"x"},
    {"cluster": None}, {"summary": None}, {"peers": None}, {"peers": [{"state": "PEER_ALIVE"}]}, {"peers": [{"state": 99}]},
    {"summary": {"load": 1}}, {"bogus": 1}, {"summary": {"bogus": 1}}, {"peers": [1]}, {"peers": {"node": "x"}},
    {"context": {"profile": {"shapes": [{"cpu_milli": 1}]}}}, {"sequence": -1},
])
def test_the_fast_parse_answers_as_parsedict(message: dict[str, object]) -> None:
    def outcome(parse: object) -> tuple[str, str]:
        try:
            return "ok", str(parse())  # type: ignore[operator]
        except Exception as exc:  # the error's type and words are part of the answer
            return type(exc).__name__, str(exc)

    assert outcome(lambda: wireparsing.parse(message, cp.AgentReport)) == outcome(lambda: json_format.ParseDict(message, cp.AgentReport()))


@pytest.mark.integration
def test_bench_scale_small_run() -> None:
    """200 agents in 4 clusters, 2,000 pods, a region outage: real plane process, real link, figures in the JSON (about
    30 s on an idle 2-core host; the timeout allows for a shared one)."""
    done = subprocess.run([sys.executable, "-m", "fedplane", "bench", "scale", "--agents", "200", "--clusters", "4", "--pods", "2000",
                           "--phase", "2", "--steady", "3", "--deadline", "40", "--json"], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["protocol"] == "real" and figures["agents"] == 200 and figures["pods"] == 2000
    assert figures["outage_agents"] == 100 and figures["detected"] == "2/2" and figures["recovered"] == "2/2"
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert figures["tick_ms_p99"] is not None and figures["per_agent_bytes"] > 0 and figures["per_report_us"] > 0


def test_held_scans_answer_as_the_file_does_after_writes_rollbacks_and_callers_changes() -> None:
    """The SQLite store holds the tick's whole-prefix scans decoded (controlplane.sqlitestore.HELD): a write or delete
    under the prefix, a rolled-back transaction and a caller changing the list it got back all leave the next scan equal
    to what the file holds."""
    from controlplane.sqlitestore import SqliteStore

    store = SqliteStore(":memory:")
    try:
        def scan() -> list[tuple[str, dict[str, object]]]:
            with store.tx() as t:
                return t.scan("workloads/")

        def on_file() -> list[tuple[str, dict[str, object]]]:
            rows = store.conn.execute("SELECT key, doc FROM kv WHERE key >= 'workloads/' AND key < 'workloads0' ORDER BY key")
            return [(k, json.loads(d)) for k, d in rows]

        with store.tx() as t:
            t.put("workloads/a", {"epoch": 1})
            t.put("placements/a/c0", {"replicas": 1})
        assert scan() == on_file() == [("workloads/a", {"epoch": 1})]
        scan().clear()  # a caller's list
        assert scan() == on_file()
        with store.tx() as t:
            t.put("workloads/b", {"epoch": 2})
        assert scan() == on_file() and len(on_file()) == 2
        with pytest.raises(RuntimeError), store.tx() as t:
            t.delete("workloads/a")
            assert [k for k, _ in t.scan("workloads/")] == ["workloads/b"]  # the transaction sees its own delete
            raise RuntimeError("rolled back")
        assert scan() == on_file() and len(on_file()) == 2
        with store.tx() as t:
            t.put("workloadsX", {"epoch": 3})  # not under the prefix
            t.delete("workloads/b")
        assert scan() == on_file() == [("workloads/a", {"epoch": 1})]
        with store.tx() as t:
            assert t.scan("workloads/", limit=1, reverse=True) == [("workloads/a", {"epoch": 1})]
        rng = random.Random(7)
        for step in range(300):  # writes in place, in and out of order, some rolled back
            try:
                with store.tx() as t:
                    for _ in range(rng.randrange(1, 4)):
                        key = f"workloads/{rng.choice(['a', 'b', 'B', 'é', 'a/x', 'a0', 'z'])}"
                        if rng.random() < 0.3:
                            t.delete(key)
                        else:
                            t.put(key, {"epoch": step, "spec": {"tags": (step, "t")}})
                        assert t.scan("workloads/") == on_file(), step
                    if rng.random() < 0.2:
                        raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            assert scan() == on_file(), step
    finally:
        store.close()


def test_a_transaction_reading_only_held_scans_runs_no_statement_and_a_write_commits_whole() -> None:
    """SQLite's transaction begins at a transaction's first statement: a tick's reads of held scans run none (each lets go
    of the GIL); a write begins it, nested calls join it, and a failure rolls back all of it."""
    from controlplane.sqlitestore import SqliteStore

    store = SqliteStore(":memory:")
    ran: list[str] = []
    try:
        with store.tx() as t:
            t.put("placements/a/c0", {"replicas": 1})
        store.conn.set_trace_callback(ran.append)
        for _ in range(3):
            with store.tx() as t:
                assert t.scan("placements/") == [("placements/a/c0", {"replicas": 1})]
        assert len(ran) == 3 and ran[0] == "BEGIN IMMEDIATE" and ran[1].startswith("SELECT") and ran[2] == "COMMIT", \
            "the first scan reads the file, the next ones nothing"
        ran.clear()
        with store.tx() as t:
            t.put("placements/a/c1", {"replicas": 2})
            with store.tx() as inner:
                inner.put("placements/b/c0", {"replicas": 3})
        assert ran[0] == "BEGIN IMMEDIATE" and ran[-1] == "COMMIT" and ran.count("BEGIN IMMEDIATE") == 1
        with pytest.raises(RuntimeError), store.tx() as t:
            t.delete("placements/a/c0")
            with store.tx() as inner:
                inner.put("placements/c/c0", {"replicas": 4})
                raise RuntimeError("rolled back")
        for _ in range(2):  # the rollback dropped what was held: read from the file again, then held
            with store.tx() as t:
                assert [k for k, _ in t.scan("placements/")] == ["placements/a/c0", "placements/a/c1", "placements/b/c0"]
        with store.tx() as t:
            t.scan("placements/")
            assert not store.conn.in_transaction
    finally:
        store.close()


def test_a_bind_runs_on_the_event_loop_while_its_twin_is_free_and_never_waits_there_for_its_lock() -> None:
    """The twin link's bind (controlplane.service._uncontended): on the loop's own thread when nobody holds the twin's
    lock (no hop to a worker thread for a short call); when the tick holds it, in a worker thread, and the loop serves
    others meanwhile."""
    import asyncio
    import threading
    import time

    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.service import TwinClusterService
    from fedapi import twincluster_pb2 as tw
    from fedcore.backends.twin import Binder

    plane = ControlPlane(":memory:", Backends(time.monotonic, 0.0, Binder.EXTERNAL), time.monotonic)
    try:
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2))
        plane.tick(time.monotonic())
        assert plane.submit(Workload("w", 2, Template(100, 128)), False, "w").ok
        twin = plane.backends("c0")
        pending = [p for p in twin.list_pods() if not p.node]
        ran_on: list[int] = []
        bind = twin.bind_pod
        twin.bind_pod = lambda *a: ran_on.append(threading.get_ident()) or bind(*a)  # type: ignore[method-assign]
        service = TwinClusterService(plane)

        class Context:
            async def abort(self, code: object, details: str = "") -> None:
                raise AssertionError(details)

        async def main() -> tuple[int, float, int]:
            loop_thread = threading.get_ident()
            first = await service.BindPod(tw.BindPodRequest(cluster="c0", pod=pending[0].name, node="c0-n0", epoch=pending[0].epoch), Context())
            assert first.outcome == tw.BIND_BOUND and ran_on == [loop_thread]
            held, release = threading.Event(), threading.Event()

            def tick_holding_the_twin() -> None:
                with twin.lock:
                    held.set()
                    release.wait(5)

            holder = threading.Thread(target=tick_holding_the_twin)
            holder.start()
            held.wait(5)
            bound = asyncio.create_task(service.BindPod(
                tw.BindPodRequest(cluster="c0", pod=pending[1].name, node="c0-n1", epoch=pending[1].epoch), Context()))
            turns, start = 0, time.monotonic()
            while time.monotonic() - start < 0.3:  # the loop is not blocked on the held lock
                await asyncio.sleep(0.01)
                turns += 1
            assert not bound.done()
            release.set()
            second = await bound
            holder.join()
            return turns, second.outcome, ran_on[1]

        turns, outcome, thread = asyncio.run(main())
        assert turns >= 10 and outcome == tw.BIND_BOUND and thread != ran_on[0]
    finally:
        plane.close()


def test_the_expected_agent_count_follows_a_new_listing_and_a_new_node_though_kept_between_them() -> None:
    from controlplane.expecting import ExpectedAgents
    from controlplane.sqlitestore import SqliteStore

    store = SqliteStore(":memory:")
    try:
        expected = ExpectedAgents(store)
        listing = tuple(NodeState(n, Resources(8000, 32768)) for n in NODES["a"])
        expected.learn([("a", "a-n0"), ("a", "a-n1")])
        assert expected.count("a", listing) == expected.count("a", listing) == 2
        expected.learn([("a", "a-n0"), ("a", "a-n1"), ("a", "a-n2")])
        assert expected.count("a", listing) == 3, "a node whose agent reported since"
        assert expected.count("a", listing[:2]) == 2, "a listing without one of them"
        assert expected.count("a", ()) == 3, "none listed: every recorded one"
    finally:
        store.close()
