"""Faults the twin can inject: node crash, cluster outage, region partition, slow node."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from fedcore.nodetable import NodeTable


class FaultKind(enum.Enum):
    NODE_CRASH = "node-crash"
    CLUSTER_OUTAGE = "cluster-outage"
    REGION_PARTITION = "region-partition"
    SLOW_NODE = "slow-node"


@dataclass(frozen=True, slots=True)
class Fault:
    """``kind`` hits ``target`` (a node, cluster or region name) at ``at`` seconds for ``duration`` seconds."""

    kind: FaultKind
    target: str
    at: float
    duration: float = float("inf")

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """``KIND:TARGET@AT[+DURATION]``, e.g. ``cluster-outage:c1@3600+600``."""
        try:
            head, when = spec.split("@", 1)
            kind, target = head.split(":", 1)
            at, _, duration = when.partition("+")
            return cls(FaultKind(kind), target, float(at), float(duration) if duration else float("inf"))
        except ValueError:
            kinds = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"bad fault {spec!r}: expected KIND:TARGET@AT[+DURATION] with KIND one of {kinds}") from None


def rows_hit(fault: Fault, table: NodeTable) -> np.ndarray:
    """The node rows a fault affects; an unknown target is an error, not a silent no-op."""
    if fault.kind in (FaultKind.NODE_CRASH, FaultKind.SLOW_NODE):
        if fault.target not in table.index:
            raise ValueError(f"fault targets unknown node {fault.target!r}")
        return np.array([table.index[fault.target]])
    if fault.kind is FaultKind.CLUSTER_OUTAGE:
        if fault.target not in table.clusters:
            raise ValueError(f"fault targets unknown cluster {fault.target!r}; clusters: {table.clusters}")
        return np.flatnonzero(table.cluster == table.clusters.index(fault.target))
    if fault.target not in table.regions:
        raise ValueError(f"fault targets unknown region {fault.target!r}; regions: {table.regions}")
    return np.flatnonzero(table.region == table.regions.index(fault.target))
