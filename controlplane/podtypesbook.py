"""Each cluster's pod types (the workload profile its agents score against), recomputed only when its inputs move.

``PodTypes.from_pods`` of a cluster's placed replicas on its reported fleet costs about 1.6 ms for a cluster of
a thousand replicas: a hundred clusters recomputed on every tick would take most of the tick's budget, while the
inputs move only on a submit, a migration step, a scale or a node whose capacity changes. So the book keeps each
cluster's result under a key — the placed (workload, replicas, template) rows and the version of the fleet its
agents report (:meth:`controlplane.evidence.EvidenceBook.fleets`) — and recomputes a cluster only when its key
changed. Same answer as :func:`controlplane.contextbook.cluster_profiles` on the same inputs.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from controlplane.evidence import EvidenceBook
from controlplane.registry import Placement, PlacementState
from controlplane.contextbook import cluster_fleets, cluster_profiles, largest
from controlplane.workloads import Workload
from fedcore.scheduling.fragmentation import PodTypes

Computed = tuple[PodTypes | None, tuple[int, int]]
"""A cluster's pod types (None: nothing placed) and its fleet's largest node (CPU milli, GPU devices)."""


class PodTypesBook:
    def __init__(self) -> None:
        self._held: dict[str, tuple[Hashable, Computed]] = {}
        self.recomputed = 0
        """Clusters recomputed so far (the rest were served from the book)."""

    def update(self, workloads: Mapping[str, Workload], placements: Sequence[Placement], evidence: EvidenceBook) -> dict[str, Computed]:
        """Per cluster some agent reported for: its pod types and largest node, recomputed where the inputs moved."""
        placed: dict[str, list[Placement]] = {}
        for p in placements:
            if p.state is PlacementState.PLACED and p.workload in workloads:
                placed.setdefault(p.cluster, []).append(p)
        out: dict[str, Computed] = {}
        for cluster, fleet_version in evidence.fleets().items():
            mine = placed.get(cluster, [])
            key = (tuple((p.workload, p.replicas, workloads[p.workload].template) for p in mine), fleet_version)
            held = self._held.get(cluster)
            if held is None or held[0] != key:
                reports = evidence.latest(cluster)
                fleet = cluster_fleets(reports).get(cluster, [])
                held = self._held[cluster] = (key, (cluster_profiles(workloads, mine, reports).get(cluster), largest(fleet)))
                self.recomputed += 1
            out[cluster] = held[1]
        return out
