"""Per cluster, which scorer family its agents place with: when to run the lookahead selection, and what to adopt.

The learned policy is not best on every workload and fleet (docs/policy-experiments.md, "workload-level
lookahead"): replaying the cluster's workload on its fleet in the twin under each candidate family (the
learned policy, FGD, BestFit) and keeping learned unless a heuristic beats it removes the large shortfalls.
The selection itself is ``federated.runtime.lookahead.choose``; it costs tens of CPU-seconds on a full
openb fleet, so it never runs on the reconcile tick: :mod:`controlplane.selectworker` runs it in one
low-priority child process. This sans-IO core (clock injected) decides:

* what a selection is for: the cluster's adopted workload context (its quantized profile, CPU pressure and
  largest node), which :class:`controlplane.contextbook.ContextBook` moves only when the workload moved
  materially and at most once per stabilization window; a cluster without a profile (no GPU workload) has
  nothing to select for and places with learned;
* when: a cluster whose adopted context has not been selected for yet, at most one selection in flight
  across the plane, and at most one start per cluster per ``Timings.scorer_selection_s`` (the cluster
  waiting longest goes first);
* what to adopt: a finished selection's family, into the context under a new version (every agent of the
  cluster switches at that version); a failure or a timeout keeps the previous family.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fedapi.workloadcontext import SCORERS, WorkloadContext
from fedcore.nodes import Node
from fedcore.pods import Pod

Key = tuple[object, ...]
"""What a selection is for: (profile, CPU pressure, largest node CPU, largest node GPUs) of an adopted context."""


def selection_key(context: WorkloadContext) -> Key | None:
    """The adopted workload a selection would be for; None without a profile (nothing to select for)."""
    if context.profile is None:
        return None
    return (context.profile, context.cpu_pressure, context.max_cpu_milli, context.max_gpus)


@dataclass(frozen=True, slots=True)
class Job:
    """One selection: the replicas placed on the cluster and the nodes its agents report, when it was started."""

    cluster: str
    key: Key
    workload: tuple[Pod, ...]
    fleet: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A selection's result: ``scorer`` empty when it failed (``error`` says why) or timed out."""

    cluster: str
    key: Key
    scorer: str = ""
    means: Mapping[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    error: str = ""

    def __post_init__(self) -> None:
        if self.scorer and self.scorer not in SCORERS:
            object.__setattr__(self, "error", f"the selection returned an unknown scorer family {self.scorer!r:.40}")
            object.__setattr__(self, "scorer", "")

    @property
    def ok(self) -> bool:
        return bool(self.scorer)


class Selector:
    """When to start a selection; ``every_s`` bounds the starts per cluster, ``enabled`` False starts none."""

    def __init__(self, every_s: float, enabled: bool = True) -> None:
        self.every_s = every_s
        self.enabled = enabled
        self.running: str | None = None
        """The cluster a selection is in flight for (at most one across the plane)."""
        self._selected: dict[str, Key] = {}
        """Per cluster, the context last selected for (a failed selection counts: it is not retried until it moves)."""
        self._started: dict[str, float] = {}

    def due(self, contexts: Mapping[str, WorkloadContext], now: float) -> tuple[str, Key] | None:
        """The cluster to select for now, and what for; None while one runs or none needs one yet."""
        if not self.enabled or self.running is not None:
            return None
        waiting = []
        for cluster, context in contexts.items():
            key = selection_key(context)
            if key is None or self._selected.get(cluster) == key:
                continue
            last = self._started.get(cluster, -math.inf)
            if now - last >= self.every_s:
                waiting.append((last, cluster, key))
        if not waiting:
            return None
        _, cluster, key = min(waiting, key=lambda w: (w[0], w[1]))
        return cluster, key

    def start(self, cluster: str, key: Key, now: float) -> None:
        self.running = cluster
        self._selected[cluster], self._started[cluster] = key, now

    def finish(self, outcome: Outcome) -> None:
        """The selection in flight ended (its family, if any, is the caller's to adopt)."""
        if self.running == outcome.cluster:
            self.running = None

    def forget(self, cluster: str) -> None:
        """A selection that could not start (no pods or nodes after all): free the slot and let it be tried again."""
        if self.running == cluster:
            self.running = None
        self._selected.pop(cluster, None)
