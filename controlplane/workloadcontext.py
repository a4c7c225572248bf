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
cluster what agents are sent, and moves it only when the workload does, so all agents of a cluster
score with one stable context rather than one that flickers as replicas come and go:

* the CPU pressure is rounded (:func:`fedapi.workloadcontext.quantize`) and moves only when the
  computed value leaves a band of :data:`HYSTERESIS` around the sent one;
* the profile is quantized (:meth:`fedapi.workloadcontext.Profile.quantized`: shape weights to 0.01,
  pinned share to 0.001) and moves when that quantized form differs (another shape set, a weight
  or slot that moved); a placed workload without GPU request has none (agents keep their artifact's).

Either move adopts a new version (the clock in ms), which agents report back (``ListAgents``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controlplane.evidence import AgentReport
from controlplane.registry import Placement, PlacementState
from controlplane.workloads import Workload
from fedapi.workloadcontext import NONE, Profile, WorkloadContext, quantize
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import PodTypes

HYSTERESIS = 0.015
"""The sent value moves only when the computed pressure is farther than this from it: 1.5 rounding steps, so a
pressure sitting on a rounding boundary (0.995 vs 1.005 as one replica comes and goes) does not flip the agents."""


def cluster_profiles(workloads: Mapping[str, Workload], placements: Iterable[Placement],
                     reports: Iterable[AgentReport]) -> dict[str, PodTypes | None]:
    """Per cluster some agent reported for: ``PodTypes.from_pods`` of its placed workloads on the nodes its agents
    report (None: nothing placed). Stale placements (replicas failed away from a cluster, removed once it answers)
    are not its workload."""
    fleets: dict[str, list[Node]] = {}
    for r in reports:
        capacity = r.summary.capacity
        fleets.setdefault(r.cluster, []).append(Node(r.node, capacity.cpu_milli, capacity.memory_mib, gpus=capacity.gpu_milli // MILLI))
    pods: dict[str, list[Pod]] = {cluster: [] for cluster in fleets}
    templates: dict[str, Pod] = {}
    for p in placements:
        w = workloads.get(p.workload)
        if w is not None and p.cluster in pods and p.state is PlacementState.PLACED:
            pod = templates.get(w.name) or templates.setdefault(w.name, w.pod(0))
            pods[p.cluster].extend([pod] * p.replicas)  # one Pod object per workload, referenced once per replica
    return {cluster: PodTypes.from_pods(pods[cluster], fleet=fleet) if pods[cluster] else None for cluster, fleet in fleets.items()}


class ContextBook:
    """Per cluster, the context its agents are sent; ``now`` (seconds) versions a value when it is adopted."""

    def __init__(self, hysteresis: float = HYSTERESIS) -> None:
        self.hysteresis = hysteresis
        self._sent: dict[str, WorkloadContext] = {}

    def get(self, cluster: str) -> WorkloadContext:
        """What ``cluster``'s agents are sent (:data:`~fedapi.workloadcontext.NONE` until a value was computed)."""
        return self._sent.get(cluster, NONE)

    def update(self, cluster: str, types: PodTypes | None, now: float) -> WorkloadContext:
        """Take a computed profile (None: no workload placed, CPU pressure 0 and the artifact's shapes); returns what
        is sent from now on."""
        sent = self._sent.get(cluster, NONE)
        pressure = types.cpu_pressure if types is not None else 0.0
        if not sent.known or abs(pressure - sent.cpu_pressure) > self.hysteresis:
            pressure = quantize(pressure)
        else:
            pressure = sent.cpu_pressure
        profile = Profile.quantized(types) if types is not None else None
        if sent.known and pressure == sent.cpu_pressure and profile == sent.profile:
            return sent
        adopted = WorkloadContext(pressure, max(int(now * 1000), sent.version + 1, 1), profile)
        self._sent[cluster] = adopted
        return adopted
