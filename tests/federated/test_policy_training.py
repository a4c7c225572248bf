"""A short imitation run on a synthetic fleet beats random placement; a short PPO run keeps the scorer usable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from policy_data import fleet, pods

torch = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from fedcore.scheduling.fragmentation import PodTypes  # noqa: E402
from fedcore.twin import submission  # noqa: E402
from federated import evaluating, exporting, imitation, rl, rollouts  # noqa: E402
from federated.model import PlacementScorer  # noqa: E402

NODES = fleet(60, seed=5)
PODS = pods(400, seed=5)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = rollouts.Decisions.concat([rollouts.openb_episode(NODES, PODS, seed, candidates=16) for seed in (1000, 1001)])
    fit: dict[str, float] = {}
    model = imitation.train(data, config=imitation.ImitationConfig(epochs=2, seed=0), info=fit)
    assert fit["wide_rms"] < 0.01  # FGD's score is linear in the features: least squares reproduces it
    assert imitation.agreement(model, data) > 0.9
    constant = PlacementScorer()
    with torch.no_grad():
        for p in constant.parameters():
            p.zero_()
    assert imitation.agreement(constant, data) < 0.7  # a scorer that ties everything agrees only by chance
    path = tmp_path_factory.mktemp("trained")
    exporting.export(model, path, PodTypes.from_pods(PODS), {"purpose": "test"})
    return path


def test_short_imitation_beats_random_on_held_out_seeds(trained: Path) -> None:
    seeds = [0, 1]
    with evaluating.model_override(trained):
        learned = evaluating.mean([submission.run(NODES, PODS, "learned", s).gpu_alloc_ratio for s in seeds])
    random = evaluating.mean([submission.run(NODES, PODS, "random", s).gpu_alloc_ratio for s in seeds])
    assert learned > random


def test_short_ppo_run_returns_a_finite_scorer() -> None:
    data = rollouts.openb_episode(NODES, PODS, 1000, candidates=16)
    model = imitation.train(data, config=imitation.ImitationConfig(epochs=1))
    tuned, stats = rl.finetune(model, NODES, PODS, [1000], steps=256, k=8)
    assert stats["steps"] == 256
    assert all(torch.isfinite(p).all() for p in tuned.parameters())
    assert tuned is not model


def test_reshaped_scores_are_tempered_plus_small_and_idle_node_preferences() -> None:
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES
    from federated.training import reshaped

    torch.manual_seed(0)
    model = PlacementScorer()
    pod = torch.rand(1, len(POD_FEATURES))
    nodes = torch.rand(len(NODE_FEATURES), 12)
    devices = nodes[NODE_FEATURES.index("gpu_devices")]
    util = nodes[NODE_FEATURES.index("gpu_util")]
    with torch.no_grad():
        expected = model(pod, nodes) / 2.5 + 3.0 * (1.0 - devices) + 1.0 * (1.0 - util)
        got = reshaped(model, 2.5, 3.0, 1.0)(pod, nodes)
        torch.testing.assert_close(reshaped(model, 2.0, 3.0)(pod, nodes), model(pod, nodes) / 2.0 + 3.0 * (1.0 - devices), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert reshaped(model, 1.0, 0.0) is not model  # a copy: the trained weights stay as they were


def fgd_only() -> PlacementScorer:
    """FGD's imitation: 100 points per unit of its score, nothing else (the start every reshaping is tested from)."""
    from federated.runtime.features import NODE_FEATURES

    fgd = PlacementScorer()
    with torch.no_grad():
        for p in fgd.parameters():
            p.zero_()
        fgd.wide[0, NODE_FEATURES.index("fgd_score")] = 100.0
    return fgd


def test_reshaped_sharing_pods_take_their_own_temperature_and_whole_gpus_earn_points() -> None:
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES
    from federated.training import reshaped

    torch.manual_seed(0)
    fgd = fgd_only()
    nodes = torch.rand(len(NODE_FEATURES), 12)
    score = nodes[NODE_FEATURES.index("fgd_score")]
    whole = nodes[NODE_FEATURES.index("whole_gpus_after")]
    sharing, whole_pod = torch.zeros(1, len(POD_FEATURES)), torch.zeros(1, len(POD_FEATURES))
    sharing[0, POD_FEATURES.index("gpu_sharing")] = 1.0
    model = reshaped(fgd, 2.5, 0.0, 0.0, 10.0 / 3.0, 0.5)
    with torch.no_grad():
        torch.testing.assert_close(model(sharing, nodes), 30.0 * score + 0.5 * whole, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(model(whole_pod, nodes), 40.0 * score + 0.5 * whole, rtol=1e-5, atol=1e-4)


def test_pinned_release_withdraws_the_node_kind_preferences_in_a_pinned_workload_only() -> None:
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES
    from federated.training import reshaped

    fgd = fgd_only()
    nodes = torch.rand(len(NODE_FEATURES), 12)
    score, devices, util = (nodes[NODE_FEATURES.index(k)] for k in ("fgd_score", "gpu_devices", "gpu_util"))
    free, pinned = torch.zeros(1, len(POD_FEATURES)), torch.zeros(1, len(POD_FEATURES))
    pinned[0, POD_FEATURES.index("workload_pinned")] = 1.0
    model = reshaped(fgd, 2.5, 4.0, 1.0, 2.5, 0.0, 1.0)
    with torch.no_grad():
        torch.testing.assert_close(model(free, nodes), 40.0 * score - 4.0 * devices - util + 5.0, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(model(pinned, nodes), 40.0 * score + 5.0, rtol=1e-5, atol=1e-4)
        # without the release the pinned workload keeps them (the weights before this spec)
        torch.testing.assert_close(reshaped(fgd, 2.5, 4.0, 1.0)(pinned, nodes), model(free, nodes), rtol=1e-5, atol=1e-4)


def test_cpu_packing_adds_points_for_cpu_taken_in_a_cpu_bound_workload_only() -> None:
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES
    from federated.training import reshaped

    fgd = fgd_only()
    nodes = torch.rand(len(NODE_FEATURES), 12)
    score, free = nodes[NODE_FEATURES.index("fgd_score")], nodes[NODE_FEATURES.index("cpu_free_after")]
    unbound, bound = torch.zeros(1, len(POD_FEATURES)), torch.zeros(1, len(POD_FEATURES))
    bound[0, POD_FEATURES.index("workload_cpu_bound")] = 1.0
    model = reshaped(fgd, 2.5, 0.0, 0.0, 2.5, 0.0, 0.0, 5.0)
    with torch.no_grad():
        torch.testing.assert_close(model(unbound, nodes), 40.0 * score, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(model(bound, nodes), 40.0 * score - 5.0 * free, rtol=1e-5, atol=1e-4)


def test_heuristic_fallback_applies_the_same_release() -> None:
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES
    from federated.runtime.scorer import HeuristicScorer
    from federated.training import reshaped

    fgd = fgd_only()
    point = (2.5, 4.0, 1.0, 10.0 / 3.0, 0.5, 1.0, 5.0)
    model, heuristic = reshaped(fgd, *point), HeuristicScorer(*point)
    nodes = torch.rand(len(NODE_FEATURES), 12)
    for pinned, cpu_bound in ((0.0, 0.0), (0.5, 0.0), (1.0, 0.0), (0.0, 0.5), (0.0, 1.0), (1.0, 1.0)):
        for sharing in (0.0, 1.0):
            pod = torch.zeros(1, len(POD_FEATURES))
            pod[0, POD_FEATURES.index("workload_pinned")], pod[0, POD_FEATURES.index("gpu_sharing")] = pinned, sharing
            pod[0, POD_FEATURES.index("workload_cpu_bound")] = cpu_bound
            with torch.no_grad():
                got = model(pod, nodes).numpy()
            np.testing.assert_allclose(heuristic(pod.numpy(), nodes.t().contiguous().numpy()), got, rtol=1e-5, atol=1e-3)


def test_settings_are_kept_for_their_margin_on_the_worst_validation_list() -> None:
    from federated.training import AS_TRAINED, most_robust

    steer, release = (2.5, 4.0, 1.0, 2.5, 0.5, 0.0, 0.0), (2.5, 4.0, 1.0, 2.5, 0.5, 1.0, 0.0)
    points = (AS_TRAINED, steer, release)
    default = {AS_TRAINED: 0.951, steer: 0.956, release: 0.956}
    assert most_robust(points, {"default": default}, {"default": 0.0}) == steer  # a tie goes to the earlier point
    pinned = {AS_TRAINED: 0.949, steer: 0.888, release: 0.952}
    assert most_robust(points, {"default": default, "gpuspec20": pinned}, {"default": 0.951, "gpuspec20": 0.949}) == release
    flat = {p: 0.95 for p in points}
    assert most_robust(points, {"default": flat}, {"default": 0.95}) == AS_TRAINED


def test_reshape_points_parse_with_their_defaults() -> None:
    from federated.commands import _reshape

    assert _reshape("2.5:3") == (2.5, 3.0, 0.0, 2.5, 0.0, 0.0, 0.0)  # the sharing temperature defaults to the temperature
    assert _reshape("2.5:3:1:3.5:0.5") == (2.5, 3.0, 1.0, 3.5, 0.5, 0.0, 0.0)
    assert _reshape("2.5:3:1:3.5:0.5:1") == (2.5, 3.0, 1.0, 3.5, 0.5, 1.0, 0.0)
    assert _reshape("2.5:3:1:3.5:0.5:1:20") == (2.5, 3.0, 1.0, 3.5, 0.5, 1.0, 20.0)
    for bad in ("2", "1:2:3:4:5:6:7:8", "a:b"):
        with pytest.raises(ValueError):
            _reshape(bad)
