"""Each cluster's workload context: the workload profile its agents' learned policy scores against.

The policy's features read a workload profile (``PodTypes``: the typical pod shapes FGD's expected
fragmentation is computed against, the common CPU-only slots, the pinned share of GPU request, and
the CPU pressure of the workload on its fleet). The twin builds it from the run's workload and fleet
(``PodTypes.from_pods(workload, fleet=fleet)``); an agent sees one node. So the control plane makes
that same call per cluster and sends the result with every ``AgentAck``:

* the workload is what the registry has placed on the cluster now (each workload's pod template,
  once per replica): the one home of what a cluster is asked to run, so submits, migrations,
  failovers, deletes and a new leader all agree without a second book of arrivals;
* the fleet is the GPU nodes the cluster's agents report (the newest report of every agent that
  ever reported: a silent node still stands, and the value should not move when one report is late).

Sans-IO: :func:`cluster_profiles` is a pure function of those two; :class:`ContextBook` holds per
cluster what agents are sent, and moves it only when the workload moves materially, so all agents
of a cluster score with one stable context rather than one that flickers as replicas come and go
(each move makes every agent rebuild its fragment tables and drop the scores it kept per shape):

* the CPU pressure is rounded (:func:`fedapi.workloadcontext.quantize`) and moves when the computed
  value leaves a band of :data:`HYSTERESIS` around the sent one;
* the profile is quantized (:meth:`fedapi.workloadcontext.Profile.quantized`: the 64 heaviest
  shapes, weights rounded to 0.01 and renormalised, pinned share to 0.001) and moves when more
  than :data:`SPREAD` of the pods changed shape (or the slot shapes, or the pinned share beyond
  :data:`PINNED_BAND`); a placed workload without GPU request has none (agents keep their artifact's);
* after the first, a move is adopted at most once per stabilization window (``Timings.context_stabilization_s``,
  30 s), as the HPA stabilizes its replica count: a workload of a few dozen short pods (``bench agent``:
  10 pods/s living 6 s) reads a new mix every few seconds.

A move adopts the computed context whole under a new version (the clock in ms), which agents report
back (``ListAgents``). The context also carries the fleet's largest node (BestFit's normaliser, a move
of its own) and the scorer family the cluster places with (:mod:`controlplane.selecting` chooses it per
adopted profile, :meth:`ContextBook.choose` adopts it under a new version).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

from controlplane.evidence import AgentReport
from controlplane.registry import Placement, PlacementState
from controlplane.workloads import Workload
from fedapi.workloadcontext import LEARNED, NONE, Profile, WorkloadContext, quantize
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes

HYSTERESIS = 0.015
"""The sent value moves only when the computed pressure is farther than this from it: 1.5 rounding steps, so a
pressure sitting on a rounding boundary (0.995 vs 1.005 as one replica comes and goes) does not flip the agents."""
SPREAD = 0.05
"""The sent profile moves only when more than this share of the pods changed shape (:func:`distance`): five points
of weight, where one replica of a hundred moves one."""
PINNED_BAND = 0.005
"""The pinned share moves the profile beyond this: a quarter of the policy's input ramp (0..0.02)."""


def cluster_fleets(reports: Iterable[AgentReport]) -> dict[str, list[Node]]:
    """Per cluster some agent reported for: the nodes its agents report (as the twin's ``Node`` rows)."""
    fleets: dict[str, list[Node]] = {}
    for r in reports:
        capacity = r.summary.capacity
        fleets.setdefault(r.cluster, []).append(Node(r.node, capacity.cpu_milli, capacity.memory_mib, gpus=capacity.gpu_milli // MILLI))
    return fleets


def largest(fleet: Iterable[Node]) -> tuple[int, int]:
    """(CPU milli, GPU devices) of a fleet's largest node: BestFit's normaliser, which an agent's own row cannot give."""
    nodes = list(fleet)
    return max((n.cpu_milli for n in nodes), default=0), max((n.gpus for n in nodes), default=0)


def placed_pods(cluster: str, workloads: Mapping[str, Workload], placements: Iterable[Placement]) -> list[Pod]:
    """The replicas placed on ``cluster``, one pod each (distinct names): the workload a lookahead selection replays."""
    pods: list[Pod] = []
    for p in placements:
        w = workloads.get(p.workload)
        if w is not None and p.cluster == cluster and p.state is PlacementState.PLACED:
            pods.extend(w.pod(i) for i in range(p.replicas))
    return pods


def cluster_profiles(workloads: Mapping[str, Workload], placements: Iterable[Placement],
                     reports: Iterable[AgentReport]) -> dict[str, PodTypes | None]:
    """Per cluster some agent reported for: ``PodTypes.from_pods`` of its placed workloads on the nodes its agents
    report (None: nothing placed). Stale placements (replicas failed away from a cluster, removed once it answers)
    are not its workload."""
    fleets = cluster_fleets(reports)
    pods: dict[str, list[Pod]] = {cluster: [] for cluster in fleets}
    templates: dict[str, Pod] = {}
    for p in placements:
        w = workloads.get(p.workload)
        if w is not None and p.cluster in pods and p.state is PlacementState.PLACED:
            pod = templates.get(w.name) or templates.setdefault(w.name, w.pod(0))
            pods[p.cluster].extend([pod] * p.replicas)  # one Pod object per workload, referenced once per replica
    return {cluster: PodTypes.from_pods(pods[cluster], fleet=fleet) if pods[cluster] else None for cluster, fleet in fleets.items()}


def distance(a: Profile | None, b: Profile | None) -> float:
    """How far apart two profiles are: the share of pods whose shape differs (total variation over the shape weights);
    1 between a profile and none, and a change of slot shapes or of the pinned share beyond :data:`PINNED_BAND`
    counts as 1 (every pod scores differently)."""
    if a is None or b is None:
        return 0.0 if a is b else 1.0
    if a.slots != b.slots or abs(a.pinned - b.pinned) > PINNED_BAND:
        return 1.0
    weights = {s[:3]: s[3] for s in a.shapes}
    for *shape, w in b.shapes:
        weights[tuple(shape)] = weights.get(tuple(shape), 0.0) - w
    return 0.5 * math.fsum(abs(w) for w in weights.values())


class ContextBook:
    """Per cluster, the context its agents are sent; ``now`` (seconds) versions a value when it is adopted.

    Once a cluster has one, a new context is adopted only when it moved materially — the CPU pressure beyond
    ``hysteresis``, or the profile by more than ``spread`` (:func:`distance`) — and at least ``stabilization_s``
    after the last adoption (a computed value that settles back meanwhile adopts nothing)."""

    def __init__(self, hysteresis: float = HYSTERESIS, spread: float = SPREAD, stabilization_s: float = 0.0) -> None:
        self.hysteresis = hysteresis
        self.spread = spread
        self.stabilization_s = stabilization_s
        self._sent: dict[str, WorkloadContext] = {}
        self._adopted: dict[str, float] = {}

    def sent(self) -> Mapping[str, WorkloadContext]:
        """Every cluster's context (those a value was computed for)."""
        return self._sent

    def get(self, cluster: str) -> WorkloadContext:
        """What ``cluster``'s agents are sent (:data:`~fedapi.workloadcontext.NONE` until a value was computed)."""
        return self._sent.get(cluster, NONE)

    def update(self, cluster: str, types: PodTypes | None, now: float, spec: tuple[int, int] = (0, 0)) -> WorkloadContext:
        """Take a computed profile (None: no workload placed, CPU pressure 0 and the artifact's shapes) and the fleet's
        largest node (:func:`largest`); returns what is sent from now on. The scorer family stays as chosen while there
        is a profile to have chosen it for; without one it is learned."""
        sent = self._sent.get(cluster, NONE)
        pressure = types.cpu_pressure if types is not None else 0.0
        profile = Profile.quantized(types) if types is not None else None
        if sent.known:
            if abs(pressure - sent.cpu_pressure) <= self.hysteresis and distance(profile, sent.profile) <= self.spread \
                    and spec == (sent.max_cpu_milli, sent.max_gpus):
                return sent
            if now - self._adopted[cluster] < self.stabilization_s:
                return sent
        adopted = WorkloadContext(quantize(pressure), self._version(sent, now), profile,
                                  sent.scorer if profile is not None else LEARNED, *spec)
        self._sent[cluster], self._adopted[cluster] = adopted, now
        return adopted

    def choose(self, cluster: str, scorer: str, now: float) -> WorkloadContext:
        """Adopt a selected scorer family under a new version (every agent of the cluster switches at that version);
        nothing changes when it is the one sent, or when the cluster has no profile any more (learned)."""
        sent = self._sent.get(cluster, NONE)
        if sent.profile is None or sent.scorer == scorer:
            return sent
        adopted = replace(sent, scorer=scorer, version=self._version(sent, now))
        self._sent[cluster] = adopted
        return adopted

    @staticmethod
    def _version(sent: WorkloadContext, now: float) -> int:
        return max(int(now * 1000), sent.version + 1, 1)
