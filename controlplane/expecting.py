"""Which agents a cluster should have reporting, known to every leader, not only to the one that heard them.

The evidence book starts empty on every take-over: without this, a new leader saw no agent, judged by the API alone,
and called a cluster whose agents had all gone silent HEALTHY ("0/0 agents reporting"). A cluster's expected agents
are its nodes that ever had an agent reporting, kept in the store so the next leader (or the same process after a
restart) reads them; a node the cluster no longer lists is not expected. A cluster no agent ever reported for
expects none (an embedded twin that binds its own pods, a Kubernetes cluster without edge agents). Written by the
leader only when a node reports for the first time.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from controlplane.store import Store
from fedcore.backends.model import NodeState

PREFIX = "agents/expected/"


class ExpectedAgents:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.nodes: dict[str, frozenset[str]] = {}
        """Per cluster: nodes that ever had an agent reporting, as the store has them."""
        self._seen = -1
        """How many (cluster, node) pairs the evidence held when last learned from: a new pair means a new node."""
        self._counted: dict[str, tuple[Sequence[NodeState], frozenset[str], int]] = {}
        """Per cluster, the last count and what it was counted from (the same listing and record: the same count)."""

    def load(self) -> None:
        """Read what earlier leaders learned (on a take-over)."""
        with self.store.tx() as t:
            self.nodes = {key.removeprefix(PREFIX): frozenset(doc.get("nodes", [])) for key, doc in t.scan(PREFIX)}
        self._seen = -1

    def learn(self, reporting: Collection[tuple[str, str]]) -> None:
        """``reporting``: every (cluster, node) some agent reported for; new nodes go to the store (one write per cluster)."""
        if len(reporting) == self._seen:
            return
        by_cluster: dict[str, set[str]] = {}
        for cluster, node in list(reporting):  # one copy: reports keep arriving on the server's loop
            by_cluster.setdefault(cluster, set()).add(node)
        grown = {c: frozenset(n) | self.nodes.get(c, frozenset()) for c, n in by_cluster.items() if not n <= self.nodes.get(c, frozenset())}
        if grown:
            with self.store.tx() as t:
                for cluster, nodes in grown.items():
                    t.put(PREFIX + cluster, {"nodes": sorted(nodes)})
            self.nodes.update(grown)
        self._seen = len(reporting)

    def count(self, cluster: str, listed: Sequence[NodeState]) -> int:
        """How many agents ``cluster`` should have: its recorded nodes among those its API ``listed`` (none listed:
        every recorded one)."""
        recorded = self.nodes.get(cluster, frozenset())
        last = self._counted.get(cluster)
        if last is not None and last[0] is listed and last[1] is recorded:  # a probe keeps an unchanged listing's tuple
            return last[2]
        n = sum(1 for node in listed if node.name in recorded) if listed else len(recorded)
        self._counted[cluster] = (listed, recorded, n)
        return n
