"""Each cluster's scorer family: selected off the tick once per adopted workload context (at most one selection in
flight, at most one start per interval per cluster), adopted under a new context version, a failure keeping the
previous family; the worker process is killed on a timeout; and on the path a user runs, every agent of the cluster
switches to the chosen family and places with it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controlplane import selectworker
from controlplane.selecting import Job, Outcome, Selector, selection_key
from controlplane.contextbook import ContextBook
from fedapi import controlplane_pb2 as cp
from fedapi.workloadcontext import SCORERS, Profile, WorkloadContext
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.scheduling.fragmentation import PodTypes

from cp_agentfleet import served_with_agents

A = WorkloadContext(1.0, 5, Profile(((8000, 1000, 1, 1.0),)), max_cpu_milli=32000, max_gpus=4)
B = WorkloadContext(0.5, 9, Profile(((4000, 1000, 1, 1.0),)), max_cpu_milli=32000, max_gpus=4)


def test_a_selection_starts_once_per_adopted_workload_one_at_a_time_and_at_most_once_per_interval() -> None:
    sel = Selector(every_s=300.0)
    assert sel.due({"c0": WorkloadContext(0.3, 4)}, 0.0) is None, "no profile: nothing to select for"
    assert sel.due({"c0": A, "c1": B}, 0.0) == ("c0", selection_key(A)), "ties go by name"
    sel.start("c0", selection_key(A), 0.0)  # type: ignore[arg-type]
    assert sel.due({"c0": A, "c1": B}, 1.0) is None, "one selection in flight across the plane"
    sel.finish(Outcome("c0", selection_key(A), "fgd"))  # type: ignore[arg-type]
    assert sel.due({"c0": A, "c1": B}, 2.0) == ("c1", selection_key(B))
    sel.start("c1", selection_key(B), 2.0)  # type: ignore[arg-type]
    sel.finish(Outcome("c1", selection_key(B), error="boom"))  # type: ignore[arg-type]
    assert sel.due({"c0": A, "c1": B}, 3.0) is None, "each adopted workload is selected for once, failed or not"
    chosen = WorkloadContext(1.0, 7, A.profile, "fgd", 32000, 4)
    assert sel.due({"c0": chosen}, 400.0) is None, "adopting the family is a new version, not a new workload"
    assert sel.due({"c0": B}, 299.0) is None, "the workload moved, but the last start is under the interval ago"
    assert sel.due({"c0": B}, 300.0) == ("c0", selection_key(B))
    assert Selector(300.0, enabled=False).due({"c0": A}, 0.0) is None, "--no-scorer-selection"
    assert not Outcome("c0", (), "kube-default").ok, "a family agents would refuse is a failure"


def test_the_book_adopts_a_chosen_family_under_a_new_version_and_keeps_it_until_the_workload_goes() -> None:
    book = ContextBook()
    pods = [Pod(f"p{i}", 8000, 4096, gpu=GpuRequest(1, 1000)) for i in range(4)]
    fleet = [Node("n0", 32000, 131072, gpus=4)]
    first = book.update("c0", PodTypes.from_pods(pods, fleet=fleet), 10.0, (32000, 4))
    assert first.scorer == "learned" and (first.max_cpu_milli, first.max_gpus) == (32000, 4)
    chosen = book.choose("c0", "fgd", 11.0)
    assert chosen.scorer == "fgd" and chosen.version > first.version and chosen.profile == first.profile
    assert book.choose("c0", "fgd", 12.0) is chosen, "the same family: no new version"
    moved = book.update("c0", PodTypes.from_pods(pods, fleet=fleet), 13.0, (96000, 8))
    assert moved.version > chosen.version and moved.scorer == "fgd", "a bigger node joined: the family stays"
    gone = book.update("c0", None, 14.0, (96000, 8))
    assert gone.profile is None and gone.scorer == "learned", "no GPU workload: nothing was chosen for it"
    assert book.choose("c0", "bestfit", 15.0) is gone, "nor is a late result adopted for it"


def test_the_plane_selects_for_an_adopted_context_adopts_the_family_and_keeps_it_when_a_selection_fails(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The plane's side on an injected clock: the job is the cluster's placed replicas on its agents' nodes (nothing
    before a context is adopted); a chosen family goes out under a new version; a failure keeps it, logged once and
    recorded as a decision."""
    import logging

    from controlplane.evidence import AgentReport, NodeSummary
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Template, Workload
    from fedcore.resources import Resources

    now = [100.0]
    plane = ControlPlane(tmp_path / "cp.db", Backends(lambda: now[0]), lambda: now[0])
    try:
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2, twin_cpu_milli=32000, twin_gpus=4))
        for i, node in enumerate(("c0-n1", "c0-n0")):
            plane.report(AgentReport("c0", node, f"a{i}", 1, NodeSummary(node, Resources(32000, 131072, 0, 4000), Resources()), ()))
        plane.tick(now[0])
        assert plane.submit(Workload("train", 2, Template(8000, 4096, 1)), dry_run=False).ok
        assert plane.next_selection(now[0]) is None, "no context adopted yet"
        now[0] += plane.timings.fresh_s
        plane.tick(now[0])
        job = plane.next_selection(now[0])
        assert job is not None and [p.uid for p in job.workload] == ["train-0", "train-1"]
        assert [n.name for n in job.fleet] == ["c0-n0", "c0-n1"] and plane.next_selection(now[0]) is None, "one in flight"
        before = plane.contexts.get("c0")
        chosen = plane.adopt_selection(Outcome("c0", job.key, "bestfit", {"learned": 0.8, "bestfit": 0.9}, 1.0, 1.0), now[0] + 1)
        assert chosen.scorer == "bestfit" and chosen.version > before.version and chosen.profile == before.profile
        assert (chosen.max_cpu_milli, chosen.max_gpus) == (32000, 4), "BestFit's normaliser: the fleet's largest node"
        assert plane.next_selection(now[0] + 1000) is None, "the same workload: not selected again"
        with caplog.at_level(logging.WARNING, logger="controlplane"):
            kept = plane.adopt_selection(Outcome("c0", job.key, error="timed out after 600 s"), now[0] + 2)
        assert kept is chosen and plane.contexts.get("c0") is chosen
        (line,) = [r.getMessage() for r in caplog.records]
        assert "scorer selection failed" in line and "timed out after 600 s" in line and "keeping bestfit" in line
        kinds = [d.kind for d in plane.registry.decisions()]
        assert "scorer:bestfit" in kinds and "scorer-failed" in kinds
    finally:
        plane.close()


def test_the_worker_is_killed_on_a_timeout_and_a_failed_one_keeps_the_previous_choice() -> None:
    job = Job("c0", (), (Pod("p", 1000, 1024),), (Node("n0", 32000, 131072, gpus=4),))
    started = time.monotonic()
    late = asyncio.run(selectworker.run(job, timeout_s=0.05))
    assert not late.ok and late.error == "timed out after 0.05 s" and time.monotonic() - started < 5
    failed = asyncio.run(selectworker.run(job, timeout_s=120))  # its one pod asks for no GPU: the selection refuses it
    assert not failed.ok and failed.error.startswith("ValueError: lookahead replays the openb protocol"), failed.error


def test_a_bad_scorer_selection_setting_is_a_usage_error_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from controlplane.commands import serve

    monkeypatch.setenv("FEDPLANE_SCORER_SELECTION", "maybe")
    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 2 and "FEDPLANE_SCORER_SELECTION" in result.output and "Traceback" not in result.output


def test_the_worker_runs_the_real_selection_on_a_tiny_fleet() -> None:
    pods = tuple(Pod(f"p{i}", 4000, 8192, gpu=GpuRequest(1, 1000)) for i in range(12))
    fleet = tuple(Node(f"n{i}", 32000, 131072, gpus=4) for i in range(3))
    from federated.runtime.lookahead import CANDIDATES

    assert set(CANDIDATES) <= set(SCORERS), "every family the selection may pick, agents know"
    outcome = asyncio.run(selectworker.run(Job("c0", (), pods, fleet), timeout_s=300))
    assert outcome.ok, outcome.error
    assert outcome.scorer in {"learned", "fgd", "bestfit"} and set(outcome.means) >= {"learned"} and outcome.cpu_s > 0


@pytest.mark.integration
def test_real_agents_switch_together_to_the_family_the_plane_selects_and_place_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path a user runs: a served plane and three agent daemons with the shipped policy. Two GPU workloads are
    submitted (one 24-core pod and three 4-core pods, one GPU each, on nodes of 32 cores and 4 GPUs); once their
    context is adopted the plane runs the real lookahead selection in its worker process, which keeps FGD (selection
    means learned 0.7917, FGD 0.8125, BestFit 0.7917 on this fleet), and adopts it under a new version: every agent
    reports fgd, scores with the FGD profile, and the next workload's pods are won with FGD ranks. The clusters
    table, /metrics and the decisions log show the choice; an agent restarted while the plane is away keeps it."""
    from click.testing import CliRunner

    from controlplane.registry import ClusterSpec
    from controlplane.verdicts import Timings
    from edgeagent.families import ProfileScorer
    from federated.runtime.scorer import default_model_dir
    from fedplane.cli import main

    pytest.importorskip("federated.runtime.lookahead")
    pytest.importorskip("onnxruntime")
    if not (default_model_dir() / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "v1").symlink_to(default_model_dir())
    outcomes: list[tuple[Job, Outcome]] = []
    real = selectworker.run

    async def recorded(job: Job, timeout_s: float) -> Outcome:  # the real worker; the test only keeps what it did
        outcome = await real(job, timeout_s)
        outcomes.append((job, outcome))
        return outcome

    monkeypatch.setattr(selectworker, "run", recorded)
    fast = Timings(probe_interval_s=0.1, report_interval_s=0.2, fresh_s=1.0, probe_failures=3, context_stabilization_s=0.5,
                   scorer_selection_s=0.5, scorer_selection_timeout_s=120)
    spec = ClusterSpec("c0", "r0", twin_nodes=3, twin_cpu_milli=32000, twin_memory_mib=131072, twin_gpus=4)

    def submit(name: str, cpu_milli: int, replicas: int) -> cp.SubmitWorkloadRequest:
        return cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(
            name=name, replicas=replicas, pod=cp.PodTemplate(cpu_milli=cpu_milli, memory_mib=8192, gpus=1)))

    async def scenario() -> None:
        async with served_with_agents(tmp_path, spec, fast, {"models": {"dir": str(tmp_path / "models")}}) as fleet:
            plane, agents, stub = fleet.plane, fleet.agents, fleet.stub

            async def until(what: str, check: object, timeout: float = 30) -> None:
                deadline = time.monotonic() + timeout
                while not check():  # type: ignore[operator]
                    assert time.monotonic() < deadline, f"never: {what}"
                    await asyncio.sleep(0.1)

            async def reported() -> list[str]:
                (c,) = (await stub.ListAgents(cp.ListAgentsRequest(cluster="c0"))).clusters
                return [a.context.scorer or "learned" for a in c.agents if a.context.version]

            await stub.SubmitWorkload(submit("a-big", 24000, 1))
            await stub.SubmitWorkload(submit("b-small", 4000, 3))
            await until("the plane adopts fgd", lambda: plane.contexts.get("c0").scorer == "fgd", timeout=90)
            plane.selections.every_s = 3600.0  # no new selection while the next workload is placed
            job, outcome = outcomes[-1]
            assert [p.uid for p in job.workload] == ["a-big-0", "b-small-0", "b-small-1", "b-small-2"], "the replicas on c0"
            assert [n.name for n in job.fleet] == ["c0-n0", "c0-n1", "c0-n2"], "the nodes its agents report"
            assert outcome.scorer == "fgd" and outcome.means["fgd"] > max(outcome.means["learned"], outcome.means["bestfit"])
            assert outcome.cpu_s > 0 and 0 < outcome.wall_s < 120
            sent = plane.contexts.get("c0")
            await until("every agent holds the new version", lambda: {a.context.current for a in agents} == {sent})
            deadline = time.monotonic() + 20
            while await reported() != ["fgd"] * 3:
                assert time.monotonic() < deadline, "agents never reported placing with fgd"
                await asyncio.sleep(0.1)
            for a in agents:
                scorer = a.placer_.scorer
                assert isinstance(scorer, ProfileScorer) and scorer.version == "fgd", "every agent places with FGD"
                assert a.placer_.node_state().model == "fgd", "and tells its peers so"

            await stub.SubmitWorkload(submit("infer", 4000, 2))

            def infer_running() -> list[str]:
                return [uid for a in agents for uid in a.placer_.running if "infer" in uid]
            await until("the new workload is bound by the agents", lambda: len(infer_running()) == 2)
            for uid in infer_running():
                claim = agents[0].placer_.ledger.replica.winner(uid)
                assert claim is not None and claim.node in fleet.names
                assert claim.score == int(claim.score) and 0 <= claim.score <= 100, "won with an FGD rank, not a model score"

            target = fleet.target
            out = await asyncio.to_thread(CliRunner(env={"COLUMNS": "400"}).invoke, main, ["controlplane", "clusters", "--target", target])
            assert out.exit_code == 0 and "scorer" in out.stdout and "fgd" in out.stdout, out.stdout
            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "agents", "--target", target, "--json"])
            assert [a["context"]["scorer"] for a in json.loads(out.stdout)["clusters"][0]["agents"]] == ["fgd"] * 3
            scraped = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in text_string_to_metric_families(
                generate_latest(plane.metrics.registry).decode()) for s in m.samples}
            assert scraped[("fedplane_cluster_scorer", (("cluster", "c0"), ("scorer", "fgd")))] == 1.0
            assert scraped[("fedplane_cluster_scorer", (("cluster", "c0"), ("scorer", "learned")))] == 0.0
            assert scraped[("fedplane_scorer_selections_total", (("cluster", "c0"), ("outcome", "chosen")))] == len(outcomes)
            assert scraped[("fedplane_scorer_selection_cpu_seconds_total", ())] > 0
            assert any(d.kind == "scorer:fgd" and d.source == "c0" for d in plane.registry.decisions())

            plane.backends.twins()["c0"].partition()  # the plane is away: a restarted agent resumes with fgd
            await fleet.restart(0)
            await until("the restarted agent is up", lambda: agents[0].metrics is not None)
            assert isinstance(agents[0].placer_.scorer, ProfileScorer) and agents[0].context.current.scorer == "fgd"
            plane.backends.twins()["c0"].heal()

    asyncio.run(scenario())
