"""The rounds service's own start, runs and stop are the plane's decisions, beside the model changes it decides."""

from __future__ import annotations

from pathlib import Path

from controlplane.learninglink import noter
from controlplane.registry import DecisionRecord
from federated.flower import roundservice, shelf
from federated.flower.shelf import ModelShelf


class Plane:
    def __init__(self) -> None:
        self.recorded: list[DecisionRecord] = []

    def clock(self) -> float:
        return 1.0

    def _record(self, d: DecisionRecord) -> None:
        self.recorded.append(d)


def test_each_event_the_service_notes_is_one_decision_once_and_none_from_before_the_plane_started(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    shelf.note(tmp_path, "rounds-run", "run-0", "an earlier plane's business")
    plane = Plane()
    models = ModelShelf(tmp_path, on_note=noter(plane))  # type: ignore[arg-type]
    shelf.note(tmp_path, "rounds-start", "10.0.0.1:9092", "SuperLink at 10.0.0.1:9092 (TLS, trainers c0, c1)")
    with (tmp_path / shelf.EVENTS).open("ab") as torn:
        torn.write(b'{"kind": "rounds-run", "subject": "run-1", "why": "run 1 fin')  # the service is mid-write
    models.offer("c0", "n0")  # the plane looks at its models directory (each agent's model poll)
    assert [(d.kind, d.target, d.reasons) for d in plane.recorded] == [
        ("rounds-start", "10.0.0.1:9092", ("SuperLink at 10.0.0.1:9092 (TLS, trainers c0, c1)",))]
    with (tmp_path / shelf.EVENTS).open("ab") as rest:
        rest.write(b'ished"}\n')
    shelf.note(tmp_path, "rounds-stop", "10.0.0.1:9092", "after 1 run(s): stopped")
    models.offer("c0", "n0")
    models.offer("c0", "n0")
    assert [(d.kind, d.target) for d in plane.recorded] == [
        ("rounds-start", "10.0.0.1:9092"), ("rounds-run", "run-1"), ("rounds-stop", "10.0.0.1:9092")]


def test_the_service_notes_its_events_in_the_plane_s_models_directory(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    service = roundservice.Service(tmp_path, {"shelf-dir": str(models)}, 3, 0.0, "127.0.0.1", 60.0)
    service.note("rounds-run", "run-1", roundservice.run_summary(1, "finished", [
        {"round": 1, "canary": "promoted", "model_version": "v000002"}, {"round": 2, "canary": "rolled back", "model_version": "v000002"}]))
    plane = Plane()
    watching = ModelShelf(models, on_note=noter(plane))  # type: ignore[arg-type]
    service.note("rounds-stop", "127.0.0.1:9092", "after 1 run(s): done")
    watching.offer("c0", "n0")
    assert [(d.kind, d.target) for d in plane.recorded] == [("rounds-stop", "127.0.0.1:9092")]
    assert roundservice.run_summary(1, "finished", [{"round": 1, "canary": "promoted", "model_version": "v000002"}]) == (
        "run 1 finished: round 1 promoted; fleet on v000002")
    (models / shelf.EVENTS).unlink()
    service.overrides["shelf-dir"] = str(tmp_path / "gone")
    service.note("rounds-stop", "x", "y")  # no models directory: the service goes on
