"""Judge a policy on the twin: the openb protocol on benchmark seeds and a replay of the held-out DLRM window.

The DLRM window replay starts at the hold-out cut with the instances alive then already placed
(before the clock starts, so they are not counted as waits; one first-fit-decreasing placement
for every profile, so all start from the same state), then replays every arrival and departure
of the window. Times are shifted so the window starts at
zero, which keeps the replay's utilisation samples inside the window.

The window is saturated: many arrivals are never placed. A never-placed pod counts as waiting
until it leaves or the window ends (leaving it out would reward a policy for starving hard
pods), pods no empty node could host are reported apart as ``infeasible``, and a policy is
judged on never-placed feasible arrivals and the mean wait of all feasible arrivals. A fluid
replay (the fleet pooled into one bin per resource) reads beside it: what demand against
capacity over time allows without node boundaries.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable, Placement
from fedcore.pods import Pod
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.framework import Profile, QueueSortPlugin, Scheduler
from fedcore.stats import percentile
from fedcore.traces import dlrm, locate, openb
from fedcore.traces.dlrm import Instance
from fedcore.twin import bounds, submission
from fedcore.twin.replay import ARRIVE, Replay
from federated import splits

HEURISTICS = ("random", "dotprod", "bestfit", "kube-default", "fgd")
"""The built-in heuristics the learned policy is compared with (the best of them is the bar)."""

DLRM_FLEET_SCALE = 4
"""The DLRM trace has no node list: it replays on the openb fleet replicated 4 times (6,092 nodes)."""


@dataclass(frozen=True, slots=True)
class Traces:
    """The real traces a policy is trained and judged on (openb nodes and pods, DLRM on the openb fleet x4)."""

    nodes: list[Node]
    pods: list[Pod]
    dlrm: list[Instance]
    dlrm_nodes: list[Node]
    cpu050: list[Pod]
    """openb's CPU-heavy pod list (empty when the traces folder lacks it): a mix training never sees."""

    @classmethod
    def load(cls, folder: str | None = None) -> Traces:
        nodes_csv = locate.trace_file(None, locate.OPENB_NODES, folder)
        cpu050 = locate.trace_file(None, locate.OPENB_CPU050, folder)
        return cls(
            openb.load_nodes(nodes_csv),
            openb.load_pods(locate.trace_file(None, locate.OPENB_PODS, folder)),
            dlrm.load(locate.trace_file(None, locate.DLRM, folder)),
            openb.load_nodes(nodes_csv, scale=DLRM_FLEET_SCALE),
            openb.load_pods(cpu050) if cpu050.exists() else [],
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


def best_heuristic_alloc(nodes: Sequence[Node], pods: Sequence[Pod], seeds: Sequence[int]) -> tuple[str, float]:
    """The heuristic with the highest mean openb allocation on ``pods`` over ``seeds``, and that mean."""
    means = {name: mean(openb_alloc(nodes, pods, name, seeds)) for name in HEURISTICS}
    best = max(HEURISTICS, key=means.__getitem__)
    return best, means[best]


@dataclass(frozen=True, slots=True)
class WindowResult:
    profile: str
    arrivals: int
    preplaced: int
    infeasible: int
    """Window arrivals no empty node of the fleet could host (left out of the figures below)."""
    never_placed: int
    """Feasible window arrivals never placed before they left or the window ended."""
    preplaced_never_placed: int
    """Feasible pods running at the window's start that this profile's placement of them left waiting until they
    left or the window ended. Not in the figures (they arrived before the window), but beside them: they hold no
    capacity, so a profile that packs them worse leaves the window's arrivals more room."""
    wait_s_mean: float
    wait_s_p50: float
    wait_s_p90: float
    wait_s_p99: float
    cpu_alloc_ratio_mean: float
    gpu_alloc_ratio_mean: float
    jain_fairness: float
    queue: str = "oldest-first"
    """The pending-queue order the replay retried waiting pods in (the profile's own unless a variant overrode it)."""
    never_placed_by_shape: dict[str, int] = field(default_factory=dict)
    """Never-placed feasible arrivals per large shape (48 cores or more, "96c/480Gi"), so starving big pods shows."""


LARGE_CPU_MILLI = 48_000
"""Shapes of this much CPU or more get their own never-placed count."""


def shape_label(pod: Pod) -> str:
    gpu = f"/{pod.gpu.count}gpu" if pod.gpu.count else ""
    return f"{pod.cpu_milli / 1000:g}c/{pod.memory_mib // 1024}Gi{gpu}"


def place_running(table: NodeTable, pods: Sequence[Pod]) -> dict[int, Placement]:
    """One placement of the pods running at a window's start, the same for every profile: first-fit decreasing.

    The trace says these pods were running, not where: the twin rebuilds a start state with the
    offline packer (largest CPU, then memory, then GPU first, each onto the first node in fleet
    order the hard filters accept). Letting each profile place them instead made the start depend
    on the profile under test, and a profile that left more of them out held less and gave the
    window's arrivals more room. At the hold-out cut this order leaves 148 of 8,690 out (GPU first:
    543; the shipped learned policy placing them itself: 159, BestFit 723, kube-default 1,233).
    Returns the placement of each pod placed, by index.
    """
    scheduler = Scheduler(Profile("running-at-start", default_filters(), []), table)
    order = sorted(range(len(pods)), key=lambda k: (-pods[k].cpu_milli, -pods[k].memory_mib, -pods[k].gpu.total_milli, k))
    out = {}
    for k in order:
        rows = np.flatnonzero(scheduler.feasible(pods[k]))
        if rows.size:
            out[k] = table.allocate(pods[k], int(rows[0]))
    return out


class WindowReplay(Replay):
    """A replay that records each pod's wait by reference, so pre-placed pods can be left out.

    With ``running`` > 0 the first ``running`` instances (those alive at the window's start) are
    placed before the clock starts by :func:`place_running`, the same for every profile, and
    only the ones it could not place arrive (at 0) for the profile under test. Profiles learn
    typical pod shapes (FGD's types, the learned policy's slots) from ``workload``: for a window,
    the pods running at its start, which is what a scheduler sees then; the window's own arrivals
    are the future.
    """

    def __init__(self, *args: object, running: int = 0, queue: QueueSortPlugin | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if queue is not None:
            self.scheduler.profile.queue = queue  # a labelled comparison variant: this profile's scores, another order
        self.wait_of: dict[int, float] = {}
        self.placed.update(place_running(self.table, [i.pod for i in self.instances[:running]]))
        self.wait_of.update((ref, 0.0) for ref in self.placed)

    def push(self, at: float, kind: int, ref: int) -> None:
        if kind == ARRIVE and ref in self.placed:
            return  # placed at the start, before the clock
        super().push(at, kind, ref)

    def try_place(self, ref: int, now: float, explain: bool = True) -> bool:
        since = self.pending.since.get(ref, now)
        placed = super().try_place(ref, now, explain)
        if placed:
            self.wait_of.setdefault(ref, now - since)
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


def infeasible(nodes: Sequence[Node], pods: Sequence[Pod]) -> np.ndarray:
    """Per pod: True when no empty node passes the hard filters (no policy could ever place it)."""
    table = NodeTable(nodes)
    scheduler = Scheduler(Profile("feasibility", default_filters(), []), table)
    return np.array([not scheduler.feasible(pod).any() for pod in pods], dtype=bool)


@dataclass(frozen=True, slots=True)
class Window:
    """The held-out DLRM window, shifted to start at 0, and what every profile's replay is judged against."""

    instances: list[Instance]
    preplaced: int
    end: float
    infeasible: np.ndarray

    @classmethod
    def of(cls, nodes: Sequence[Node], instances: Sequence[Instance], start: float | None = None, end: float | None = None) -> Window:
        """The window from ``start`` (default: the hold-out cut) to ``end`` (default: the end of ``instances``).

        With ``end``, only instances created before it take part and departures after it are dropped
        (the window stops there): a training window cut from inside the trace sees nothing later.
        """
        begin = splits.dlrm_cut(instances) if start is None else start
        if end is not None:
            instances = [replace(i, deleted=None if i.deleted is None or i.deleted > end else i.deleted) for i in instances if i.created < end]
        shifted, preplaced = window(instances, begin)
        last = end - begin if end is not None else max((i.deleted or i.created) for i in shifted)
        return cls(shifted, preplaced, last, infeasible(nodes, [i.pod for i in shifted]))

    def never_by_shape(self, placed_wait: dict[int, float]) -> dict[str, int]:
        """Never-placed feasible window arrivals per large shape (:data:`LARGE_CPU_MILLI` and up), largest count first."""
        counts: dict[str, int] = {}
        for ref in range(self.preplaced, len(self.instances)):
            pod = self.instances[ref].pod
            if not self.infeasible[ref] and ref not in placed_wait and pod.cpu_milli >= LARGE_CPU_MILLI:
                counts[shape_label(pod)] = counts.get(shape_label(pod), 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def judge(self, placed_wait: dict[int, float]) -> tuple[int, list[float]]:
        """Never-placed count and the wait of every feasible window arrival (unplaced ones until they leave or the end)."""
        never = 0
        waits = []
        for ref in range(self.preplaced, len(self.instances)):
            if self.infeasible[ref]:
                continue
            if ref in placed_wait:
                waits.append(placed_wait[ref])
                continue
            inst = self.instances[ref]
            never += 1
            waits.append(min(self.end, inst.deleted if inst.deleted is not None else self.end) - inst.created)
        return never, waits

    def fluid(self, nodes: Sequence[Node]) -> bounds.FluidResult:
        """The pooled-fleet replay of the window's feasible instances (its waits over feasible arrivals)."""
        keep = [i for k, i in enumerate(self.instances) if not self.infeasible[k]]
        first = self.preplaced - int(self.infeasible[: self.preplaced].sum())
        return bounds.fluid_replay(nodes, keep, first, self.end)


def dlrm_holdout(
    nodes: Sequence[Node], instances: Sequence[Instance], profile: str, seed: int = 0, held: Window | None = None, queue: QueueSortPlugin | None = None,
) -> WindowResult:
    """Replay the held-out DLRM window (last 20% of the trace; or ``held``, any window) with ``profile``; figures count window arrivals only.

    ``queue`` replaces the profile's own pending-queue order (a labelled comparison variant).
    """
    held = held or Window.of(nodes, instances)
    replay = WindowReplay(
        nodes, held.instances, profile, seed, running=held.preplaced, queue=queue, workload=[i.pod for i in held.instances[: held.preplaced]] or None,
    )
    result = replay.run()
    never, waits = held.judge(replay.wait_of)
    before = sum(1 for ref in range(held.preplaced) if ref not in replay.wait_of and not held.infeasible[ref])
    return WindowResult(
        profile, len(held.instances) - held.preplaced, held.preplaced, int(held.infeasible[held.preplaced:].sum()), never, before,
        float(np.mean(waits)) if waits else 0.0, percentile(waits, 50), percentile(waits, 90), percentile(waits, 99),
        result.cpu_alloc_ratio_mean, result.gpu_alloc_ratio_mean, result.jain_fairness,
        replay.scheduler.profile.queue.name, held.never_by_shape(replay.wait_of),
    )


def mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0
