"""Adopting what agents already run when an embedded twin is rebuilt (a restart, a new leader), never stranding it.

The store keeps placements, not bindings, so a rebuilt twin holds every pod pending. Restore used to re-create them
at a bumped epoch, and an agent whose copy ran at the old epoch kept running it while the pod waited at the new one:
killed ~0.5 s after a 50-pod submit and restarted, 13-23 of 50 pods stayed pending for good in 2 of 3 runs, each
still running at epoch 1 on the agent that had bound it (measured, ``fedplane`` on loopback, 5 agents).

Adopting, not fencing, because the old copies are this placement's own replicas: same pod, same epoch, nothing
superseded them. A rebuilt twin's workloads keep their epoch; for :data:`ADOPT_S` after the take-over, or until every
expected agent (:mod:`controlplane.expecting`) has answered, each report's ack asks the agent for the pods it runs
(``AgentAck.send_held``), and a pod it runs at the twin's epoch, still pending on no node, is bound to its node: the
running copy is the placement. No second copy starts, nothing is stopped. Pods no agent claims when the window closes
(their agent died, or predates ``held``) get a new epoch (:meth:`fedcore.backends.twin.TwinCluster.refence`): any
claim or copy at the old epoch loses at the fence, its agent stops it, and the pod is placed afresh. The window is
as long as an agent's report backoff while the plane was away (10 s) plus a report.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from fedcore.backends.model import Phase
from fedcore.backends.twin import TwinCluster

ADOPT_S = 12.0


@dataclass(slots=True)
class _Window:
    until: float
    pods: set[str] = field(default_factory=set)
    """Rebuilt pods no agent has said it runs yet."""
    answered: set[str] = field(default_factory=set)
    """Nodes whose agents sent what they run."""


class Adopting:
    def __init__(self) -> None:
        self.open: dict[str, _Window] = {}

    def start(self, cluster: str, pods: Iterable[str], now: float) -> None:
        """``pods`` of ``cluster`` were just rebuilt pending: wait for the agents that may run them."""
        window = self.open.setdefault(cluster, _Window(now + ADOPT_S))
        window.pods.update(pods)

    def wanted(self, cluster: str, node: str) -> bool:
        """Whether the ack to ``node``'s agent asks what it runs."""
        window = self.open.get(cluster)
        return window is not None and node not in window.answered

    def adopt(self, twin: TwinCluster, node: str, held: Iterable[tuple[str, int]]) -> list[str]:
        """Bind to ``node`` each pod it runs at the twin's epoch that is still pending on no node; returns them."""
        window = self.open.get(twin.name)
        if window is None:
            return []
        window.answered.add(node)
        mine = {pod: epoch for pod, epoch in held if pod in window.pods}
        if not mine:
            return []
        states = {s.name: s for s in twin.list_pods() if s.name in mine}
        adopted = []
        for pod, epoch in sorted(mine.items()):
            s = states.get(pod)
            if s is not None and s.phase is Phase.PENDING and not s.node and s.epoch == epoch and twin.bind_pod(pod, node, epoch).ok:
                window.pods.discard(pod)
                adopted.append(pod)
        return adopted

    def close(self, twins: dict[str, TwinCluster], expected: dict[str, Collection[str]], now: float) -> dict[str, int]:
        """Close the windows that ran out, or whose expected agents all answered: their unclaimed pods get a new
        epoch. Returns cluster -> pods re-fenced, for each window closed."""
        closed = {}
        for cluster, window in list(self.open.items()):
            waiting = set(expected.get(cluster, ())) - window.answered
            if now < window.until and (waiting or not window.answered):
                continue
            del self.open[cluster]
            twin = twins.get(cluster)
            closed[cluster] = twin.refence(sorted(window.pods)) if twin is not None else 0
        return closed
