"""Prometheus metrics of one control plane, in its own registry (several can live in one process).

Served on ``/metrics`` by ``controlplane serve``; the Grafana dashboard in deploy/grafana reads these names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane.journal import Migration
from controlplane.verdicts import Health

SECONDS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.verdicts = Counter("fedplane_verdicts", "Verdict changes per cluster and new health", ["cluster", "health"], registry=r)
        self.cluster_failed = Gauge("fedplane_cluster_failed", "1 while a cluster is partitioned or down", ["cluster"], registry=r)
        self.cluster_health = Gauge("fedplane_cluster_health", "1 for the cluster's current health", ["cluster", "health"], registry=r)
        self.load = Gauge("fedplane_cluster_load", "Allocated over capacity (max over CPU and memory)", ["cluster"], registry=r)
        self.forecast = Gauge("fedplane_cluster_load_forecast", "Forecast load a horizon ahead", ["cluster"], registry=r)
        self.migrations = Counter("fedplane_migrations", "Migrations reaching a state", ["kind", "state"], registry=r)
        self.migrations_active = Gauge("fedplane_migrations_active", "Migrations not yet done, failed or cancelled", registry=r)
        self.migration_queue = Gauge("fedplane_migration_queue_depth", "Active migrations due for a step now", registry=r)
        self.nodes_skipped = Gauge("fedplane_cluster_nodes_skipped", "Ready nodes placement leaves out (unknown arch, Windows, unreadable allocatable)", ["cluster"], registry=r)
        self.evictions_requested = Counter("fedplane_evictions_requested", "Stale pods the control plane asked a cluster to evict", ["cluster"], registry=r)
        self.evictions_done = Counter("fedplane_evictions_done", "Evictions confirmed (evicted, already gone, or superseded)", ["cluster", "outcome"], registry=r)
        self.evictions_blocked = Counter("fedplane_evictions_blocked", "Eviction attempts a PodDisruptionBudget refused (retried next tick)", ["cluster"], registry=r)
        self.leader = Gauge("fedplane_leader", "1 while this control plane leads (always 1 on SQLite)", registry=r)
        self.takeovers = Counter("fedplane_takeovers", "Times this control plane took over as leader", registry=r)
        self.writes_refused = Gauge("fedplane_writes_refused", "Writes refused because this member did not lead: by its API (a standby names the leader) or by the store (fencing)", registry=r)
        self.cpu_pressure = Gauge("fedplane_cluster_workload_cpu_pressure", "The workload context sent to the cluster's agents: "
                                  "its workload's CPU per requested GPU over its GPU nodes' CPU per GPU", ["cluster"], registry=r)
        self.profile_shapes = Gauge("fedplane_cluster_workload_profile_shapes", "Typical pod shapes of the workload profile sent "
                                    "to the cluster's agents (0: they score with their model artifact's own)", ["cluster"], registry=r)
        self.context_changes = Counter("fedplane_cluster_workload_context_changes", "Workload contexts adopted for the cluster "
                                       "(each makes its agents rebuild their fragment tables)", ["cluster"], registry=r)
        self.scorer = Gauge("fedplane_cluster_scorer", "1 for the scorer family the cluster's agents are sent (learned: "
                            "the policy model; fgd, bestfit: the heuristic the lookahead selection chose)", ["cluster", "scorer"], registry=r)
        self.selections = Counter("fedplane_scorer_selections", "Lookahead selections of a cluster's scorer family finished, "
                                  "by outcome (chosen, failed)", ["cluster", "outcome"], registry=r)
        self.selection_seconds = Histogram("fedplane_scorer_selection_seconds", "Wall time of one lookahead selection "
                                           "(a nice 19 worker process)", registry=r, buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
        self.selection_cpu = Counter("fedplane_scorer_selection_cpu_seconds", "CPU seconds the selection worker processes spent",
                                     registry=r)
        self.preemptions = Counter("fedplane_batch_preemptions", "Batch pods the quota auction preempted for online demand", ["cluster"], registry=r)
        self.reclaimed = Gauge("fedplane_cluster_reclaimed_cpu_milli", "CPU online pods request but, by forecast, will not use: "
                               "offered to batch (clusters running batch)", ["cluster"], registry=r)
        self.reports = Counter("fedplane_agent_reports", "Agent reports received", ["accepted"], registry=r)
        self.tick = Histogram("fedplane_tick_seconds", "Duration of one reconcile tick", registry=r,
                              buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5))
        self.gc_pause = Histogram("fedplane_gc_pause_seconds", "Wall time of one cyclic garbage collection (it holds the GIL: "
                                  "the tick and ingest wait), by generation", ["generation"], registry=r,
                                  buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.drill_detect = Histogram("fedplane_drill_detect_seconds", "Drill: fault to verdict", ["scenario"], registry=r, buckets=SECONDS)
        self.autoscale_demand = Gauge("fedplane_autoscale_demand", "Autoscaled workload's demand now, in replicas at 100%", ["workload"], registry=r)
        self.autoscale_forecast = Gauge("fedplane_autoscale_forecast", "Calibrated q95 peak demand over the start-up horizon, in replicas at 100%", ["workload"], registry=r)
        self.autoscale_desired = Gauge("fedplane_autoscale_desired_replicas", "Replicas the autoscaler wants", ["workload"], registry=r)
        self.drill_recovery = Histogram("fedplane_drill_recovery_seconds", "Drill: fault to all pods healthy elsewhere", ["scenario"], registry=r, buckets=SECONDS)

    def verdict(self, cluster: str, health: Health) -> None:
        self.verdicts.labels(cluster, health.value).inc()
        self.cluster_failed.labels(cluster).set(1 if health.failed else 0)
        for h in Health:
            self.cluster_health.labels(cluster, h.value).set(1 if h is health else 0)

    def migration(self, m: Migration) -> None:
        self.migrations.labels(m.kind.value, m.state.value).inc()
