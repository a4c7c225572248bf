"""Regions, zones and clusters, and the latency between regions."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Cluster:
    name: str
    region: str
    zones: tuple[str, ...] = ("z0",)


@dataclass(slots=True)
class Topology:
    """The regions and clusters of a fleet plus a symmetric inter-region latency table (milliseconds)."""

    clusters: dict[str, Cluster] = field(default_factory=dict)
    latency_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    intra_region_ms: float = 1.0

    def add(self, cluster: Cluster) -> None:
        if cluster.name in self.clusters:
            raise ValueError(f"cluster {cluster.name!r} is defined twice")
        self.clusters[cluster.name] = cluster

    @property
    def regions(self) -> list[str]:
        return sorted({c.region for c in self.clusters.values()})

    def set_latency(self, a: str, b: str, ms: float) -> None:
        if ms < 0:
            raise ValueError("latency must be non-negative")
        self.latency_ms[(a, b)] = ms
        self.latency_ms[(b, a)] = ms

    def latency(self, a: str, b: str) -> float:
        """Round-trip latency between two regions; unknown pairs of distinct regions count as 50 ms."""
        if a == b:
            return self.intra_region_ms
        return self.latency_ms.get((a, b), 50.0)
