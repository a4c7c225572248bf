"""Service replicas' settings (packing, slot reservation) and their honest choice on DLRM training windows.

The learned model scores a service replica (pod feature ``replicated``: DLRM's long-running
instances; openb's pods are not replicas) with two terms on top of its imitation: ``pack`` points
per unit of the packing column (``bestfit``) and minus ``reserve`` points per unit of
``slots_lost`` (the share of the commonest CPU-only shapes a node stops hosting). They live in the
replicated row of the model's wide (bilinear) part, which both ONNX files keep in fp32, so
:func:`retune` re-sets them on an exported artifact without retraining and without changing
any score of a pod that is not a replica.

Choosing them on the held-out window would make its figures a training result. The training
part of the DLRM trace holds several windows of the held-out window's length that are as
saturated (fleet x4, the pods running at each start placed first; BestFit leaves 500-1,070
arrivals unplaced in each): :func:`training_windows` cuts them, and a point is judged by
never-placed arrivals summed over them, then by the mean of their mean waits.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fedcore.nodes import Node
from fedcore.traces.dlrm import Instance
from federated import evaluating, splits
from federated.runtime import artifacts
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

Point = tuple[float, float]
"""(pack, reserve) in score points."""

AS_TRAINED: Point = (0.0, 0.0)
GRID: tuple[Point, ...] = ((0.0, 0.0), (50.0, 0.0), (100.0, 0.0), (0.0, 150.0), (25.0, 150.0), (50.0, 150.0), (100.0, 150.0), (200.0, 150.0))
"""Packing x reservation; (0, 0) keeps the imitation as it was. A reservation of 150 points already outweighs
every other term (300, 450 and 900 judged exactly as 150 at every packing tried: docs/policy-experiments.md)."""
WINDOW_STARTS = (1.0, 1.5, 2.0, 2.5, 3.0)
"""Training windows start this many held-out lengths before the cut (so each ends at or before it)."""


def running_share(nodes: Sequence[Node], instances: Sequence[Instance], at: float) -> float:
    """What the pods running at ``at`` ask of the fleet: the larger of their CPU and memory shares of its capacity."""
    alive = [i.pod for i in instances if i.created < at and (i.deleted is None or i.deleted > at)]
    cpu = sum(p.cpu_milli for p in alive) / max(1, sum(n.cpu_milli for n in nodes))
    mem = sum(p.memory_mib for p in alive) / max(1, sum(n.memory_mib for n in nodes))
    return max(cpu, mem)


def thinned(nodes: Sequence[Node], keep: float) -> list[Node]:
    """A share ``keep`` (0-1] of each kind of node (CPU, memory, GPUs, GPU model), taken with an even stride in list order."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    seen: Counter[tuple[int, int, int, str]] = Counter()
    out = []
    for node in nodes:
        kind = (node.cpu_milli, node.memory_mib, node.gpus, node.gpu_model)
        k = seen[kind]
        seen[kind] += 1
        if int((k + 1) * keep) > int(k * keep):
            out.append(node)
    return out


def training_windows(nodes: Sequence[Node], instances: Sequence[Instance], starts: Sequence[float] = WINDOW_STARTS) -> list[tuple[list[Node], evaluating.Window]]:
    """Windows of the held-out window's length inside the DLRM training part, each on a fleet as full as the cut's.

    Only instances created before the cut take part. The trace grows, so the pods running at an
    earlier start fill the fleet less than those running at the cut (72-78% against 87% of
    memory): each window's fleet keeps the share of ``nodes`` at which its running pods ask as
    much as the cut's do of all of them. That share is known at the cut (the pods running then
    were all created before it); nothing of the held-out window's arrivals is used.
    """
    cut = splits.dlrm_cut(instances)
    length = max(i.deleted or i.created for i in instances) - cut
    train = splits.dlrm_train(instances)
    target = running_share(nodes, train, cut)
    out = []
    for k in starts:
        start = cut - k * length
        if start < 0:
            raise ValueError(f"a training window starting {k} held-out lengths before the cut would start before the trace")
        fleet = thinned(nodes, min(1.0, running_share(nodes, train, start) / target))
        out.append((fleet, evaluating.Window.of(fleet, train, start, start + length)))
    return out


def judge(results: Sequence[evaluating.WindowResult]) -> tuple[int, float]:
    """Never-placed arrivals over all windows, then the mean of the windows' mean waits (lower is better)."""
    return sum(r.never_placed for r in results), float(np.mean([r.wait_s_mean for r in results]))


def search(points: Sequence[Point], replay: Callable[[Point], Sequence[evaluating.WindowResult]], on_point: Callable[[], None] | None = None) -> tuple[Point, dict[str, Any]]:
    """Judge each point on the training windows; the best, and the record of every point (for the manifest)."""
    judged = {}
    for point in points:
        judged[point] = judge(replay(point))
        if on_point is not None:
            on_point()
    best = min(points, key=lambda k: (*judged[k], k != AS_TRAINED))
    record = {
        "windows": f"DLRM training windows of the held-out length starting {', '.join(f'{k:g}' for k in WINDOW_STARTS)} lengths before the cut, fleets thinned to the cut's running load, one start placement for every profile",
        "dlrm_training_windows": {f"pack={p:g},reserve={r:g}": {"never_placed": n, "wait_s_mean": w} for (p, r), (n, w) in judged.items()},
        "kept": {"pack": best[0], "reserve": best[1]},
    }
    return best, record


def _wide_rows(proto: onnx.ModelProto) -> onnx.TensorProto:
    """The initializer holding the pod-feature rows of the wide part (one per pod feature, one column per node feature)."""
    shape = [len(POD_FEATURES), len(NODE_FEATURES)]
    found = [t for t in proto.graph.initializer if list(t.dims) == shape and t.data_type == onnx.TensorProto.FLOAT]
    if len(found) != 1:
        raise artifacts.ArtifactError(f"expected one fp32 {shape[0]}x{shape[1]} wide initializer, found {len(found)}")
    return found[0]


def kept(manifest: dict[str, Any]) -> Point:
    """The (pack, reserve) an artifact's manifest says its replicated row carries."""
    got = manifest.get("training", {}).get("service_search", {}).get("kept", {})
    return float(got.get("pack", 0.0)), float(got.get("reserve", 0.0))


def retune(model_dir: Path, out: Path, point: Point, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy the artifact at ``model_dir`` to ``out`` with its service terms set to ``point``; returns the new manifest.

    Only the replicated row's ``bestfit`` and ``slots_lost`` weights move (by the difference from
    the terms the manifest records), in both files; ``record`` replaces the manifest's
    ``service_search`` (default: the old one with ``kept`` updated).
    """
    artifact = artifacts.load(model_dir)
    old = kept(artifact.manifest)
    out.mkdir(parents=True, exist_ok=True)
    row = POD_FEATURES.index("replicated")
    delta = {NODE_FEATURES.index("bestfit"): point[0] - old[0], NODE_FEATURES.index("slots_lost"): old[1] - point[1]}
    for name in (artifacts.FP32, artifacts.INT8):
        proto = onnx.load(str(model_dir / name))
        tensor = _wide_rows(proto)
        wide = numpy_helper.to_array(tensor).copy()
        for column, move in delta.items():
            wide[row, column] = np.float32(wide[row, column] + move)
        tensor.CopyFrom(numpy_helper.from_array(wide, tensor.name))
        onnx.save(proto, str(out / name))
    training = dict(artifact.manifest.get("training", {}))
    search_record = dict(record if record is not None else training.get("service_search", {}))
    search_record["kept"] = {"pack": point[0], "reserve": point[1]}
    training["service_search"] = search_record
    if isinstance(training.get("kept"), str):
        rest = re.sub(r", service pack [^,]+, reserve [^,]+$", "", training["kept"])
        training["kept"] = rest + (f", service pack {point[0]:g}, reserve {point[1]:g}" if point != AS_TRAINED else "")
    if model_dir.resolve() != out.resolve():
        for extra in model_dir.iterdir():
            if extra.name not in (artifacts.FP32, artifacts.INT8, artifacts.MANIFEST) and extra.is_file():
                shutil.copy2(extra, out / extra.name)
    return artifacts.write_manifest(out, artifact.types, training)


def replay_point(model_dir: Path, windows: Sequence[tuple[Sequence[Node], evaluating.Window]], work: Path) -> Callable[[Point], list[evaluating.WindowResult]]:
    """A ``replay`` for :func:`search`: the artifact retuned to the point, int8 through the real runtime, on each window."""

    def replay(point: Point) -> list[evaluating.WindowResult]:
        retune(model_dir, work, point)
        with evaluating.model_override(work, "int8"):
            return [evaluating.dlrm_holdout(fleet, (), "learned", held=w) for fleet, w in windows]

    return replay
