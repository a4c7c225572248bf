"""Judge a policy on the twin: the openb protocol on benchmark seeds and a replay of the held-out DLRM window.

The DLRM window replay starts at the hold-out cut with the instances alive then already placed
(by the profile under test, before the clock starts, so they are not counted as waits), then
replays every arrival and departure of the window. Times are shifted so the window starts at
zero, which keeps the replay's utilisation samples inside the window.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.stats import percentile
from fedcore.traces import dlrm, locate, openb
from fedcore.traces.dlrm import Instance
from fedcore.twin import submission
from fedcore.twin.replay import Replay
from federated import splits

DLRM_FLEET_SCALE = 4
"""The DLRM trace has no node list: it replays on the openb fleet replicated 4 times (6,092 nodes)."""


@dataclass(frozen=True, slots=True)
class Traces:
    """The real traces a policy is trained and judged on (openb nodes and pods, DLRM on the openb fleet x4)."""

    nodes: list[Node]
    pods: list[Pod]
    dlrm: list[Instance]
    dlrm_nodes: list[Node]

    @classmethod
    def load(cls, folder: str | None = None) -> Traces:
        nodes_csv = locate.trace_file(None, locate.OPENB_NODES, folder)
        return cls(
            openb.load_nodes(nodes_csv),
            openb.load_pods(locate.trace_file(None, locate.OPENB_PODS, folder)),
            dlrm.load(locate.trace_file(None, locate.DLRM, folder)),
            openb.load_nodes(nodes_csv, scale=DLRM_FLEET_SCALE),
        )


@contextlib.contextmanager
def model_override(model_dir: Path | None, precision: str = "int8") -> Iterator[None]:
    """Point the ``learned`` profile at ``model_dir`` for the duration (its documented env overrides)."""
    saved = {k: os.environ.get(k) for k in ("FEDPLANE_MODEL", "FEDPLANE_MODEL_PRECISION")}
    os.environ["FEDPLANE_MODEL"] = str(model_dir) if model_dir is not None else "none"
    os.environ["FEDPLANE_MODEL_PRECISION"] = precision
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def openb_alloc(
    nodes: Sequence[Node], pods: Sequence[Pod], profile: str, seeds: Sequence[int], on_run: Callable[[], None] | None = None,
) -> list[float]:
    """GPU allocation ratio at 100% arrived load for each seed."""
    out = []
    for seed in seeds:
        out.append(submission.run(nodes, pods, profile, seed).gpu_alloc_ratio)
        if on_run is not None:
            on_run()
    return out


@dataclass(frozen=True, slots=True)
class WindowResult:
    profile: str
    arrivals: int
    preplaced: int
    wait_s_p50: float
    wait_s_p99: float
    unscheduled: int
    cpu_alloc_ratio_mean: float
    gpu_alloc_ratio_mean: float
    jain_fairness: float


class WindowReplay(Replay):
    """A replay that records each pod's wait by reference, so pre-placed pods can be left out."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.wait_of: dict[int, float] = {}

    def try_place(self, ref: int, now: float, explain: bool = True) -> bool:
        since = self.pending.since.get(ref, now)
        placed = super().try_place(ref, now, explain)
        if placed:
            self.wait_of[ref] = now - since
        return placed


def window(instances: Sequence[Instance], start: float) -> tuple[list[Instance], int]:
    """Instances alive at ``start`` (first, arriving at 0) then those created after, times shifted by ``start``."""
    alive = [i for i in instances if i.created < start and (i.deleted is None or i.deleted > start)]
    later = [i for i in instances if i.created >= start]
    shift = [
        replace(i, created=max(0.0, i.created - start), deleted=None if i.deleted is None else i.deleted - start)
        for i in alive + later
    ]
    return shift, len(alive)


def dlrm_holdout(nodes: Sequence[Node], instances: Sequence[Instance], profile: str, seed: int = 0) -> WindowResult:
    """Replay the held-out DLRM window (last 20% of the trace) with ``profile``; waits count window arrivals only."""
    shifted, preplaced = window(instances, splits.dlrm_cut(instances))
    replay = WindowReplay(nodes, shifted, profile, seed)
    result = replay.run()
    waits = [w for ref, w in replay.wait_of.items() if ref >= preplaced]
    return WindowResult(
        profile, len(shifted) - preplaced, preplaced, percentile(waits, 50), percentile(waits, 99), result.unscheduled,
        result.cpu_alloc_ratio_mean, result.gpu_alloc_ratio_mean, result.jain_fairness,
    )


def mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0
