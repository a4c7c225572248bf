"""The control plane's autoscaling loop: each enabled workload's decision, applied through its back end.

Every reconcile tick, for each autoscaled workload: read its placed replicas and how many are
ready (twin: pods the scheduler placed and whose start-up has elapsed; Kubernetes: the
Deployment's status), ask its :class:`~controlplane.autoscaling.scaler.Autoscaler`, and when the
count changes scale the back end (Kubernetes: the scale subresource), record the placement and
journal the decision with its reason. Growth goes to the cluster holding the most replicas;
shrinking takes from it first. A workload in migration is left alone until the migration ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from controlplane.autoscaling.scaler import Autoscaler
from controlplane.autoscaling.specs import AutoscaleSpec, Book
from controlplane.journal import Journal
from controlplane.metrics import Metrics
from controlplane.registry import DecisionRecord, Placement, PlacementState, Registry
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend


@dataclass(frozen=True, slots=True)
class Status:
    spec: AutoscaleSpec
    fallback: str
    demand: float
    forecast: float
    desired: int
    ready: int
    replicas: int
    reason: str


def shares(placed: list[Placement], total: int) -> dict[str, int]:
    """New per-cluster counts: growth goes to the largest placement; shrinking takes from the largest
    first, one replica at a time, and leaves every placement at least one."""
    counts = {p.cluster: p.replicas for p in placed}
    delta = total - sum(counts.values())
    if delta > 0:
        counts[min(counts, key=lambda c: (-counts[c], c))] += delta
    while delta < 0 and max(counts.values()) > 1:
        counts[min(counts, key=lambda c: (-counts[c], c))] -= 1
        delta += 1
    return counts


class Autoscaling:
    def __init__(self, book: Book, registry: Registry, journal: Journal, backends: Callable[[str], ClusterBackend],
                 metrics: Metrics, record: Callable[[DecisionRecord], None], traces: Path | None = None) -> None:
        self.book, self.registry, self.journal, self.backends = book, registry, journal, backends
        self.metrics, self.record, self.traces = metrics, record, traces
        self.scalers = {s.workload: Autoscaler.build(s, traces) for s in book.all()}
        self.seen: dict[str, tuple[int, int]] = {}  # workload -> (ready, replicas) at the last tick

    def prepare(self, spec: AutoscaleSpec, now: float) -> Autoscaler:
        """Load the series and fit the forecaster (seconds: call it outside the control plane's lock)."""
        if self.registry.workload(spec.workload) is None:
            raise KeyError(f"unknown workload {spec.workload!r}")
        return Autoscaler.build(replace(spec, enabled_at=now), self.traces)

    def enable(self, spec: AutoscaleSpec, now: float, scaler: Autoscaler | None = None) -> Status:
        """Autoscale ``spec.workload`` from ``now`` (with ``scaler`` from :meth:`prepare`, if already built)."""
        scaler = scaler or self.prepare(spec, now)
        spec = scaler.spec
        self.book.put(spec)
        self.scalers[spec.workload] = scaler
        why = scaler.fallback or f"{spec.policy} on series {spec.series}, start-up {spec.startup_s:.0f} s"
        self.record(DecisionRecord(now, "autoscale-enable", spec.workload, "", "", (why,)))
        return self.status(spec.workload)

    def disable(self, workload: str, now: float) -> Status:
        status = self.status(workload)
        self.book.drop(workload)
        del self.scalers[workload]
        self.seen.pop(workload, None)
        for gauge in (self.metrics.autoscale_demand, self.metrics.autoscale_forecast, self.metrics.autoscale_desired):
            gauge.remove(workload) if (workload,) in gauge._metrics else None  # noqa: SLF001 (prometheus has no 'has')
        self.record(DecisionRecord(now, "autoscale-disable", workload, "", "", (f"replicas stay at {status.replicas}",)))
        return status

    def status(self, workload: str) -> Status:
        a = self.scalers.get(workload)
        if a is None:
            raise KeyError(f"workload {workload!r} is not autoscaled")
        ready, replicas = self.seen.get(workload, (0, 0))
        d = a.last
        return Status(a.spec, a.fallback, d.demand if d else 0.0, (d.forecast or 0.0) if d else 0.0,
                      d.desired if d else replicas, ready, replicas, d.reason if d else "no decision yet")

    def statuses(self) -> list[Status]:
        return [self.status(w) for w in sorted(self.scalers)]

    def tick(self, now: float) -> None:
        moving = {m.workload for m in self.journal.active()}
        for name, scaler in list(self.scalers.items()):
            if self.registry.workload(name) is None:  # deleted: its autoscaler goes with it
                self.disable(name, now)
                continue
            placed = [p for p in self.registry.placements(name) if p.state is PlacementState.PLACED]
            if not placed or name in moving:
                continue
            replicas = sum(p.replicas for p in placed)
            ready = 0
            for p in placed:
                try:
                    ready += self.backends(p.cluster).get_workload(name).ready_replicas
                except errors.BackendError:
                    pass  # an unreachable cluster serves nothing we can count
            self.seen[name] = (ready, replicas)
            d = scaler.step(now, ready, replicas)
            self.metrics.autoscale_demand.labels(name).set(d.demand)
            self.metrics.autoscale_forecast.labels(name).set(d.forecast or 0.0)
            self.metrics.autoscale_desired.labels(name).set(d.desired)
            if d.desired != replicas:
                self._apply(name, placed, d.desired, f"{replicas} -> {d.desired} replicas: {d.reason}", now)

    def _apply(self, name: str, placed: list[Placement], total: int, why: str, now: float) -> None:
        by_cluster = {p.cluster: p for p in placed}
        changed = []
        for cluster, n in shares(placed, total).items():
            p = by_cluster[cluster]
            if n == p.replicas:
                continue
            try:
                self.backends(cluster).scale_workload(name, n)
            except errors.BackendError as exc:
                self.record(DecisionRecord(now, "autoscale-failed", name, cluster, "", (f"{why}; {cluster}: {exc}",)))
                continue
            self.registry.set_placement(Placement(name, cluster, n, p.epoch))
            changed.append(cluster)
        w = self.registry.workload(name)
        if changed and w is not None:
            self.registry.put_workload(replace(w, replicas=sum(p.replicas for p in self.registry.placements(name))))
            self.record(DecisionRecord(now, "autoscale", name, ",".join(changed), "", (why,)))
