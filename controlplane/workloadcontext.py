"""Each cluster's workload context: what its agents' learned policy must know of the workload on the fleet.

The policy's pod input ``workload_cpu_bound`` reads the workload's CPU pressure on its fleet
(:func:`fedcore.scheduling.fragmentation.cpu_pressure`: CPU per requested GPU over the fleet's CPU
per GPU). The twin computes it from the whole workload and fleet; an agent sees one node. So the
control plane computes it per cluster, the way the twin does, and sends it with every ``AgentAck``:

* the workload is what the registry has placed on the cluster now (each workload's pod template,
  once per replica): the one home of what a cluster is asked to run, so submits, migrations,
  failovers, deletes and a new leader all agree without a second book of arrivals;
* the fleet is the GPU nodes the cluster's agents report (the newest report of every agent that
  ever reported: a silent node still stands, and the value should not move when one report is late).

Sans-IO: :func:`cluster_pressures` is a pure function of those two; :class:`ContextBook` holds per
cluster the value agents are sent, rounded (:func:`fedapi.workloadcontext.quantize`) and moved only
when the computed pressure leaves a band around it (hysteresis), so all agents of a cluster score
with one stable value rather than one that flickers as replicas come and go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controlplane.evidence import AgentReport
from controlplane.registry import Placement, PlacementState
from controlplane.workloads import Workload
from fedapi.workloadcontext import NONE, WorkloadContext, quantize
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.fragmentation import cpu_pressure

HYSTERESIS = 0.015
"""The sent value moves only when the computed pressure is farther than this from it: 1.5 rounding steps, so a
pressure sitting on a rounding boundary (0.995 vs 1.005 as one replica comes and goes) does not flip the agents."""


def cluster_pressures(workloads: Mapping[str, Workload], placements: Iterable[Placement],
                      reports: Iterable[AgentReport]) -> dict[str, float]:
    """Per cluster some agent reported for: the CPU pressure of its placed workloads on the GPU nodes its agents report.

    Stale placements (replicas failed away from a cluster, removed once it answers) are not its workload."""
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
    return {cluster: cpu_pressure(pods[cluster], fleet) for cluster, fleet in fleets.items()}


class ContextBook:
    """Per cluster, the context its agents are sent; ``now`` (seconds) versions a value when it is adopted."""

    def __init__(self, hysteresis: float = HYSTERESIS) -> None:
        self.hysteresis = hysteresis
        self._sent: dict[str, WorkloadContext] = {}

    def get(self, cluster: str) -> WorkloadContext:
        """What ``cluster``'s agents are sent (:data:`~fedapi.workloadcontext.NONE` until a value was computed)."""
        return self._sent.get(cluster, NONE)

    def update(self, cluster: str, pressure: float | None, now: float) -> WorkloadContext:
        """Take a computed pressure (None: no fleet known, keep what is sent); returns what is sent from now on."""
        sent = self._sent.get(cluster, NONE)
        if pressure is None or (sent.known and abs(pressure - sent.cpu_pressure) <= self.hysteresis):
            return sent
        value = quantize(pressure)
        if sent.known and value == sent.cpu_pressure:
            return sent
        adopted = WorkloadContext(value, max(int(now * 1000), sent.version + 1, 1))
        self._sent[cluster] = adopted
        return adopted
