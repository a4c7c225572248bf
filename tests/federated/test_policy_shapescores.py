"""Scores kept per pod shape are bit for bit the scores a fresh call computes, fleet-wide and on one agent's own node."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from policy_data import fleet, pods

from fedcore.nodetable import NodeTable, Placement
from fedapi.workloadcontext import Profile, WorkloadContext, from_wire
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.filters import resources_fit

pytest.importorskip("onnxruntime")

from federated.runtime import artifacts  # noqa: E402
from federated.runtime.scorer import PolicyRuntime, default_model_dir  # noqa: E402


def shipped(cpu_pressure: float = 0.0) -> PolicyRuntime:
    """The shipped runtime; ``cpu_pressure`` sets its workload's CPU pressure (1.02: ``workload_cpu_bound`` at 1)."""
    if not (default_model_dir() / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    if not cpu_pressure:
        return PolicyRuntime(default_model_dir())
    return PolicyRuntime(default_model_dir(), types=replace(artifacts.load(default_model_dir()).types, cpu_pressure=cpu_pressure))


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.int64)


def replay(seed: int, steps: int):
    """Yield (pod, table) along placements, releases and health changes; the caller scores before the step goes on."""
    table = NodeTable(fleet(60, seed=seed))
    rng = np.random.default_rng(seed)
    held: list[tuple[Pod, Placement]] = []
    for pod in pods(steps, seed):
        yield pod, table
        rows = np.flatnonzero(resources_fit(pod, table))
        if rows.size:
            held.append((pod, table.allocate(pod, int(rows[rng.integers(rows.size)]))))
        if held and rng.random() < 0.3:
            table.release(*held.pop(int(rng.integers(len(held)))))
        if rng.random() < 0.05:
            table.set_slow(rng.integers(len(table), size=2), bool(rng.random() < 0.5))


@pytest.mark.parametrize("seed", [0, 1])
def test_kept_scores_equal_a_fresh_scoring_of_every_node(seed: int) -> None:
    kept, fresh = shipped(), shipped()
    model, scored = kept.scorer, []
    kept.scorer = lambda pod_x, node_x: (scored.append(len(node_x)), model(pod_x, node_x))[1]  # type: ignore[assignment]
    asked = 0
    for step, (pod, table) in enumerate(replay(seed, 400)):
        everything = np.arange(len(table))
        expected = fresh.scorer(*fresh.inputs(pod, table, everything))
        assert np.array_equal(bits(kept.scores(pod, table, everything)), bits(expected)), (step, pod)
        feasible = np.flatnonzero(resources_fit(pod, table))  # what the scheduler asks: a subset, in order
        assert np.array_equal(bits(kept.scores(pod, table, feasible)), bits(expected[feasible])), (step, pod)
        asked += len(table) + feasible.size
    assert sum(scored) < asked / 5, "the model saw only the rows that changed since each shape was last scored"


@pytest.mark.parametrize("seed", [0, 3])
def test_the_kept_grouping_names_one_row_of_every_live_class_and_each_row_s_place(seed: int) -> None:
    """What a shape's first sight scores instead of sorting the rows into classes: kept right through placements,
    releases, health changes and the classes' renumbering."""
    runtime = shipped()
    for step, (pod, table) in enumerate(replay(seed, 400)):
        nodes = runtime.features.follow(table)
        chosen, place = nodes.one_per_class()
        classes = nodes.classes
        assert sorted(classes[chosen].tolist()) == sorted(set(classes.tolist())), step  # each live class once
        assert np.array_equal(classes[chosen[place]], classes), step  # every row points at a row of its own class


def test_pods_of_a_placed_workload_are_scored_fresh_every_time() -> None:
    """Their latency and spread columns read where the workload's replicas run: every node's score moves with a placement."""
    kept, fresh = shipped(), shipped()
    table = NodeTable(fleet(30, seed=4))
    everything = np.arange(len(table))
    for i in range(12):
        pod = Pod(f"s{i}", 4000, 16384, workload="svc", max_per_node=2)
        expected = fresh.scorer(*fresh.inputs(pod, table, everything))
        got = kept.scores(pod, table, everything)
        assert np.array_equal(bits(got), bits(expected)), i
        table.allocate(pod, int(np.argmax(got)))


@pytest.mark.parametrize("cpu_pressure", [0.0, 1.02])
def test_an_agent_scoring_its_own_node_gets_the_fleet_wide_score_and_inputs(cpu_pressure: float) -> None:
    """Claims compare scores across agents: each agent's one-row table must score exactly as the fleet-wide scorer,
    and the inputs it records with a claim (kept per shape while its node is unchanged) are the features of that row.
    The workload's CPU pressure comes with its pod types, never from the table an agent sees."""
    from edgeagent.policy import LearnedScorer

    fleet_wide = shipped(cpu_pressure)
    nodes = fleet(12, seed=5)
    table = NodeTable(nodes)
    agents = [(LearnedScorer(shipped(cpu_pressure)), NodeTable([node])) for node in nodes]
    model, scored = agents[0][0].runtime.scorer, []
    agents[0][0].runtime.scorer = lambda pod_x, node_x: (scored.append(1), model(pod_x, node_x))[1]  # type: ignore[assignment]
    rng = np.random.default_rng(5)
    everything = np.arange(len(table))
    decisions = 0
    for pod in pods(150, 5):
        scores = fleet_wide.scores(pod, table, everything)
        for row, (agent, own) in enumerate(agents):
            got = agent.assess(pod, own)
            pod_x, node_x = fleet_wide.inputs(pod, table, np.array([row]))
            assert bits(np.array([got.score]))[0] == bits(scores[row : row + 1])[0], (pod, row)
            assert got.pod_x is not None and got.node_x is not None
            assert np.array_equal(got.pod_x.view(np.int32), pod_x[0].view(np.int32)), (pod, row)
            assert np.array_equal(got.node_x.view(np.int32), node_x[0].view(np.int32)), (pod, row)
        decisions += 1
        rows = np.flatnonzero(resources_fit(pod, table))
        if rows.size:
            row = int(rows[rng.integers(rows.size)])
            table.allocate(pod, row)
            agents[row][1].allocate(pod, 0)
    assert len(scored) < decisions / 2, "an agent whose node did not change reuses what it scored for the shape"


def test_scores_stay_exact_when_few_shapes_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The least recently asked shapes go first; one asked again is scored afresh, never from another shape's kept rows."""
    from federated.runtime import shapescores

    monkeypatch.setattr(shapescores, "MAX_SHAPES", 2)
    kept, fresh = shipped(), shipped()
    for step, (pod, table) in enumerate(replay(3, 150)):
        everything = np.arange(len(table))
        expected = fresh.scorer(*fresh.inputs(pod, table, everything))
        assert np.array_equal(bits(kept.scores(pod, table, everything)), bits(expected)), (step, pod)
        assert len(kept._kept._shapes) <= 2  # noqa: SLF001


def distinctive_profile() -> Profile:
    """A cluster's profile unlike openb's training pods: 2-GPU pods with 12 cores, 0.3-GPU ones, a 16-core CPU slot."""
    workload = ([Pod("train", 12000, 65536, gpu=GpuRequest(2, 1000))] * 5 + [Pod("infer", 4000, 8192, gpu=GpuRequest(1, 300))] * 3
                + [Pod("etl", 16000, 32768)] * 2)
    profile = Profile.quantized(PodTypes.from_pods(workload, fleet=fleet(60)))
    assert profile is not None
    return profile


def test_a_runtime_given_new_types_midway_scores_as_one_built_with_them() -> None:
    """``set_types`` on a runtime that followed a fleet's history: bit for bit the runtime built with those types that
    followed it too (node caches and load trend kept, slot room recomputed, kept scores dropped)."""
    other = distinctive_profile().types(0.97)
    switched, fresh = shipped(), PolicyRuntime(default_model_dir(), types=other)
    assert not np.array_equal(switched.features.types.slots, other.slots), "the slot shapes change too"
    differed = 0
    for step, (pod, table) in enumerate(replay(5, 160)):
        if step == 80:
            switched.set_types(other)
        everything = np.arange(len(table))
        got, want = switched.scores(pod, table, everything), fresh.scores(pod, table, everything)
        if step >= 80:
            assert np.array_equal(bits(got), bits(want)), (step, pod)
        else:
            differed += not np.array_equal(bits(got), bits(want))
    assert differed > 40, "the two profiles score differently: the test compares something"


@pytest.mark.parametrize("context", [
    WorkloadContext(1.02, 1), WorkloadContext(0.97, 2, distinctive_profile()), WorkloadContext(0.0, 3, distinctive_profile()),
    WorkloadContext(0.5, 4)], ids=["pressure", "profile", "profile-no-pressure", "back-to-the-artifact"])
def test_an_agent_told_a_context_scores_as_the_fleet_wide_scorer_of_that_profile(context: WorkloadContext) -> None:
    """The control plane's workload context reaches a running agent (through the wire map): what it kept per shape under
    the artifact's profile is not reused, and its scores and inputs are bit for bit those of ``PolicyRuntime(model,
    types=that profile)`` over the whole fleet."""
    from edgeagent.policy import LearnedScorer

    received = from_wire(context.to_wire())
    assert received == context
    nodes = fleet(6, seed=7)
    agents = [(LearnedScorer(shipped()), NodeTable([node])) for node in nodes]
    stream = pods(60, 7)
    for pod in stream[:30]:
        for agent, own in agents:
            agent.assess(pod, own)  # warm every shape under the artifact's profile
    fleet_wide, table = PolicyRuntime(default_model_dir(), types=received.types(artifacts.load(default_model_dir()).types)), NodeTable(nodes)
    for agent, _ in agents:
        agent.set_context(received)
    for pod in stream:
        scores = fleet_wide.scores(pod, table, np.arange(len(table)))
        for row, (agent, own) in enumerate(agents):
            got = agent.assess(pod, own)
            assert bits(np.array([got.score]))[0] == bits(scores[row : row + 1])[0], (context, pod, row)
            assert got.pod_x is not None and np.array_equal(got.pod_x, fleet_wide.features.pod(pod)[0])
