"""The control plane as one object: registry, evidence, verdicts, planner and executor on one tick.

``tick(now)`` probes every cluster, judges it from all evidence, applies verdict taints, plans,
starts migrations (bumping fencing epochs), advances the executor and cleans up stale copies on
clusters that came back. One tick at a time (``lock``); API calls use the same lock for writes.
Time is injected: ``now`` comes from the caller (the server's loop, a test, a drill).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from controlplane import admission, agentviews, logs, returning, scorerjobs
from controlplane.autoscaling.actuating import Autoscaling
from controlplane.autoscaling.specs import Book
from controlplane.sqlitestore import SqliteStore
from controlplane.store import Store
from controlplane.adopting import Adopting
from controlplane.evidence import AgentReport, AgentRow, ClusterEvidence, EvidenceBook
from controlplane.expecting import ExpectedAgents
from controlplane.forecast import LoadForecast
from controlplane.handoffs import Volumes
from controlplane.journal import Journal, Kind, Migration, MigrationState, new_id
from controlplane.metrics import Metrics
from controlplane.migrations import CrashHook, Executor, RetryPolicy, no_crash
from controlplane.capacities import Capacities
from controlplane.colocating import Colocation, ColocationConfig
from controlplane.pacing import Backpressure, Pacing
from controlplane.podtypesbook import PodTypesBook
from controlplane.planner import Load, Plan, Planner, PlannerConfig, online_load
from controlplane.retiring import Retiring
from controlplane.registry import BackendKind, ClusterSpec, DecisionRecord, Home, Placement, PlacementState, Registry
from controlplane.verdicts import Health, Timings, Verdict, judge
from controlplane.selecting import Job, Outcome, Selector
from controlplane.contextbook import ContextBook
from controlplane.workloads import Workload
from fedapi.workloadcontext import WorkloadContext
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend
from fedcore.backends.model import NodeState
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedcore.resources import Resources
from fedcore.topology import Cluster, Topology

FORECAST_HORIZON_S = 10.0
PLANS_PER_COMMIT = 10
"""A round's plan starts (and notes) commit this many at a time, not one commit per write (a region's failover starts
hundreds at once), nor all in one: etcd refuses a transaction of more than 128 operations by default (``--max-txn-ops``)
and one start writes about 7 keys."""
log = logging.getLogger("controlplane")


class Backends:
    """Cluster name -> back end; twin clusters are built on registration, Kubernetes ones from kubeconfig contexts.

    ``twin_binder`` EXTERNAL leaves twin pods pending for edge agents to bind over the TwinCluster API.
    """

    def __init__(self, clock: Callable[[], float], twin_ready_delay_s: float = 0.5, twin_binder: Binder = Binder.INTERNAL) -> None:
        self.clock, self.twin_ready_delay_s, self.twin_binder = clock, twin_ready_delay_s, twin_binder
        self.by_name: dict[str, ClusterBackend] = {}

    def __call__(self, name: str) -> ClusterBackend:
        backend = self.by_name.get(name)
        if backend is None:
            raise errors.UnknownCluster(name, "no such cluster is registered")
        return backend

    def ensure(self, spec: ClusterSpec) -> ClusterBackend:
        if spec.name not in self.by_name:
            if spec.backend is BackendKind.TWIN:
                nodes = make_nodes(spec.name, spec.region, spec.twin_nodes, spec.twin_cpu_milli, spec.twin_memory_mib, spec.twin_gpus)
                self.by_name[spec.name] = TwinCluster(spec.name, nodes, self.clock, self.twin_ready_delay_s, self.twin_binder)
            else:
                from fedcore.backends.kubernetes import KubernetesCluster

                self.by_name[spec.name] = KubernetesCluster.from_kubeconfig(spec.kube_context, spec.kubeconfig or None, name=spec.name)
        return self.by_name[spec.name]

    def twins(self) -> dict[str, TwinCluster]:
        return {n: b for n, b in self.by_name.items() if isinstance(b, TwinCluster)}


@dataclass(frozen=True, slots=True)
class ClusterRow:
    """One cluster's status for ``ListClusters``."""

    spec: ClusterSpec
    verdict: Verdict
    since: float
    capacity: Resources
    used: Resources
    load: float
    forecast: float
    nodes: int
    agents: int
    context: WorkloadContext


class ControlPlane:
    def __init__(
        self, store: str | Path | Store, backends: Backends, clock: Callable[[], float], timings: Timings = Timings(),
        planner: PlannerConfig = PlannerConfig(), retry: RetryPolicy = RetryPolicy(), crash: CrashHook = no_crash,
        metrics: Metrics | None = None, traces: Path | None = None, lead: bool = True, scorer_selection: bool = True,
        volumes: Volumes | None = None, colocation: ColocationConfig = ColocationConfig(),
    ) -> None:
        """``volumes``: where stateful workloads' volumes live, for their migrations' hand-off (None: none can move)."""
        self.store: Store = SqliteStore(store) if isinstance(store, (str, Path)) else store
        self.registry, self.journal = Registry(self.store), Journal(self.store)
        self.backends, self.clock, self.timings = backends, clock, timings
        self.metrics = metrics or Metrics()
        self.evidence = EvidenceBook(timings.fresh_s)
        self.expected = ExpectedAgents(self.store)
        self.adopting = Adopting()
        """Rebuilt twins' pods waiting for the agents that run them to say so (:mod:`controlplane.adopting`)."""
        """Nodes that ever had an agent reporting: a new leader reads their silence, not an empty book, as silence."""
        self.pacing = Pacing(timings.report_interval_s, timings.fresh_s)
        """How often agents are asked to report as the fleet grows (:mod:`controlplane.pacing`)."""
        self.backpressure = Backpressure()
        """How much slower while the serving event loop runs late (fed by :func:`controlplane.server.reconcile`)."""
        self.verdicts: dict[str, tuple[Verdict, float]] = {}
        self.forecasts: dict[str, LoadForecast] = {}
        self.loads: dict[str, Load] = {}
        self.contexts = ContextBook(stabilization_s=timings.context_stabilization_s)
        """Each cluster's workload context, sent to its agents with every report's ack."""
        self.podtypes = PodTypesBook()
        self.capacities = Capacities()
        self.selections = Selector(timings.scorer_selection_s, scorer_selection)
        """Which cluster's scorer family to select next (the worker runs off the tick: ``controlplane.server``)."""
        self._contexts_from = 0.0
        """No context is computed before this (a leader's start plus ``fresh_s``): its evidence starts empty, and a
        fleet read from the first agents to report would send a value the rest of the fleet moves again."""
        self.planner = Planner(Topology(), planner)
        self.executor = Executor(self.journal, self.registry, backends, retry, crash, self.metrics.migration, volumes)
        self.lock = threading.RLock()
        self.wall: Callable[[], float] = time.time
        """Wall-clock time for failback maintenance windows (``clock`` may be monotonic)."""
        self._warned: set[tuple[str, str, str]] = set()
        self.retiring = Retiring(self.registry, backends, self.metrics, self._record)
        self.autoscaling = Autoscaling(Book(self.store), self.registry, self.journal, backends, self.metrics, self._record, traces)
        self.colocation = Colocation(self.metrics, self._record, colocation)
        """Reclaimed capacity and the batch quota auction on clusters running batch (:mod:`controlplane.colocating`)."""
        self.leading = False
        if lead:
            self.take_over(clock())

    def close(self) -> None:
        self.store.close()

    # -- leadership ------------------------------------------------------------------------------
    def take_over(self, now: float, specs: Sequence[ClusterSpec] = ()) -> list[str]:
        """Become the active control plane: attach every registered cluster (and ``specs`` not yet
        registered), then :meth:`restore` what the clusters should hold. Nothing is carried over
        from an earlier leader but the store. Returns what was repaired."""
        with self.lock:
            for spec in self.registry.clusters():
                self._attach(spec)
            known = {c.name for c in self.registry.clusters()}
            for spec in specs:
                if spec.name not in known:
                    self.register_cluster(spec)
            self._contexts_from = now + self.timings.fresh_s
            self.expected.load()
            self.journal.index()
            repaired = self.restore(now, adopt=True)
            for spec in self.registry.clusters():  # judge every cluster once now: a new leader places submits at once
                self._probe(spec.name, now)
                self._judge(spec.name, now)
            self.leading = True
            self.metrics.leader.set(1)
            self.metrics.takeovers.inc()
            return repaired

    def step_down(self) -> None:
        """Stop acting (another member leads): forget the clusters' handles and every judgement."""
        with self.lock:
            self.leading = False
            self.metrics.leader.set(0)
            self.backends.by_name.clear()  # embedded twins live in the leader only; the next leader rebuilds them
            self.verdicts.clear()
            self.loads.clear()
            self.forecasts.clear()
            self.contexts = ContextBook(stabilization_s=self.timings.context_stabilization_s)
            self.selections = Selector(self.timings.scorer_selection_s, self.selections.enabled)
            self.evidence = EvidenceBook(self.timings.fresh_s)
            self.podtypes = PodTypesBook()

    # -- API operations --------------------------------------------------------------------------
    def register_cluster(self, spec: ClusterSpec, force: bool = False) -> list[str]:
        """Register a cluster; returns what changed. The same spec again changes nothing. Another spec for a registered
        name is refused (ValueError naming the changes) unless ``force``: then it is stored, the cluster's back end is
        rebuilt from it (an embedded twin starts empty, with the new nodes) and :meth:`restore` re-creates every placed
        replica there at a bumped epoch. Replicas the new capacity cannot hold stay pending there, counted in the
        placement (placed, not ready) and named in the ``cluster-respec`` decision, never dropped; the planner's
        rebalance then moves a movable workload off the overloaded cluster, make-before-break, where another has room."""
        with self.lock:
            old = next((c for c in self.registry.clusters() if c.name == spec.name), None)
            changes = old.changes(spec) if old is not None else []
            if old is not None and not changes:
                return []
            if old is not None and not force:
                raise ValueError(f"cluster {spec.name} already exists with another spec ({'; '.join(changes)}): nothing changed; "
                                 "register it with --force (RegisterCluster force) to apply it")
            if old is not None:
                self.backends.by_name.pop(spec.name, None)
                self.planner.topology.clusters.pop(spec.name, None)
            self._attach(spec)
            self.registry.add_cluster(spec)
            if old is None:
                return []
            now = self.clock()
            held = [f"{p.workload}: {p.replicas} replicas" for p in self.registry.placements() if p.cluster == spec.name]
            self._record(DecisionRecord(now, "cluster-respec", "", spec.name, "", ("; ".join(changes), *held)))
            return changes + self.restore(now)

    def report(self, report: AgentReport) -> bool:
        """An agent's report into the evidence book (its own lock: ingest never waits for a tick)."""
        ok = self.evidence.add_report(report, self.clock())
        self.metrics.reports.labels(str(ok).lower()).inc()
        return ok

    def adopt(self, cluster: str, node: str, held: Iterable[tuple[str, int]]) -> list[str]:
        """What ``node``'s agent says it runs, adopted while ``cluster``'s rebuilt twin waits for it."""
        twin = self.backends.twins().get(cluster)
        with self.lock:
            return self.adopting.adopt(twin, node, held) if twin is not None else []

    def live_items(self) -> int:
        """Items of live state (agents in the evidence book, pods in the twins): what the collector's frozen set grows
        with as the fleet grows (:class:`controlplane.collecting.Freezer`)."""
        return len(self.evidence) + sum(len(t.pods) for t in self.backends.twins().values())

    def report_interval_s(self) -> float:
        """The interval each agent is asked to report at now (the ack's ``report_interval_ms``)."""
        return self.pacing.interval_s(len(self.evidence), self.backpressure.slowdown)

    def submit(self, workload: Workload, dry_run: bool, request_id: str = "") -> admission.Choice:
        """Choose clusters for a new workload and (unless ``dry_run``) create it there.

        The workload's record, its placements, the decision and the request id commit in one
        transaction before any cluster is touched: after a crash the workload is either wholly
        recorded (and :meth:`restore` creates what is missing) or not at all. A retry carrying
        the same ``request_id`` gets the first answer back instead of ALREADY_EXISTS.
        """
        with self.lock:
            if request_id and not dry_run:
                first = self.registry.answered(request_id)
                if first is not None:
                    return admission.Choice(dict(first["counts"]), tuple(first["reasons"]))
            if not dry_run and self.registry.workload(workload.name) is not None:
                raise ValueError(f"workload {workload.name} already exists")
            leftovers = {p.cluster for p in self.registry.placements(workload.name)}  # a deleted copy not yet removed
            choice = admission.choose(workload, self.views(), self.planner.topology, exclude=leftovers,
                                    learned=self.planner.learned_scores)
            if dry_run or not choice.ok:
                return choice
            with self.store.tx():
                self.registry.put_workload(workload)
                for cluster, count in sorted(choice.counts.items()):
                    self.registry.set_placement(Placement(workload.name, cluster, count, 1))
                self._record(DecisionRecord(self.clock(), "place", workload.name, "", ",".join(sorted(choice.counts)), choice.reasons))
                if request_id:
                    self.registry.remember_request(request_id, workload.name, {"counts": choice.counts, "reasons": list(choice.reasons)})
            created: list[str] = []
            try:
                for cluster, count in sorted(choice.counts.items()):
                    try:
                        self.backends(cluster).create_workload(workload.spec(count, 1, scheduler_name=self.registry.scheduler_name(cluster)))
                    except errors.Conflict:
                        pass
                    created.append(cluster)
            except errors.BackendError:
                self._unsubmit(workload.name, created)
                raise
            return choice

    def _unsubmit(self, name: str, created: list[str]) -> None:
        """Undo a submission that failed half way: nothing of it stays anywhere."""
        for cluster in created:
            try:
                self.backends(cluster).delete_workload(name)
            except errors.BackendError:
                pass
        with self.store.tx():
            for p in self.registry.placements(name):
                self.registry.drop_placement(name, p.cluster)
            self.registry.drop_workload(name)
            self.registry.forget_requests(name)

    def delete_workload(self, name: str, now: float) -> tuple[list[str], list[str]]:
        """Remove a workload everywhere; returns (clusters it was removed from, unreachable ones).

        Its migrations are cancelled; an unreachable cluster keeps a ``stale`` placement of 0
        replicas, which cleanup deletes once the cluster answers. The name can be submitted again.
        """
        with self.lock:
            if self.registry.workload(name) is None:
                raise KeyError(f"unknown workload {name!r}")
            moving = [m for m in self.journal.active() if m.workload == name]
            where = {p.cluster: p for p in self.registry.placements(name)}
            clusters = sorted(set(where) | {m.target for m in moving} | {m.source for m in moving})
            removed, pending = [], []
            for cluster in clusters:
                try:
                    self.backends(cluster).delete_workload(name)
                except errors.NotFound:
                    pass
                except errors.BackendError:
                    pending.append(cluster)
                    continue
                removed.append(cluster)
            with self.store.tx():
                for m in moving:
                    self.executor.close(m, MigrationState.CANCELLED, "workload deleted", now)
                for cluster in clusters:
                    self.registry.drop_placement(name, cluster)
                for cluster in pending:
                    self.registry.set_placement(Placement(name, cluster, 0, where[cluster].epoch if cluster in where else 0, PlacementState.STALE))
                self.registry.drop_homes(name)
                self.registry.drop_workload(name)
                self.registry.forget_requests(name)
                reasons = ("deleted by operator",) + ((f"still on unreachable {', '.join(pending)}: removed when it answers",) if pending else ())
                self._record(DecisionRecord(now, "delete", name, ",".join(removed), "", reasons))
            return removed, pending

    def restore(self, now: float, adopt: bool = False) -> list[str]:
        """Make the clusters hold what the store says they should (on start and on takeover).

        Every placed replica count is created where it is missing (an embedded twin starts
        empty after a restart; a member cluster may have lost a Deployment), at a bumped fencing
        epoch, or scaled up where
        short; nothing is scaled down here, so a migration in flight (resumed from the journal
        by the executor) is never undone. An unreachable cluster is left to failover. Returns
        what was repaired, also recorded as a decision. ``adopt`` (a take-over): an embedded twin whose agents bind
        rebuilds at the same epoch and adopts what agents run (:mod:`controlplane.adopting`).
        """
        repaired: list[str] = []
        with self.lock:
            workloads = {w.name: w for w in self.registry.workloads()}
            for p in self.registry.placements():
                w = workloads.get(p.workload)
                if w is None or p.state is not PlacementState.PLACED or not p.replicas:
                    continue
                try:
                    backend = self.backends(p.cluster)
                    try:
                        have = backend.get_workload(p.workload).spec.replicas
                    except errors.NotFound:
                        if adopt and isinstance(backend, TwinCluster) and backend.binder is Binder.EXTERNAL:
                            backend.create_workload(w.spec(p.replicas, p.epoch, scheduler_name=self.registry.scheduler_name(p.cluster)))
                            self.adopting.start(p.cluster, (s.name for s in backend.list_pods(p.workload)), now)
                            repaired.append(f"{p.workload}: {p.replicas} replicas rebuilt on {p.cluster} at epoch {p.epoch}: agents' copies adopted")
                            continue
                        # a new incarnation gets a new fencing epoch: binders (edge agents) that still
                        # hold claims on the lost pods' (pod, epoch) would otherwise never bind them again
                        with self.store.tx():
                            epoch = self.registry.bump_epoch(p.workload)
                            self.registry.set_placement(Placement(p.workload, p.cluster, p.replicas, epoch))
                        backend.create_workload(w.spec(p.replicas, epoch, scheduler_name=self.registry.scheduler_name(p.cluster)))
                        repaired.append(f"{p.workload}: {p.replicas} replicas re-created on {p.cluster} (epoch {p.epoch} -> {epoch})")
                        continue
                    if have < p.replicas:
                        backend.scale_workload(p.workload, p.replicas)
                        repaired.append(f"{p.workload}: scaled {have} -> {p.replicas} on {p.cluster}")
                except errors.BackendError as exc:
                    repaired.append(f"{p.workload}: {p.cluster} not restored now ({exc})")
            if repaired:
                self._record(DecisionRecord(now, "restore", "", "", "", tuple(repaired)))
        return repaired

    def start_migration(self, workload: str, source: str, target: str, now: float, force: bool = False) -> Migration:
        """An operator's migration. A named target must satisfy the workload's placement policy
        unless ``force`` is given (then the decision records what policy it overrode)."""
        with self.lock:
            w = self.registry.workload(workload)
            if w is None:
                raise KeyError(f"unknown workload {workload!r}")
            here = {p.cluster: p for p in self.registry.placements(workload) if p.state is PlacementState.PLACED}
            if source not in here:
                raise ValueError(f"workload {workload} has no replicas on {source!r} (it runs on {', '.join(sorted(here)) or 'nothing'})")
            reasons: tuple[str, ...] = ("requested by operator",)
            if not target:
                failed = {c for c, (v, _) in self.verdicts.items() if v.health.failed}
                already = {c: p.replicas for c, p in here.items() if c != source}
                choice = admission.choose(w, self.views(), self.planner.topology, here[source].replicas, exclude=failed | {source}, already=already)
                if not choice.ok or len(choice.counts) != 1:
                    raise ValueError(f"no single target can take {workload} from {source}: {'; '.join(choice.reasons)}")
                target = next(iter(choice.counts))
            if target == source:
                raise ValueError("source and target are the same cluster")
            self.backends(target)
            view = next((v for v in self.views() if v.name == target), None)
            broken = admission.policy_violations(w, view) if view is not None else []
            if broken and not force:
                raise ValueError(f"{target} breaks {workload}'s placement policy ({'; '.join(broken)}); pass --force to move it anyway")
            if broken:
                reasons += (f"forced past the placement policy: {'; '.join(broken)}",)
            plan = Plan(Kind.MANUAL, workload, source, target, here[source].replicas,
                        (here[target].replicas if target in here else 0) + here[source].replicas, reasons)
            return self._start(plan, now)

    def cancel_migration(self, mid: str, now: float) -> Migration:
        with self.lock:
            return self.executor.cancel(mid, now)

    def clusters(self) -> list[ClusterRow]:
        with self.lock:
            now = self.clock()
            rows, used = [], self._used()  # one registry read, not one per cluster
            for spec in self.registry.clusters():
                verdict, since = self.verdicts.get(spec.name, (Verdict(Health.UNKNOWN, ("not judged yet",)), now))
                ev = self.evidence.about(spec.name, now)
                cap = self.capacities.of(spec.name, ev.nodes)[2]
                load = self.loads.get(spec.name, Load(0.0, 0.0))
                rows.append(ClusterRow(spec, verdict, since, cap, used.get(spec.name, Resources()), load.now, load.forecast,
                                       len(ev.nodes), ev.agents_fresh, self.contexts.get(spec.name)))
            return rows

    def agents(self, cluster: str = "") -> list[tuple[str, Health, list[NodeState], list[AgentRow]]]:
        """Per cluster (all, or just ``cluster``): its verdict, its nodes as its API lists them, its agents as they report
        (their pods as the back end binds them now: a cut-off agent's last word outlives its pods)."""
        with self.lock:
            now = self.clock()
            names = [s.name for s in self.registry.clusters()]
            if cluster and cluster not in names:
                raise KeyError(f"unknown cluster {cluster!r}")
            return [(name, self.verdicts.get(name, (Verdict(Health.UNKNOWN, ()), now))[0].health,
                     self.evidence.nodes(name), agentviews.as_backend_sees(self.backends, name, self.evidence.agents(name, now)))
                    for name in names if not cluster or name == cluster]

    # -- the reconcile tick ---------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        with self.lock, self.metrics.tick.time():
            self.evidence.fresh_s = self.pacing.fresh_for(len(self.evidence), self.backpressure.slowdown)
            specs = self.registry.clusters()
            for spec in specs:
                self._probe(spec.name, now)
            self.expected.learn(self.evidence.reports.keys())
            for cluster, n in self.adopting.close(self.backends.twins(), self.expected.nodes, now).items():
                self._record(DecisionRecord(now, "adoption-closed", "", cluster, "", (f"{n} rebuilt pods no agent runs: a new epoch",)))
            seen = {spec.name: self._judge(spec.name, now) for spec in specs}  # the evidence, read once a tick
            listed, placements = self.registry.workloads(), self.registry.placements()
            used = admission.used_by_cluster(listed, placements)  # once a tick: loads and views read the same
            batch = admission.used_by_cluster(listed, placements, "batch")
            self._measure_loads(now, used, batch, seen)
            workloads = {w.name: w for w in listed}
            self._update_contexts(specs, workloads, placements, now)
            plans, notes = self.planner.plan(
                now, {c: v for c, (v, _) in self.verdicts.items()}, self.views(used, specs, batch), self.loads,
                workloads, placements, self.journal.active(),
                self.registry.homes(), self._healthy_since(), self.wall(),
            )
            for first in range(0, len(notes), PLANS_PER_COMMIT):
                with self.store.tx():
                    for note in notes[first:first + PLANS_PER_COMMIT]:
                        self._record(DecisionRecord(now, "unplaced", "", "", "", (note,)))
            for first in range(0, len(plans), PLANS_PER_COMMIT):
                with self.store.tx():
                    for plan in plans[first:first + PLANS_PER_COMMIT]:
                        self._start(plan, now)
            self.metrics.migration_queue.set(sum(1 for m in self.journal.active() if m.next_at <= now))
            self.executor.advance(now)
            self.metrics.migrations_active.set(len(self.journal.active()))
            self.retiring.cleanup(now, {c: v for c, (v, _) in self.verdicts.items()})
            self.autoscaling.tick(now)
            failed = {c for c, (v, _) in self.verdicts.items() if v.health.failed}
            self.colocation.round(now, [s.name for s in specs if s.name not in failed], self.backends, self.evidence, workloads, placements)

    def failback_preview(self, now: float) -> list[returning.Pending]:
        """What failback would move now and why the rest waits (``migrate --dry-run``); changes nothing."""
        with self.lock:
            x = returning.Inputs(now, self.wall(), self.planner.config.return_after_s, self._healthy_since(), self.planner.falls)
            return self.planner.failback_preview(x, self.registry.homes(), {w.name: w for w in self.registry.workloads()},
                                                 self.registry.placements(), {m.workload for m in self.journal.active()})

    def _healthy_since(self) -> dict[str, float]:
        return {c: since for c, (v, since) in self.verdicts.items() if v.health is Health.HEALTHY}

    def views(self, used: Mapping[str, Resources] | None = None, specs: Sequence[ClusterSpec] = (),
              batch: Mapping[str, Resources] | None = None) -> list[admission.ClusterView]:
        """``used``: what placements request per cluster, ``batch`` the batch part of it (None: read from the registry)."""
        used, batch = self._used() if used is None else used, self._used("batch") if batch is None else batch
        views = []
        for spec in specs or self.registry.clusters():
            pools, skipped, _ready = self.capacities.of(spec.name, self.evidence.listing(spec.name))
            self._note_skipped(spec.name, skipped)
            verdict = self.verdicts.get(spec.name, (Verdict(Health.UNKNOWN, ()), 0.0))[0]
            views.append(admission.ClusterView(spec.name, spec.region, pools, used.get(spec.name, Resources()), dict(spec.labels), verdict.taints,
                                               self.colocation.reclaimed(spec.name), batch.get(spec.name, Resources())))
        return views

    # -- internals -----------------------------------------------------------------------------------
    def _attach(self, spec: ClusterSpec) -> None:
        self.backends.ensure(spec)
        if spec.name not in self.planner.topology.clusters:
            self.planner.topology.add(Cluster(spec.name, spec.region))

    def _probe(self, cluster: str, now: float) -> None:
        nodes: list[NodeState] | None
        try:
            nodes, error = self.backends(cluster).list_nodes(), ""
        except errors.BackendError as exc:
            nodes, error = None, str(exc)
        self.evidence.add_probe(cluster, now, nodes, error)

    def _judge(self, cluster: str, now: float) -> ClusterEvidence:
        """The cluster's verdict from its evidence now; returns the evidence read."""
        ev = self.evidence.about(cluster, now)
        verdict = judge(ev, self.timings, self.expected.count(cluster, ev.nodes))
        old = self.verdicts.get(cluster)
        if old is None or old[0].health is not verdict.health:
            self.verdicts[cluster] = (verdict, now)
            self.metrics.verdict(cluster, verdict.health)
            self._record(DecisionRecord(now, f"verdict:{verdict.health.value}", "", cluster, "", verdict.reasons))
        else:
            self.verdicts[cluster] = (verdict, old[1])
        return ev

    def _note_skipped(self, cluster: str, skipped: list[tuple[str, str]]) -> None:
        """Nodes placement leaves out: a gauge per cluster, and one warning per node and reason."""
        self.metrics.nodes_skipped.labels(cluster).set(len(skipped))
        for node, reason in skipped:
            if (cluster, node, reason) not in self._warned:
                self._warned.add((cluster, node, reason))
                log.warning("cluster %s: node %s is left out of placement: %s", cluster, node, reason)

    def _used(self, qos: str = "") -> dict[str, Resources]:
        return admission.used_by_cluster(self.registry.workloads(), self.registry.placements(), qos)

    def _update_contexts(self, specs: Sequence[ClusterSpec], workloads: Mapping[str, Workload], placements: Sequence[Placement],
                         now: float) -> None:
        if now < self._contexts_from:
            return
        observed = self.podtypes.update(workloads, placements, self.evidence)
        for spec in specs:
            before = self.contexts.get(spec.name)
            types, biggest = observed.get(spec.name, (None, (0, 0)))
            context = self.contexts.update(spec.name, types, now, biggest) if spec.name in observed else before
            scorerjobs.show_scorer(self.metrics, spec.name, context)
            self.metrics.cpu_pressure.labels(spec.name).set(context.cpu_pressure)
            self.metrics.profile_shapes.labels(spec.name).set(len(context.profile.shapes) if context.profile else 0)
            if context is not before:
                self.metrics.context_changes.labels(spec.name).inc()

    # -- the scorer selection (its worker runs off the tick: controlplane.server) ------------------------------
    def next_selection(self, now: float) -> Job | None:
        """The lookahead selection to start now, if one is due (:class:`~controlplane.selecting.Selector`)."""
        with self.lock:
            due = self.selections.due(self.contexts.sent(), now) if self.leading else None  # every probe interval: no store read
            if due is None:
                return None
            self.selections.start(*due, now)
            return scorerjobs.job(*due, self.selections, self.contexts, self.registry, self.evidence)

    def adopt_selection(self, outcome: Outcome, now: float) -> WorkloadContext:
        """A finished selection into the cluster's context (:func:`controlplane.scorerjobs.adopt`)."""
        with self.lock:
            return scorerjobs.adopt(outcome, now, self.contexts, self.selections, self.metrics, self._record, self.leading)

    def _measure_loads(self, now: float, used: Mapping[str, Resources], batch: Mapping[str, Resources],
                       seen: Mapping[str, ClusterEvidence]) -> None:
        """Each cluster's online load (:func:`controlplane.planner.online_load`: batch does not push online work away);
        ``seen``: the evidence this tick judged by."""
        for cluster in self.verdicts:
            ev = seen[cluster] if cluster in seen else self.evidence.about(cluster, now)
            cap = self.capacities.of(cluster, ev.nodes)[2]
            booked = _summed([s.allocated for s in ev.summaries])  # what agents see allocated beyond our placements
            b = batch.get(cluster, Resources())
            load = online_load(cap, used.get(cluster, Resources()) - b, booked, b, self.colocation.held(cluster))
            if not cap.cpu_milli:  # unknown capacity: no basis for a rebalance
                continue
            fc = self.forecasts.setdefault(cluster, LoadForecast())
            fc.add(now, load)
            self.loads[cluster] = Load(load, fc.at(FORECAST_HORIZON_S))
            self.metrics.load.labels(cluster).set(load)
            self.metrics.forecast.labels(cluster).set(self.loads[cluster].forecast)

    def _start(self, plan: Plan, now: float) -> Migration:
        with self.store.tx():
            epoch = self.registry.bump_epoch(plan.workload)
            m = Migration(new_id(), plan.workload, plan.source, plan.target, plan.replicas, plan.target_total, epoch, plan.kind, reasons=plan.reasons)
            self._record(DecisionRecord(now, plan.kind.value, plan.workload, plan.source, plan.target, plan.reasons))
            if plan.kind is Kind.RETURN:
                self.registry.drop_home(Home(plan.workload, plan.target, plan.source, 0))
            return self.executor.start(m, now)

    def _record(self, d: DecisionRecord) -> None:
        self.registry.record_decision(d)
        logs.decision(d.kind, d.workload, d.source, d.target, d.reasons)


def _summed(parts: Sequence[Resources]) -> Resources:
    """The sum of ``parts``, added per field (a cluster's 100 agents' bookings every tick: one vector, not 100)."""
    return Resources(sum(r.cpu_milli for r in parts), sum(r.memory_mib for r in parts), sum(r.disk_mib for r in parts),
                     sum(r.gpu_milli for r in parts))
