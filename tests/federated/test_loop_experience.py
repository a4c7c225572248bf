"""The experience format, agent to trainer: an agent's row becomes the trainer's batch bit for bit; old rows are refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeagent.clusters import BindOutcome, BindResult, Phase, PodUpdate
from edgeagent.config import PlacementSection
from edgeagent.effects import Experience
from edgeagent.ledger import Ledger
from edgeagent.placing import Placer
from fedcore.framelog import FrameLog
from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from federated.flower import learner
from federated.runtime import experience
from federated.runtime.experience import ExperienceFormatError, ExperienceLog, Row
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

NODE = Node("edge-0", 96000, 393216, gpus=8, gpu_model="G2")
PODS = [Pod("p0", 8000, 32768, gpu=GpuRequest(1, 500)), Pod("p1", 16000, 65536, gpu=GpuRequest(2, 1000)), Pod("p2", 4000, 8192)]


def _model_dir(tmp_path: Path) -> Path:
    pytest.importorskip("onnxruntime")
    from federated.runtime.scorer import default_model_dir

    shipped = default_model_dir()
    if not (shipped / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    return Path(shutil.copytree(shipped, tmp_path / "models" / "v000001"))


def _rows(placer: Placer, pods: list[Pod]) -> list[Row]:
    """Pending -> claim -> bind for each pod on a lone placer; the experience rows it emitted."""
    rows: list[Row] = []
    t = 0.0
    for pod in pods:
        effects = placer.pod_update(PodUpdate(pod, 1, Phase.PENDING), t)
        effects += placer.tick(t) + placer.tick(t + 0.2)
        effects += placer.bind_done(pod.uid, BindResult(BindOutcome.BOUND, NODE.name, 1), t + 0.3)
        rows += [e.row for e in effects if isinstance(e, Experience)]
        t += 1.0
    return rows


def test_agent_row_becomes_the_trainers_batch_bit_for_bit(tmp_path: Path) -> None:
    from edgeagent.policy import LearnedScorer
    from federated.runtime.scorer import PolicyRuntime

    model = _model_dir(tmp_path)
    placer = Placer(NODE, Ledger(NODE.name, NODE.name, NODE.capacity), LearnedScorer(PolicyRuntime(model)), PlacementSection(), 0.0)
    rows = _rows(placer, PODS)
    assert [r.outcome for r in rows] == ["bound"] * 3 and rows[0].model == placer.scorer.version

    # What the model saw, computed again independently on a fresh table replaying the same placements.
    reference = PolicyRuntime(model)
    table = NodeTable([NODE])
    expected = []
    for pod in PODS:
        pod_x, node_x = reference.inputs(pod, table, np.array([0]))
        expected.append((pod_x[0].copy(), np.array(node_x[0])))
        table.allocate(pod, 0, (reference.features.drops.best_device(pod, table, 0),) if pod.gpu.is_sharing else None)

    log = ExperienceLog(tmp_path / "agent", 1 << 20)
    log.write(rows)
    log.close()
    data = learner.batch(list(experience.read(tmp_path / "agent")))
    assert data.pods.dtype == np.float32 and data.nodes.shape == (3, 1, len(NODE_FEATURES))
    for k, (pod_x, node_x) in enumerate(expected):
        assert data.pods[k].tobytes() == pod_x.tobytes()
        assert data.nodes[k, 0].tobytes() == node_x.tobytes()
    assert np.all((data.target > 0) & (data.target < 100)), "rewards live on the shared 0-100 scale"
    assert rows[0].frag_before >= 0 and 0 < rows[0].gpu_alloc_after <= 1


def test_a_decision_in_flight_keeps_the_model_that_scored_it(tmp_path: Path) -> None:
    """Hot swap between claim and bind: the row names the claiming model and its score, not the new one's."""
    from fedplane.lab.benches.agentbench import write_policy_model
    from edgeagent.policy import ModelWatcher

    pytest.importorskip("onnx")
    first, second = tmp_path / "a", tmp_path / "b"
    assert write_policy_model(first, PODS, seed=1) and write_policy_model(second, PODS, seed=2)
    models = tmp_path / "models"
    shutil.copytree(first / "v0001", models / "v0001")
    watcher = ModelWatcher(models)
    scorer = watcher.scan()
    assert scorer is not None
    placer = Placer(NODE, Ledger(NODE.name, NODE.name, NODE.capacity), scorer, PlacementSection(), 0.0)
    placer.pod_update(PodUpdate(PODS[0], 1, Phase.PENDING), 0.0)
    placer.tick(0.0)
    claimed = placer.pending["p0"]
    old_version, old_score = scorer.version, claimed.score
    shutil.copytree(second / "v0001", models / "v0002")
    swapped = watcher.scan()
    assert swapped is not None and swapped.version != old_version
    placer.set_scorer(swapped)
    effects = placer.tick(0.2) + placer.bind_done("p0", BindResult(BindOutcome.BOUND, NODE.name, 1), 0.3)
    (row,) = [e.row for e in effects if isinstance(e, Experience)]
    assert row.model == old_version and row.score == old_score
    assert "p0" in placer.running, "the decision in flight was not dropped"


def _row(**change: object) -> Row:
    values: dict[str, object] = dict(t=1.0, pod="p", model="m", score=50.0, pod_x=np.zeros(len(POD_FEATURES), np.float32),
                                     node_x=np.ones(len(NODE_FEATURES), np.float32), outcome="bound", wait_s=0.1,
                                     gpu_alloc_after=0.5, frag_before=2000.0, frag_after=1000.0)
    values.update(change)
    return Row(**values)  # type: ignore[arg-type]


def test_old_and_foreign_rows_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    old = FrameLog(tmp_path / experience.CURRENT)
    old.append([{"t": 1.0, "pod": "p", "features": [0.1] * 8, "outcome": "bound"}])  # an edge-v1 row
    old.close()
    with pytest.raises(ExperienceFormatError, match="experience format None.*fedplane-experience/1"):
        list(experience.read(tmp_path))
    encoded = _row().encode()
    for bad, message in (({**encoded, "spec": "fedplane-features/1"}, "feature spec"),
                         ({**encoded, "node_x": b"\0" * 12}, "3 node features"),
                         ({**encoded, "outcome": "won?"}, "outcome"), ([1, 2], "not an experience row")):
        with pytest.raises(ExperienceFormatError, match=message):
            Row.decode(bad, "agent-7")


def test_log_is_bounded_and_a_torn_tail_is_left_to_its_writer(tmp_path: Path) -> None:
    log = ExperienceLog(tmp_path, max_bytes=2000)
    for i in range(40):
        log.write([_row(pod=f"p{i}")])
    log.flush()
    rows = list(experience.read(tmp_path))
    assert rows[-1].pod == "p39" and len(rows) < 40, "rotated: one older file kept"
    assert (tmp_path / experience.OLDER).stat().st_size <= 2000 + 400
    current = tmp_path / experience.CURRENT
    with current.open("ab") as f:
        f.write(b"\x00\x00\x10\x00torn")  # a frame the agent is still writing
    size = current.stat().st_size
    assert [r.pod for r in experience.read(tmp_path)] == [r.pod for r in rows]
    assert current.stat().st_size == size, "the trainer never truncates an agent's log"
    assert [r.pod for r in experience.newest([tmp_path], 3)] == ["p37", "p38", "p39"]
    log.close()


def test_targets_reward_less_fragmentation_on_one_scale() -> None:
    rows = [_row(frag_before=3000.0, frag_after=1000.0), _row(frag_before=1000.0, frag_after=1000.0),
            _row(frag_before=0.0, frag_after=4000.0), _row(outcome="evicted")]
    data = learner.batch(rows)
    assert len(data) == 3, "an eviction repeats its bound row and is not trained on twice"
    assert data.target[0, 0] > 50.0 == data.target[1, 0] > data.target[2, 0] > 0.0
