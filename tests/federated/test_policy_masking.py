"""Hard filters always win: the learned profile and the RL policy never choose an infeasible node."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from policy_data import SHAPES
from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore.nodes import Arch, Node, Taint
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.scheduling.framework import Scheduler
from fedcore.scheduling.profiles import ProfileContext
from federated.evaluating import model_override
from federated.runtime.plugin import make_profile

nodes_st = st.lists(
    st.builds(
        lambda cpu, mem, gpus, arch, tainted: (cpu, mem, gpus, arch, tainted),
        st.sampled_from([4000, 16000, 64000]), st.sampled_from([8192, 65536, 262144]), st.sampled_from([0, 1, 2, 8]),
        st.sampled_from(list(Arch)), st.booleans(),
    ),
    min_size=1, max_size=25,
)
pods_st = st.lists(
    st.builds(
        lambda shape, archs: (shape, archs),
        st.sampled_from(SHAPES), st.sampled_from([frozenset(), frozenset({Arch.AMD64}), frozenset({Arch.ARM64, Arch.ARMV7})]),
    ),
    min_size=1, max_size=30,
)


def build(nodes: list[tuple], specs: list[tuple]) -> tuple[list[Node], list[Pod]]:
    fleet = [
        Node(f"n{i}", cpu, mem, gpus=gpus, gpu_model="G2" if gpus else "", arch=arch, taints=(Taint("dedicated"),) if tainted else ())
        for i, (cpu, mem, gpus, arch, tainted) in enumerate(nodes)
    ]
    pods = [Pod(f"p{i}", s[0], s[1], gpu=GpuRequest(s[2], s[3]), archs=archs) for i, (s, archs) in enumerate(specs)]
    return fleet, pods


@pytest.mark.parametrize("model", ["shipped", "none"])
@settings(max_examples=25, deadline=None)
@given(nodes=nodes_st, specs=pods_st)
def test_learned_profile_only_places_on_feasible_nodes(model: str, nodes: list[tuple], specs: list[tuple]) -> None:
    fleet, pods = build(nodes, specs)
    ctx = ProfileContext(0, pods)
    # "shipped": the default artifact when present (else the heuristic); "none": the heuristic fallback.
    with model_override(None) if model == "none" else contextlib.nullcontext():
        profile = make_profile(ctx)
    table = NodeTable(fleet)
    scheduler = Scheduler(profile, table, seed=0)
    for pod in pods:
        feasible = scheduler.feasible(pod)
        decision = scheduler.schedule(pod)
        if decision.placement is None:
            assert not feasible.any()
        else:
            assert feasible[decision.placement.node]


def test_rl_policy_masks_padding_candidates() -> None:
    torch = pytest.importorskip("torch")
    from federated.envs import layout
    from federated.model import PlacementScorer
    from federated.rl import ShortlistHeads

    k = 8
    heads = ShortlistHeads(PlacementScorer(), k)
    obs = torch.randn(64, layout(k)[2])
    start, mask, _ = layout(k)
    valid = torch.rand(64, k) < 0.4
    valid[:, 0] = True
    obs[:, mask:] = valid.float()
    logits = heads.forward_actor(obs)
    samples = torch.distributions.Categorical(logits=logits).sample((200,))
    assert bool(valid.gather(1, samples.T).all())
    assert np.isfinite(logits[valid].detach().numpy()).all()
