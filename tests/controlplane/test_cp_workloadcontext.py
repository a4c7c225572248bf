"""Each cluster's workload context: computed from what the registry placed there and the GPU nodes its agents
report, held steady against flicker, sent with every agent's ack, and refused when an agent reports garbage."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controlplane import service
from controlplane.evidence import AgentReport, NodeSummary
from controlplane.registry import ClusterSpec, Placement, PlacementState
from controlplane.runtime import Backends, ControlPlane
from controlplane.contextbook import HYSTERESIS, ContextBook, cluster_profiles, distance
from controlplane.workloads import Policy, Template, Workload
from fedapi import controlplane_pb2 as cp
from fedapi.workloadcontext import NONE, Profile, WorkloadContext
from fedcore.nodes import Node
from fedcore.resources import Resources
from fedcore.scheduling.fragmentation import PodTypes
from federated.runtime.artifacts import types_to_json as types_json

from cp_agentfleet import served_with_agents


def gpu_node_report(cluster: str, node: str, cpu_milli: int = 32000, gpus: int = 4, sequence: int = 1) -> AgentReport:
    summary = NodeSummary(node, Resources(cpu_milli, 131072, 0, gpus * 1000), Resources())
    return AgentReport(cluster, node, f"agent-{node}", sequence, summary, ())


def fleet(reports: list[AgentReport], cluster: str) -> list[Node]:
    return [Node(r.node, r.summary.capacity.cpu_milli, r.summary.capacity.memory_mib, gpus=r.summary.capacity.gpu_milli // 1000)
            for r in reports if r.cluster == cluster]


def job(name: str, cpu_milli: int, gpus: int, replicas: int) -> Workload:
    return Workload(name, replicas, Template(cpu_milli, 4096, gpus))


def test_the_profile_is_the_twins_call_on_the_placed_workload_and_the_reported_fleet() -> None:
    reports = [gpu_node_report("c0", f"n{i}") for i in range(3)] + [gpu_node_report("c0", "cpu", 64000, 0),
                                                                    gpu_node_report("c1", "far", 8000, 8)]
    workloads = {w.name: w for w in (job("train", 8000, 1, 6), job("web", 2000, 0, 4), job("small", 2000, 1, 2))}
    placements = [Placement("train", "c0", 6, 1), Placement("web", "c0", 4, 1), Placement("small", "c1", 2, 1),
                  Placement("small", "c0", 5, 1, PlacementState.STALE)]
    observed = cluster_profiles(workloads, placements, reports)
    got = observed["c0"]
    assert got is not None
    # The one definition: CPU per requested GPU (CPU-only pods count in the CPU) over the GPU nodes' CPU per GPU.
    assert got.cpu_pressure == pytest.approx((6 * 8000 + 4 * 2000) / 6 / (32000 / 4))
    placed = [workloads["train"].pod(0)] * 6 + [workloads["web"].pod(0)] * 4
    twin = PodTypes.from_pods(placed, fleet=fleet(reports, "c0"))  # what the twin's learned profile holds for that run
    assert types_json(got) == types_json(twin)
    assert got.cpu.tolist() == [8000, 2000] and got.weight.tolist() == [0.6, 0.4] and got.slots.tolist() == [[2000, 4096]]
    c1 = observed["c1"]
    assert c1 is not None and c1.cpu_pressure == pytest.approx((2000 / 1) / (8000 / 8))
    assert "c2" not in observed, "no agent reported: no fleet known"
    assert cluster_profiles(workloads, [], reports)["c0"] is None, "nothing placed: the artifact's profile, pressure 0"


def at(pressure: float, types: PodTypes | None = None) -> PodTypes:
    """A computed profile of one 8-core 1-GPU shape (or ``types``) with this CPU pressure."""
    base = types if types is not None else PodTypes.from_pods([job("train", 8000, 1, 1).pod(0)])
    return replace(base, cpu_pressure=pressure)


def test_the_sent_pressure_is_rounded_and_does_not_flicker() -> None:
    book = ContextBook()
    assert book.get("c0") is NONE
    assert book.update("c0", None, 1.0) == WorkloadContext(0.0, 1000), "nothing placed: pressure 0, the artifact's shapes"
    first = book.update("c0", at(0.996), 2.0)
    assert first == WorkloadContext(1.0, 2000, Profile(((8000, 1000, 1, 1.0),)))
    for t, p in enumerate((1.004, 0.994, 1.0 + HYSTERESIS * 0.99, 1.0 - HYSTERESIS * 0.99, 1.01)):
        assert book.update("c0", at(p), 3.0 + t) is first, p
    moved = book.update("c0", at(0.97), 10.0)
    assert moved == replace(first, cpu_pressure=0.97, version=10000) and book.get("c0") is moved
    assert book.update("c0", at(0.0), 10.0).version == 10001, "versions only grow, even within one millisecond"
    assert book.update("c1", at(0.25), 11.0).cpu_pressure == 0.25 and book.get("c0").cpu_pressure == 0.0


def placed(train: int, infer: int, extra: int = 0) -> PodTypes:
    pods = ([job("train", 8000, 2, 1).pod(0)] * train + [job("infer", 2000, 1, 1).pod(0)] * infer
            + [job("big", 32000, 8, 1).pod(0)] * extra)
    return PodTypes.from_pods(pods, coverage=1.0)


def test_the_sent_profile_moves_only_when_more_than_a_few_pods_change_shape() -> None:
    """Weights rounded to 0.01, then a move of more than SPREAD of the pods' shapes: a few replicas more keep the version
    (agents keep their caches); a new shape or a mix that moved adopts a new one; no GPU request, no profile."""
    book = ContextBook()
    first = book.update("c0", placed(500, 500), 1.0)
    assert first.profile is not None and first.profile.shapes == ((8000, 1000, 2, 0.5), (2000, 1000, 1, 0.5))
    assert book.update("c0", placed(502, 498), 2.0) is first, "0.502 rounds to 0.50: the same profile"
    assert book.update("c0", placed(540, 460), 3.0) is first, "4 points of the pods changed shape: within SPREAD"
    assert distance(Profile.quantized(placed(540, 460)), first.profile) == pytest.approx(0.04)
    more = book.update("c0", placed(560, 440), 4.0)
    assert more.version == 4000 and more.profile is not None and [s[3] for s in more.profile.shapes] == [0.56, 0.44]
    third = book.update("c0", placed(560, 440, 120), 5.0)
    assert third.version == 5000 and third.profile is not None and len(third.profile.shapes) == 3, "a new shape: 10% of pods"
    cpu_only = PodTypes.from_pods([job("web", 2000, 0, 1).pod(0)])
    assert book.update("c0", cpu_only, 6.0) == WorkloadContext(0.0, 6000), "no GPU request: the artifact's shapes"
    assert distance(None, None) == 0.0 and distance(None, first.profile) == 1.0
    assert distance(first.profile, replace(first.profile, slots=((4000, 8192),))) == 1.0, "new slot shapes: every pod"


def test_after_the_first_a_context_moves_at_most_once_per_stabilization_window() -> None:
    """A churning workload (a new mix every tick) moves the agents' context once per window, to the mix of that moment;
    one that settles back within the window moves nothing."""
    book = ContextBook(stabilization_s=30.0)
    first = book.update("c0", placed(500, 500), 0.0)
    assert first.known, "the first context is sent at once"
    assert book.update("c0", placed(900, 100), 10.0) is first, "moved, but within the window"
    assert book.update("c0", placed(500, 500), 20.0) is first
    assert book.update("c0", placed(500, 500), 35.0) is first, "settled back: nothing to adopt"
    moved = book.update("c0", placed(900, 100, 0), 36.0)
    assert moved.version == 36000 and moved.profile is not None and [s[3] for s in moved.profile.shapes] == [0.9, 0.1]
    assert book.update("c0", None, 40.0) is moved and book.update("c0", None, 66.0).profile is None


def test_the_plane_sends_each_cluster_its_context_and_refuses_a_garbage_one(tmp_path: Path) -> None:
    now = [100.0]
    plane = ControlPlane(tmp_path / "cp.db", Backends(lambda: now[0]), lambda: now[0])
    plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2, twin_cpu_milli=32000, twin_gpus=4))
    plane.register_cluster(ClusterSpec("c1", "r0", twin_nodes=2, twin_cpu_milli=32000, twin_gpus=4))

    def ack(cluster: str, node: str, sequence: int, context: cp.WorkloadContext | None = None) -> cp.AgentAck:
        summary = cp.NodeSummary(node=node, ready=True)
        summary.capacity.cpu_milli, summary.capacity.memory_mib, summary.capacity.gpu_milli = 32000, 131072, 4000
        request = cp.AgentReport(cluster=cluster, node=node, agent_id=f"a-{node}", sequence=sequence, summary=summary,
                                 context=context)
        return asyncio.run(service.report_agent(plane, request, _Refuse()))

    try:
        assert not ack("c0", "c0-n0", 1).HasField("context"), "nothing computed yet: the field is absent, as from an older plane"
        ack("c1", "c1-n0", 1)
        plane.tick(now[0])
        train = Workload("train", 2, Template(8000, 4096, 1), Policy(clusters=("c1",)))  # 8 cores per GPU, as the nodes
        assert plane.submit(train, dry_run=False).ok
        plane.tick(now[0])
        assert not ack("c0", "c0-n0", 2).HasField("context"), "a new leader waits until every live agent has reported"
        now[0] += plane.timings.fresh_s
        plane.tick(now[0])
        here, other = "c1", "c0"
        got = ack(here, f"{here}-n0", 3)
        assert got.context == cp.WorkloadContext(cpu_pressure=1.0, version=101000, profile=cp.PodTypes(
            cpu=[8000], milli=[1000], count=[1], weight=[1.0], slots=[], pinned=0.0), max_cpu_milli=32000, max_gpus=4), \
            "the twin's profile of 'train', and its fleet's largest node"
        assert ack(other, f"{other}-n0", 3).context == cp.WorkloadContext(cpu_pressure=0.0, version=101000, max_cpu_milli=32000,
                                                                          max_gpus=4)
        assert {r.spec.name: r.context.cpu_pressure for r in plane.clusters()} == {here: 1.0, other: 0.0}
        scraped = {(m.name, s.labels.get("cluster")): s.value for m in text_string_to_metric_families(
            generate_latest(plane.metrics.registry).decode()) for s in m.samples}
        assert scraped[("fedplane_cluster_workload_profile_shapes", here)] == 1.0
        assert scraped[("fedplane_cluster_workload_profile_shapes", other)] == 0.0
        assert scraped[("fedplane_cluster_workload_context_changes", here)] == 1.0
        with pytest.raises(_Refused, match="workload context: cpu_pressure nan"):
            ack(here, f"{here}-n0", 4, cp.WorkloadContext(cpu_pressure=math.nan, version=5))
        with pytest.raises(_Refused, match="workload context: scorer must be one of learned, fgd, bestfit"):
            ack(here, f"{here}-n0", 4, cp.WorkloadContext(cpu_pressure=1.0, version=5, scorer="random"))
        bad = cp.AgentReport(cluster=here, node=f"{here}-n1", agent_id="a-bad", sequence=1)
        bad.summary.capacity.cpu_milli = -1  # a fleet read from it would stop every tick
        with pytest.raises(_Refused, match="capacity must be non-negative"):
            asyncio.run(service.report_agent(plane, bad, _Refuse()))
        ack(here, f"{here}-n0", 5, cp.WorkloadContext(cpu_pressure=1.0, version=101000))
        (row,) = [a for _, _, _, agents in plane.agents(here) for a in agents]
        assert row.report.context == WorkloadContext(1.0, 101000), "the agent's own word on what it scores with"
    finally:
        plane.close()


class _Refused(Exception):
    pass


class _Refuse:
    async def abort(self, code: object, details: str = "") -> None:
        raise _Refused(details)


@pytest.mark.integration
def test_real_agents_score_with_the_context_of_the_workload_submitted_to_their_cluster(tmp_path: Path) -> None:
    """The path a user runs: a control plane serving its API and twin link, three agent daemons with the shipped
    policy. A normal GPU workload gives them its profile and pressure (0.25: the policy's CPU-bound input stays 0);
    once a CPU-bound one of a distinctive shape (16 cores, 2 GPUs) replaces it, every agent scores against that shape
    with pressure 1.0, the profile the twin builds for that workload on that fleet, and says so on /metrics and in
    ListAgents; one restarted while the plane is away resumes with it."""
    import json
    import time
    import urllib.request

    from click.testing import CliRunner

    from controlplane.verdicts import Timings
    from edgeagent.daemon import Agent
    from edgeagent.policy import LearnedScorer
    from fedapi.workloadcontext import quantize
    from fedcore.pods import Pod
    from fedcore.resources import GpuRequest
    from federated.runtime.scorer import default_model_dir
    from fedplane.cli import main

    if not (default_model_dir() / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "v1").symlink_to(default_model_dir())
    fast = Timings(probe_interval_s=0.1, report_interval_s=0.2, fresh_s=1.0, probe_failures=3, context_stabilization_s=0.5)
    spec = ClusterSpec("c0", "r0", twin_nodes=3, twin_cpu_milli=32000, twin_memory_mib=131072, twin_gpus=4)

    async def scenario() -> None:
        async with served_with_agents(tmp_path, spec, fast, {"models": {"dir": str(tmp_path / "models")}}) as fleet:
            plane, agents, stub = fleet.plane, fleet.agents, fleet.stub

            async def listed(pressure: float) -> bool:
                (c,) = (await stub.ListAgents(cp.ListAgentsRequest(cluster="c0"))).clusters
                return len(c.agents) == 3 and all(a.context.version and a.context.cpu_pressure == pressure for a in c.agents)

            async def until(pressure: float) -> None:
                deadline = time.monotonic() + 15
                while not await listed(pressure):
                    assert time.monotonic() < deadline, f"agents never reported scoring with cpu_pressure {pressure}"
                    await asyncio.sleep(0.1)

            def cpu_bound_input(agent: Agent, pod: Pod) -> float:
                scorer = agent.placer_.scorer
                assert isinstance(scorer, LearnedScorer), "the agents run the shipped policy"
                pod_x = scorer.assess(pod, agent.placer_.table).pod_x
                assert pod_x is not None
                return float(pod_x[-1])

            def scraped(agent: Agent) -> float:
                with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/metrics", timeout=2) as reply:
                    line = next(x for x in reply.read().decode().splitlines() if x.startswith("fedplane_agent_workload_cpu_pressure "))
                return float(line.split()[1])

            def submit(name: str, cpu_milli: int, gpus: int = 1) -> cp.SubmitWorkloadRequest:
                return cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(
                    name=name, replicas=4, pod=cp.PodTemplate(cpu_milli=cpu_milli, memory_mib=8192, gpus=gpus)))

            def scorer_types(agent: Agent) -> list[list[int]]:
                scorer = agent.placer_.scorer
                assert isinstance(scorer, LearnedScorer)
                types = scorer.runtime.features.types
                return [types.cpu.tolist(), types.milli.tolist(), types.count.tolist(), types.weight.tolist()]

            await stub.SubmitWorkload(submit("infer", 2000))  # 2 cores per GPU on nodes of 8 per GPU
            await until(0.25)
            probe = Pod("probe", 8000, 8192, gpu=GpuRequest(1, 1000))
            assert [a.context.current.cpu_pressure for a in agents] == [0.25] * 3
            assert [await asyncio.to_thread(scraped, a) for a in agents] == [0.25] * 3
            assert all(cpu_bound_input(a, probe) == 0.0 for a in agents), "a normal workload leaves the policy as it was"

            await stub.DeleteWorkload(cp.DeleteWorkloadRequest(workload="infer"))
            assert [scorer_types(a) for a in agents] == [[[2000], [1000], [1], [1.0]]] * 3, "the profile of 'infer'"
            await stub.SubmitWorkload(submit("train", 16000, gpus=2))  # 8 cores per GPU: all the CPU the GPU nodes have
            await until(1.0)
            train = plane.registry.workload("train")
            assert train is not None
            twin_view = PodTypes.from_pods([train.pod(i) for i in range(4)], fleet=plane.backends.twins()["c0"].table.nodes)
            assert quantize(twin_view.cpu_pressure) == 1.0, "the value the twin's profile computes for this workload on this fleet"
            sent = plane.contexts.get("c0")
            assert sent.profile == Profile.quantized(twin_view) == Profile(((16000, 1000, 2, 1.0),)), "the twin's profile"
            assert [scorer_types(a) for a in agents] == [[[16000], [1000], [2], [1.0]]] * 3, "every agent scores against it"
            assert {a.context.current.profile for a in agents} == {sent.profile}
            assert [await asyncio.to_thread(scraped, a) for a in agents] == [1.0] * 3
            assert {a.context.current for a in agents} == {plane.contexts.get("c0")}, "one value, one version"
            assert all(cpu_bound_input(a, probe) == 1.0 for a in agents)

            target = fleet.target
            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "agents", "--target", target, "--json"])
            assert [a["context"]["cpu_pressure"] for a in json.loads(out.stdout)["clusters"][0]["agents"]] == [1.0] * 3
            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "clusters", "--target", target, "--json"])
            listed_context = json.loads(out.stdout)["clusters"][0]["context"]
            assert listed_context["cpu_pressure"] == 1.0 and listed_context["profile"]["cpu"] == [16000]  # int64: JSON numbers
            out = await asyncio.to_thread(CliRunner(env={"COLUMNS": "400"}).invoke, main, ["controlplane", "clusters", "--target", target])
            assert "16c 2x1g 100%" in out.stdout, out.stdout

            plane.backends.twins()["c0"].partition()  # the control plane is away: its acks stop
            await fleet.restart(0)  # restarted meanwhile: it resumes with the saved context, as its peers keep theirs
            deadline = time.monotonic() + 10
            while agents[0].metrics is None:
                assert time.monotonic() < deadline, "the restarted agent never came up"
                await asyncio.sleep(0.05)
            assert agents[0].context.current == plane.contexts.get("c0") and cpu_bound_input(agents[0], probe) == 1.0
            assert scorer_types(agents[0]) == [[16000], [1000], [2], [1.0]], "the saved profile, before any ack"
            assert [a.context.current.cpu_pressure for a in agents[1:]] == [1.0, 1.0]
            plane.backends.twins()["c0"].heal()

    asyncio.run(scenario())
