"""The control plane's autoscaling loop: each enabled workload's decision, applied through its back end.

Every reconcile tick, for each autoscaled workload: read its placed replicas and how many are
ready (twin: pods the scheduler placed and whose start-up has elapsed; Kubernetes: the
Deployment's status), ask its :class:`~controlplane.autoscaling.scaler.Autoscaler`, and when the
count changes scale the back end (Kubernetes: the scale subresource), record the placement and
journal the decision with its reason. Growth goes to the cluster holding the most replicas;
shrinking takes from it first. A workload in migration is left alone until the migration ends.

Each workload's autoscaler fails alone: an exception in one is logged once per distinct cause,
said in its status and journaled, and every other workload goes on scaling.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from controlplane.autoscaling.scaler import Autoscaler
from controlplane.autoscaling.specs import AutoscaleSpec, Book
from controlplane.journal import Journal
from controlplane.metrics import Metrics
from controlplane.registry import DecisionRecord, Placement, PlacementState, Registry
from controlplane.store import Fenced, StoreUnavailable
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend

log = logging.getLogger(__name__)

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
        self.scalers = {s.workload: self._restore(s) for s in book.all()}
        self.seen: dict[str, tuple[int, int]] = {}  # workload -> (ready, replicas) at the last tick

    def _restore(self, spec: AutoscaleSpec) -> Autoscaler:
        """A stored spec's autoscaler; one that cannot be built at all is an HPA that says why (never a plane that cannot start)."""
        try:
            return Autoscaler.build(spec, self.traces)
        except Exception as exc:  # noqa: BLE001 -- one workload's fault must not keep the plane from starting
            log.warning("autoscaler of %s cannot be rebuilt: %s", spec.workload, exc, exc_info=True)
            return Autoscaler.hpa_only(spec, 60.0, np.array([math.nan]), f"cannot be rebuilt ({type(exc).__name__}: {exc}); HPA without demand")

    def prepare(self, spec: AutoscaleSpec, now: float) -> Autoscaler:
        """Load the series and fit the forecaster (seconds: call it outside the control plane's lock). A series that
        cannot be loaded raises :class:`~controlplane.autoscaling.series.SeriesError` (a ValueError: refused)."""
        if self.registry.workload(spec.workload) is None:
            raise KeyError(f"unknown workload {spec.workload!r}")
        return Autoscaler.build(replace(spec, enabled_at=now), self.traces, strict=True)

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
        reason = f"failed: {a.failed}; replicas kept" if a.failed else d.reason if d else "no decision yet"
        return Status(a.spec, a.fallback, d.demand if d else 0.0, (d.forecast or 0.0) if d else 0.0,
                      d.desired if d else replicas, ready, replicas, reason)

    def statuses(self) -> list[Status]:
        return [self.status(w) for w in sorted(self.scalers)]

    def tick(self, now: float) -> None:
        moving = {m.workload for m in self.journal.active()}
        for name, scaler in list(self.scalers.items()):
            try:
                self._tick_one(name, scaler, moving, now)
            except (Fenced, StoreUnavailable):
                raise  # the store's, not this workload's: the reconcile loop handles it
            except Exception as exc:  # noqa: BLE001 -- one workload's fault must not stall every other autoscaler
                why = f"{type(exc).__name__}: {exc}"[:300]
                if why != scaler.failed:
                    log.warning("autoscaler of %s failed: %s", name, why, exc_info=True)
                    self.record(DecisionRecord(now, "autoscale-failed", name, "", "", (why,)))
                scaler.failed = why
            else:
                scaler.failed = ""

    def _tick_one(self, name: str, scaler: Autoscaler, moving: set[str], now: float) -> None:
        if self.registry.workload(name) is None:  # deleted: its autoscaler goes with it
            self.disable(name, now)
            return
        placed = [p for p in self.registry.placements(name) if p.state is PlacementState.PLACED]
        if not placed or name in moving:
            return
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
