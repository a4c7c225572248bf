"""Each cluster's capacity as its last probe listed it, worked out once per listing rather than on every read.

Every tick reads every cluster's capacity several times (its load, its view for planning, the API's listing), and
working it out walks all its nodes: at a hundred clusters of a hundred nodes that was a large share of a tick. A
probe that lists the same node objects keeps the evidence book's tuple (:meth:`EvidenceBook.add_probe`; the twin
lists the same objects until a node's readiness moves), so the pools per architecture, the nodes left out and the
ready capacity are kept here under that tuple's identity until the listing changes.
"""

from __future__ import annotations

from controlplane import admission
from fedcore.backends.model import NodeState, ready_capacity
from fedcore.resources import Resources

Worked = tuple[dict[str, Resources], list[tuple[str, str]], Resources]
"""Ready capacity per architecture, the nodes placement leaves out (and why), the ready capacity in all."""


class Capacities:
    def __init__(self) -> None:
        self._held: dict[str, tuple[tuple[NodeState, ...], Worked]] = {}

    def of(self, cluster: str, nodes: tuple[NodeState, ...]) -> Worked:
        """What ``nodes`` (the cluster's listing, as the evidence book keeps it) hold; pools are the caller's to keep."""
        held = self._held.get(cluster)
        if held is None or held[0] is not nodes:
            pools, skipped = admission.pools_of(nodes)
            held = self._held[cluster] = (nodes, (pools, skipped, ready_capacity(list(nodes))))
        pools, skipped, ready = held[1]
        return dict(pools), skipped, ready
