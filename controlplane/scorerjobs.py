"""The scorer selection's plane side: which job to hand the worker, and what a finished selection changes.

:class:`~controlplane.selecting.Selector` decides *when* a cluster's selection is due; the worker process
(:mod:`controlplane.selectworker`, driven off the tick by :mod:`controlplane.server`) replays the workload. In between,
this module builds the job from what the plane knows (the replicas placed on the cluster, the nodes its agents
report) and folds an outcome into the cluster's workload context, its metrics and the decisions log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controlplane.evidence import EvidenceBook
from controlplane.metrics import Metrics
from controlplane.registry import DecisionRecord, Registry
from controlplane.selecting import Job, Outcome, Selector
from controlplane.contextbook import ContextBook, cluster_fleets, placed_pods
from fedapi.workloadcontext import SCORERS, WorkloadContext

log = logging.getLogger("controlplane")


def show_scorer(metrics: Metrics, cluster: str, context: WorkloadContext) -> None:
    """The scorer family a cluster's agents are sent, as a one-hot gauge."""
    for scorer in SCORERS:
        metrics.scorer.labels(cluster, scorer).set(1 if scorer == context.scorer else 0)


def job(cluster: str, key: object, selector: Selector, book: ContextBook, registry: Registry, evidence: EvidenceBook) -> Job | None:
    """The job for a due selection, in a fixed order (the twin's replay then depends on the workload alone); None, and
    the selection forgotten, when the cluster has no placed replicas or no reported nodes yet."""
    pods = placed_pods(cluster, {w.name: w for w in registry.workloads()}, registry.placements())
    fleet = cluster_fleets(evidence.latest(cluster)).get(cluster, [])
    if not pods or not fleet:
        selector.forget(cluster)
        return None
    log.info("cluster %s: selecting its scorer family (%d placed replicas on %d nodes, %s sent now)",
             cluster, len(pods), len(fleet), book.get(cluster).scorer)
    return Job(cluster, key, tuple(sorted(pods, key=lambda p: p.uid)), tuple(sorted(fleet, key=lambda n: n.name)))  # type: ignore[arg-type]


def adopt(outcome: Outcome, now: float, book: ContextBook, selector: Selector, metrics: Metrics,
          record: Callable[[DecisionRecord], None], leading: bool) -> WorkloadContext:
    """A finished selection: its family into the cluster's context under a new version, or, when it failed, the
    previous family kept (one log line). Returns what the cluster's agents are sent from now on."""
    selector.finish(outcome)
    cluster = outcome.cluster
    before = book.get(cluster)
    metrics.selections.labels(cluster, "chosen" if outcome.ok else "failed").inc()
    metrics.selection_seconds.observe(outcome.wall_s)
    metrics.selection_cpu.inc(outcome.cpu_s)
    if not outcome.ok:
        log.warning("cluster %s: scorer selection failed after %.1f s (%s): keeping %s", cluster, outcome.wall_s,
                    outcome.error, before.scorer)
        if leading:
            record(DecisionRecord(now, "scorer-failed", "", cluster, "", (outcome.error, f"kept {before.scorer}")))
        return before
    context = book.choose(cluster, outcome.scorer, now) if leading else before
    means = ", ".join(f"{name} {mean:.4f}" for name, mean in sorted(outcome.means.items()))
    log.info("cluster %s: scorer selection chose %s (%s) in %.1f s, %.1f CPU-s: agents are sent %s (version %d)",
             cluster, outcome.scorer, means, outcome.wall_s, outcome.cpu_s, context.scorer, context.version)
    if context is not before:
        metrics.context_changes.labels(cluster).inc()
        show_scorer(metrics, cluster, context)
        record(DecisionRecord(now, f"scorer:{context.scorer}", "", cluster, "",
                              (f"was {before.scorer}", f"lookahead means: {means}", f"context version {context.version}")))
    return context
