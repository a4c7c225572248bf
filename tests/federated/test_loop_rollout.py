"""Rollout pieces of the learning loop: install and roll back on an agent's models directory, what /metrics says,
the registry's history, the drill's bad model, the canary metric's one comparison, and the robust rule's bound."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeagent.policy import ModelWatcher
from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from federated.flower import aggregation, fleetmetric, learner, loopserver, registry, rollout, strategies
from federated.flower.loopconfig import Agent
from federated.flower.records import GRAM, MOMENT, STATS, to_record
from federated.model import PlacementScorer
from federated.rollouts import Decisions
from federated.runtime.features import NODE_FEATURES, POD_FEATURES
from tests.federated.test_flower_aggregation import reply


def _weights(kind: str = "random", seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    template = {k: v.detach().numpy().copy() for k, v in PlacementScorer().state_dict().items()}
    return learner.cold_start(template, kind, seed)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory, traces: Path) -> list[Path]:
    """Two registry versions (a random and a best-fit cold start) with verified artifacts (the held-out fleet comes from the traces)."""
    pytest.importorskip("onnxruntime")
    root = tmp_path_factory.mktemp("registry")
    held = fleetmetric.HeldOut.load(None, nodes=16, seeds=1)
    return [registry.publish(root, loopserver.to_model(_weights(kind)), held.types, {"run": "test"}) for kind in ("random", "bestfit")]


def test_rollback_leaves_the_agent_on_its_previous_model(versions: list[Path], tmp_path: Path) -> None:
    agent = Agent("a0", "region-0", str(tmp_path / "models"), str(tmp_path), 0)
    (tmp_path / "models").mkdir()
    watcher = ModelWatcher(tmp_path / "models")
    rollout.install(agent, versions[0])
    first = watcher.scan()
    assert first is not None and first.artifact == versions[0].name
    rollout.install(agent, versions[1])
    assert watcher.scan() is first and first.artifact == versions[1].name, "hot-swapped in place"
    rollout.remove(agent, versions[1].name)
    assert watcher.scan() is first and first.artifact == versions[0].name, "the previous model is back"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [versions[0].name]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging left behind"


def test_a_weighted_canary_scores_its_share_of_decisions_and_ends_cleanly(versions: list[Path], tmp_path: Path) -> None:
    """The agent scores the pods takes_canary routes to the candidate with it (and says so: claims name the model
    that scored them, /metrics the canary); dropping the canary or promoting the candidate ends the trial."""
    from edgeagent.policy import CanaryScorer
    from federated.runtime.canary import takes_canary

    agent = Agent("a0", "region-0", str(tmp_path / "models"), str(tmp_path), 0)
    (tmp_path / "models").mkdir()
    watcher = ModelWatcher(tmp_path / "models")
    rollout.install(agent, versions[0])
    current = watcher.scan()
    assert current is not None and current.canary == ""
    rollout.install_canary(agent, versions[1], 0.3)
    trial = watcher.scan()
    assert isinstance(trial, CanaryScorer) and (trial.artifact, trial.canary) == (versions[0].name, versions[1].name)
    assert watcher.scan() is None, "nothing changed"
    candidate = ModelWatcher(Path(agent.models) / "canary").scan()
    assert candidate is not None
    table = NodeTable([Node("n", 96000, 393216, gpus=8, gpu_model="G2")])
    pods = [Pod(f"pod-{i}", 8000, 32768, gpu=GpuRequest(1, 500)) for i in range(200)]
    routed = [takes_canary(p.uid, 0.3) for p in pods]
    assert 0.2 < np.mean(routed) < 0.4
    for pod, on_candidate in zip(pods, routed, strict=True):
        score = trial.assess(pod, table).score
        assert score == (candidate if on_candidate else current).score(pod, table)
        assert trial.version == (candidate if on_candidate else current).version
    assert current.version != candidate.version, "the two versions score differently, so the routing is what is checked"
    rollout.drop_canary(agent)
    assert watcher.scan() is current and current.canary == ""
    rollout.install_canary(agent, versions[1], 0.3)
    assert isinstance(watcher.scan(), CanaryScorer)
    rollout.install(agent, versions[1])
    rollout.drop_canary(agent)
    promoted = watcher.scan()
    assert promoted is current and promoted.artifact == versions[1].name and promoted.canary == ""
    assert sorted(p.name for p in Path(agent.models).iterdir()) == [versions[0].name, versions[1].name]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging left behind"


def test_registry_keeps_history_and_names_the_promoted_version(versions: list[Path]) -> None:
    root = versions[0].parent
    registry.record(root, versions[0].name, "promoted", round=0)
    registry.record(root, versions[1].name, "canary", round=1)
    registry.record(root, versions[1].name, "rolled_back", round=1)
    assert registry.promoted(root) == versions[0].name
    assert [e["status"] for e in registry.history(root)] == ["promoted", "canary", "rolled_back"]
    assert [v.name for v in registry.versions(root)] == [v.name for v in versions], "a rolled-back version is kept"


@pytest.fixture
def metrics_server() -> Iterator[tuple[int, list[str]]]:
    """A stand-in /metrics endpoint whose model_info artifact the test sets."""
    state = ["v000001"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            artifact, _, trial = state[0].partition("+")
            body = f'fedplane_agent_model_info{{version="abc-int8",artifact="{artifact}",canary="{trial}"}} 1\n'.encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], state
    server.shutdown()


def test_wait_for_reads_what_each_agent_says_it_runs(metrics_server: tuple[int, list[str]]) -> None:
    port, state = metrics_server
    live, dead = Agent("a0", "r0", "", "", port), Agent("a1", "r0", "", "", 1)
    assert rollout.running(live) == "v000001" and rollout.running(dead) is None
    threading.Timer(0.3, lambda: state.__setitem__(0, "v000002")).start()
    seen = rollout.wait_for({"a0": "v000002", "a1": "v000002"}, [live, dead], timeout_s=3.0)
    assert seen == {"a0": "v000002", "a1": None}
    state[0] = rollout.with_canary("v000002", "v000003")
    assert rollout.running(live) == "v000002+v000003"


def test_drill_model_inverts_scores_on_the_same_scale() -> None:
    weights = _weights("bestfit")
    good, bad = loopserver.to_model(weights), loopserver.to_model(loopserver.bad_model(weights))
    rng = np.random.default_rng(0)
    pods = torch.from_numpy(rng.random((4, len(POD_FEATURES)), dtype=np.float32))
    nodes = torch.from_numpy(rng.random((4, 5, len(NODE_FEATURES)), dtype=np.float32))
    nodes[..., NODE_FEATURES.index("arch_match")] = 1.0
    with torch.no_grad():
        np.testing.assert_allclose(bad.batched(pods, nodes).numpy(), 100.0 - good.batched(pods, nodes).numpy(), atol=1e-3)


def test_a_canary_of_the_current_model_is_the_current_fleet(versions: list[Path]) -> None:
    """The mixed fleet with the same model on both sides is exactly the plain fleet (one score comparison)."""
    held = fleetmetric.HeldOut.load(None, nodes=16, seeds=1)
    assert held.mixed(versions[1], versions[1], 0.25) == held.model(versions[1])
    assert held.mixed(versions[1], versions[1], 0.25, weight=0.2) == held.model(versions[1])
    assert 0.0 < held.model(versions[0]) <= 1.0


def test_the_canary_weight_routes_decisions_between_the_two_fleets(versions: list[Path]) -> None:
    """Every node on trial with every decision routed is the candidate's fleet; no decision routed, the current one."""
    held = fleetmetric.HeldOut.load(None, nodes=16, seeds=1)
    current, candidate = held.model(versions[1]), held.model(versions[0])
    assert current != candidate
    assert held.mixed(versions[1], versions[0], 1.0, weight=1.0) == candidate
    assert held.mixed(versions[1], versions[0], 1.0, weight=1e-9) == current


def test_canaries_are_spread_over_regions() -> None:
    fleet = [Agent(f"r{r}-{i}", f"region-{r}", "", "", 0) for r in range(3) for i in range(3)]

    class Config:
        canary = 4

        def regions(self) -> dict[str, list[Agent]]:
            out: dict[str, list[Agent]] = {}
            for a in fleet:
                out.setdefault(a.region, []).append(a)
            return out

    assert [a.name for a in loopserver.canaries(Config())] == ["r0-0", "r1-0", "r2-0", "r0-1"]  # type: ignore[arg-type]


def _decisions(rows: int, seed: int) -> Decisions:
    rng = np.random.default_rng(seed)
    ones = np.ones((rows, 1), dtype=bool)
    return Decisions(rng.random((rows, len(POD_FEATURES)), dtype=np.float32), rng.random((rows, 1, len(NODE_FEATURES)), dtype=np.float32),
                     (100 * rng.random((rows, 1))).astype(np.float32), ones, ones.copy())


def test_pooled_normal_equations_are_the_fit_on_every_regions_rows() -> None:
    """Summing the regions' normal equations gives the least-squares fit on their pooled rows (central training
    on the regions' data), not FedAvg of their own fits, which a region with few rows barely moves."""
    weights = _weights("random")
    regions = [_decisions(300, 1), _decisions(12, 2), _decisions(250, 3)]
    replies = []
    for data in regions:
        gram, moment = learner.normal_equations(data)
        message = reply(learner.train(weights, data, 1e-6), len(data))
        message.content[STATS] = to_record({GRAM: gram, MOMENT: moment})
        replies.append(message)
    pooled = loopserver.pooled(weights, replies, 1e-6)
    central = learner.train(weights, Decisions.concat(regions), 1e-6)
    np.testing.assert_allclose(pooled[learner.WIDE], central[learner.WIDE], rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(pooled[k], weights[k]) for k in weights if k != learner.WIDE), "the MLP part is left as sent"
    fedavg = aggregation.weighted_mean([learner.train(weights, d, 1e-6) for d in regions], [len(d) for d in regions])
    assert not np.allclose(fedavg[learner.WIDE], central[learner.WIDE], atol=1e-2)


def test_a_poisoned_region_stays_inside_the_robust_rules_bound() -> None:
    """Three regions fit the same global model to their own rows; one sends its update x -10. FedAvg is dragged
    far; the median behind a 1 x median norm bound stays, coordinate by coordinate, between the honest updates."""
    rng = np.random.default_rng(1)
    start = _weights("random")
    honest = []
    for region in range(2):
        pods = rng.random((200, len(POD_FEATURES)), dtype=np.float32)
        nodes = rng.random((200, 1, len(NODE_FEATURES)), dtype=np.float32)
        target = (100.0 * nodes[:, :, NODE_FEATURES.index("fgd_score")] + region).astype(np.float32)
        ones = np.ones((200, 1), bool)
        honest.append(learner.train(start, learner.Decisions(pods, nodes, target, ones, ones), prox=0.05))
    poisoned = {k: (v * -10.0).astype(v.dtype) for k, v in honest[0].items()}
    clients = [(honest[0], 200), (honest[1], 200), (poisoned, 200)]

    def aggregate(config: strategies.StrategyConfig) -> dict[str, np.ndarray]:
        strategy = strategies.make(config)
        strategy.reference = dict(start)  # type: ignore[attr-defined]
        arrays, _ = strategy.aggregate_train(1, [reply(w, n) for w, n in clients])
        assert arrays is not None
        return {k: v.numpy() for k, v in arrays.items()}

    robust = aggregate(strategies.StrategyConfig("median", clip_median_factor=1.0, min_clients=3))
    low = np.minimum(honest[0][learner.WIDE], honest[1][learner.WIDE])
    high = np.maximum(honest[0][learner.WIDE], honest[1][learner.WIDE])
    assert np.all(robust[learner.WIDE] >= low - 1e-4) and np.all(robust[learner.WIDE] <= high + 1e-4)
    bound = aggregation.median_bound([aggregation.update_norm(w, start) for w, _ in clients], 1.0)
    assert aggregation.update_norm(robust, start) <= bound * np.sqrt(len(clients)) + 1e-3
    fedavg = aggregate(strategies.StrategyConfig("fedavg", min_clients=3))
    assert aggregation.update_norm(fedavg, start) > 2 * aggregation.update_norm(robust, start), "plain FedAvg is dragged off"


def test_users_find_the_loop_in_the_cli() -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    for args, expected in ((["demo", "--help"], "--learn"), (["federated", "loop", "--help"], "--cold-start"),
                           (["bench", "loop", "--help"], "--poison"), (["federated", "--help"], "loop")):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and expected in result.output, result.output
    bad = CliRunner().invoke(main, ["federated", "loop", "--poison", "explode"])
    assert bad.exit_code == 2 and "fault must be one of" in bad.output and "Traceback" not in bad.output


def test_curve_png_with_and_without_a_poisoned_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from fedplane.lab.loop.learning import plot

    result = {"metric": "gpu_alloc_heldout", "cold_start": "random: ...", "first_metric": 0.80, "best_heuristic_metric": 0.92,
              "central_metric": 0.921, "detail": {"best_heuristic": "fgd"},
              "rounds": [{"round": r, "metric": 0.9 + r / 1000} for r in (1, 2, 3)]}
    for name, extra in (("demo.png", {}), ("bench.png", {"poisoned": {"first_metric": 0.8, "metrics": [0.89, 0.9]}})):
        png = plot({**result, **extra}, tmp_path / name)
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000


def test_judging_and_report_seeds_are_disjoint_and_figures_are_measured_on_report_seeds(versions: list[Path]) -> None:
    """The loop promotes on the judging seeds; every figure it reports (each round's fleet, the final one, the drill's
    canary fleet) is measured after the loop on the report seeds, so the best-measured candidate's own figure is never
    what is reported."""
    shown = fleetmetric.HeldOut.load(None, nodes=16, seeds=2)
    judge = shown.judging()
    assert shown.seeds == (0, 1) and not set(judge.seeds) & set(shown.seeds)
    assert (judge.nodes, judge.pods) == (shown.nodes, shown.pods), "same held-out pods and nodes"

    class Config:
        canary, canary_weight, fleet = 1, 0.2, [None] * 4

    cold, better = versions
    measured = loopserver.measure(shown, {0: cold, 1: better, 2: better}, {3: (better, cold)}, Config())  # type: ignore[arg-type]
    assert measured["seeds"] == [0, 1]
    assert measured["metrics"] == [shown.model(cold), shown.model(better), shown.model(better)]
    assert measured["metrics"][-1] != judge.model(better), "the final figure is not the judging measurement"
    assert measured["drill_canary_metric"] == {"3": shown.mixed(better, cold, 0.25, 0.2)}


def test_the_bench_reads_every_round_metric_from_the_report_seeds() -> None:
    from fedplane.lab.loop.learning import event, reported, rounds_of

    lines = [{"event": "start", "judge_metric": 0.5},
             {"round": 1, "judge_metric": 0.91, "canary": "promoted"},
             {"round": 2, "judge_metric": 0.91, "canary": "rolled_back", "drill": True, "canary_metric": 0.90},
             {"event": "measured", "metrics": [0.49, 0.89, 0.89], "drill_canary_metric": {"2": 0.88}},
             {"event": "end", "first_metric": 0.49, "final_metric": 0.89}]
    assert [r["metric"] for r in rounds_of(lines)] == [0.89]
    assert reported(lines)[1]["report_canary_metric"] == 0.88
    assert event(lines, "end")["final_metric"] == rounds_of(lines)[-1]["metric"]
