"""An agent told to place with a heuristic family scores its own node exactly as the twin's profile scores that node
in a fleet-wide table, takes the devices that profile takes, and switches with the cluster's context (back included)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from edgeagent.families import Families, ProfileScorer
from edgeagent.scoring import HeuristicScorer
from fedapi.workloadcontext import Profile, WorkloadContext, from_wire
from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.scheduling import profiles
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Scheduler

FLEET = [Node(f"n{i}", cpu, mem, gpus=gpus) for i, (cpu, mem, gpus) in enumerate(
    [(96000, 393216, 8)] * 4 + [(64000, 262144, 2)] * 3 + [(32000, 131072, 1)] * 3 + [(128000, 524288, 8), (16000, 65536, 0)])]
SHAPES = [  # (cpu milli, memory MiB, devices, milli per device, pods of 100): exact hundredths, so the plane's quantized
    (4000, 16384, 1, 500, 40), (8000, 32768, 1, 1000, 25), (16000, 65536, 2, 1000, 15), (2000, 8192, 1, 250, 10),
    (12000, 49152, 0, 0, 10),  # profile is the twin's own PodTypes.from_pods of the workload, bit for bit
]


def workload(seed: int) -> list[Pod]:
    pods = [Pod(f"p{k}-{i}", cpu, mem, gpu=GpuRequest(count, milli) if count else GpuRequest())
            for k, (cpu, mem, count, milli, n) in enumerate(SHAPES) for i in range(n)]
    random.Random(seed).shuffle(pods)
    return pods


def context(scorer: str, pods: list[Pod], version: int = 7) -> WorkloadContext:
    """What the control plane sends: the quantized profile of the workload on the fleet and the fleet's largest node."""
    types = PodTypes.from_pods(pods, fleet=FLEET)
    sent = WorkloadContext(round(types.cpu_pressure, 2), version, Profile.quantized(types), scorer,
                           max(n.cpu_milli for n in FLEET), max(n.gpus for n in FLEET))
    return from_wire(sent.to_wire())  # through the wire, as an agent gets it


@pytest.mark.parametrize("family", ["fgd", "bestfit"])
def test_an_agent_switched_to_a_family_scores_every_node_of_a_fleet_exactly_as_the_twins_profile(family: str) -> None:
    """The twin's profile (as ``bench`` builds it from the workload) places the workload on the fleet; after every
    placement, an agent on each node, holding only its own row, scores the next pod exactly as the profile ranks that
    node in the whole table, and picks the devices the profile picks there."""
    pods = workload(seed=3)
    twin = profiles.make(family, profiles.ProfileContext(seed=0, workload=pods))
    table = NodeTable(FLEET)
    scheduler = Scheduler(twin, table, seed=0)
    sent = context(family, pods)
    assert sent.profile is not None
    held, twins = sent.profile.types(sent.cpu_pressure), PodTypes.from_pods(pods)
    assert all(getattr(held, k).tolist() == getattr(twins, k).tolist() for k in ("cpu", "milli", "count", "weight")), \
        "the shapes FGD reads: the agent's from the wire, the twin's from the workload"
    agents = []
    for node in FLEET:  # one agent per node, each with its one-row table and its own family switch
        families = Families(HeuristicScorer())
        scorer = families.take(sent)
        assert isinstance(scorer, ProfileScorer) and scorer.version == family
        agents.append((scorer, NodeTable([node])))
    compared = placed = 0
    for pod in pods:
        feasible = np.flatnonzero(scheduler.feasible(pod))
        if feasible.size == 0:
            continue
        ranks = scheduler.rank(pod, feasible)
        for row, expected in zip(feasible.tolist(), ranks.tolist(), strict=True):
            scorer, own = agents[row]
            assert scorer.score(pod, own) == expected, f"{family}: node {FLEET[row].name} for {pod.uid}"
            assert scorer.devices(pod, own) == twin.devices.pick(pod, table, row), f"device pick on {FLEET[row].name}"
            compared += 1
        decision = scheduler.schedule(pod)
        assert decision.placement is not None
        row = decision.placement.node
        scorer, own = agents[row]
        own.allocate(pod, 0, decision.placement.gpus)  # the agent that won binds the devices the twin took
        placed += 1
    assert placed > 60 and compared > 300


def test_the_cluster_context_switches_the_family_and_back_and_the_model_keeps_the_profile() -> None:
    pods = workload(seed=1)

    class Model(HeuristicScorer):
        version = "v1"

        def __init__(self) -> None:
            super().__init__()
            self.contexts: list[WorkloadContext] = []

        def set_context(self, context: WorkloadContext) -> None:
            self.contexts.append(context)

    model = Model()
    families = Families(HeuristicScorer())
    assert families.take(WorkloadContext()) is families.base, "no context: the agent's own scorer"
    assert families.rebase(model, context("learned", pods)) is model
    fgd = families.take(context("fgd", pods, version=8))
    assert isinstance(fgd, ProfileScorer) and fgd.version == "fgd"
    assert families.take(context("fgd", pods, version=9)) is fgd, "a new version of the same value: nothing rebuilt"
    assert families.rebase(Model(), context("fgd", pods, version=9)) is fgd, "a new model loads, the cluster stays on fgd"
    back = families.take(context("learned", pods, version=10))
    assert back is families.base and back is not model and back.contexts[-1].version == 10  # type: ignore[attr-defined]
    assert [c.version for c in model.contexts] == [7, 8, 9], "the model kept scoring for the cluster's profile meanwhile"
