"""Removing what a failover left behind: stale copies on a cluster that answers again, retired pod by pod.

The planner moved the work; this is the other half: once the failed cluster is judged healthy (or at
least answering) again, its copies at an older fencing epoch are scaled back to what the store says, or
deleted and their pods evicted one by one through the back end's eviction (Kubernetes' Eviction API, so
PodDisruptionBudgets hold). The runtime calls :meth:`Retiring.cleanup` once per tick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controlplane.metrics import Metrics
from controlplane.registry import DecisionRecord, Placement, PlacementState, Registry
from controlplane.verdicts import Health, Verdict
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend
from fedcore.backends.model import Phase


class Retiring:
    """Stale copies to remove, and the evictions asked for but not yet confirmed."""

    def __init__(self, registry: Registry, backends: Callable[[str], ClusterBackend], metrics: Metrics,
                 record: Callable[[DecisionRecord], None]) -> None:
        self.registry, self.backends, self.metrics, self.record = registry, backends, metrics, record
        self._evicting: set[tuple[str, str]] = set()
        """(cluster, pod) evictions asked for and not yet confirmed (counted once as requested)."""

    def cleanup(self, now: float, verdicts: Mapping[str, Verdict]) -> None:
        """Remove copies left on a failed cluster once it answers again (they carry an older epoch).

        A copy to remove entirely is retired pod by pod through evictions (the Eviction API on
        Kubernetes, so the cluster's PodDisruptionBudgets are respected): its Deployment is deleted
        orphaning the pods, then each pod still at the stale epoch is evicted; a budget that
        blocks one leaves the placement stale until a later tick gets it through.
        """
        for p in self.registry.placements():
            if p.state is not PlacementState.STALE:
                continue
            verdict = verdicts.get(p.cluster, Verdict(Health.UNKNOWN, ()))
            if verdict.health.failed or verdict.health is Health.UNKNOWN:
                continue
            try:
                backend = self.backends(p.cluster)
                if p.replicas:
                    backend.scale_workload(p.workload, p.replicas)
                elif self._retire(backend, p) > 0:
                    continue
            except errors.NotFound:
                pass
            except errors.BackendError:
                continue
            if p.replicas:
                self.registry.set_placement(Placement(p.workload, p.cluster, p.replicas, p.epoch))
            else:
                self.registry.drop_placement(p.workload, p.cluster)
            self.record(DecisionRecord(now, "cleanup", p.workload, p.cluster, "", (f"{p.cluster} is {verdict.health.value} again; stale epoch-{p.epoch} copy removed",)))

    def _retire(self, backend: ClusterBackend, p: Placement) -> int:
        """Evict the stale copy's pods; returns how many are still there (a disruption budget held them)."""
        try:
            backend.delete_workload(p.workload, orphan_pods=True)
        except errors.NotFound:
            pass
        left = 0
        for pod in backend.list_pods(p.workload):
            if pod.epoch > p.epoch or pod.phase in (Phase.SUCCEEDED, Phase.FAILED):
                continue  # a newer copy placed here since, or already over
            if (p.cluster, pod.name) not in self._evicting:
                self._evicting.add((p.cluster, pod.name))
                self.metrics.evictions_requested.labels(p.cluster).inc()
            result = backend.evict_pod(pod.name, pod.epoch)
            if result.final:
                self._evicting.discard((p.cluster, pod.name))
                self.metrics.evictions_done.labels(p.cluster, result.outcome.value).inc()
            else:
                left += 1
                self.metrics.evictions_blocked.labels(p.cluster).inc()
        return left
