"""The gRPC servicers: ``ControlPlane`` (registry, evidence, workloads, migrations, drills) and
``TwinCluster`` (the embedded twin clusters' API server for edge agents).

Handlers translate messages (:mod:`controlplane.convert`), run the blocking work in a thread
(back ends may be the synchronous Kubernetes client) and map errors to status codes:
bad input -> INVALID_ARGUMENT, unknown names -> NOT_FOUND, unreachable cluster -> UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import grpc

from controlplane import convert, limits
from controlplane.auth import Authenticator
from controlplane.campaigning import Leadership, Solo
from controlplane.registry import DECISIONS_KEEP
from controlplane.runtime import ControlPlane
from controlplane.store import Fenced, StoreUnavailable
from fedapi import controlplane_pb2 as cp, controlplane_pb2_grpc, twincluster_pb2 as tw, twincluster_pb2_grpc
from fedcore.backends import errors
from fedcore.backends.model import BindOutcome, BindResult, Phase
from fedcore.backends.twin import TwinCluster

T = TypeVar("T")
DrillRunner = Callable[[str, int, int], dict[str, Any]]
WATCH_POLL_S = 0.05
MAX_DRILL_RUNS = 1000  # as the CLI's --runs


class Wakeup:
    """Wakes a watch stream when its twin has a new event, from whichever thread made it (a bind's, the tick's): one
    callback on the loop until it has run, however many events come meanwhile. Without it an event waited for the
    stream's next poll (up to ``WATCH_POLL_S``) at each hop: the agent's watch, then whoever watches the bind."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.event = loop, asyncio.Event()
        self._due = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            if self._due:
                return
            self._due = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the plane stops, no stream is left to wake
            self.loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        with self._lock:
            self._due = False
        self.event.set()


LEADER_KEY = "fedplane-leader"  # trailing metadata: where writes go when this member does not lead


async def _abort(ctx: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """Abort with ``exc``'s status code and message, the message cut to ``limits.MAX_DETAILS`` characters: it may quote
    the request (a name of a megabyte), and details travel in trailing metadata, which clients refuse past ~8 KiB."""
    text = (str(exc.args[0]) if exc.args else "not found") if isinstance(exc, KeyError) else str(exc)
    text = text if len(text) <= limits.MAX_DETAILS else f"{text[:limits.MAX_DETAILS]}... ({len(text)} characters)"
    if isinstance(exc, Fenced):
        await ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, text)
    if isinstance(exc, StoreUnavailable):
        await ctx.abort(grpc.StatusCode.UNAVAILABLE, text)
    if isinstance(exc, (KeyError, errors.UnknownCluster, errors.NotFound)):
        await ctx.abort(grpc.StatusCode.NOT_FOUND, text)
    if isinstance(exc, errors.TemporaryError):
        await ctx.abort(grpc.StatusCode.UNAVAILABLE, text)
    if isinstance(exc, (ValueError, errors.PermanentError)):
        code = grpc.StatusCode.ALREADY_EXISTS if "already exists" in text else grpc.StatusCode.INVALID_ARGUMENT
        await ctx.abort(code, text)
    raise exc


ANSWERED = (errors.BackendError, ValueError, KeyError, Fenced, StoreUnavailable)
"""What a back-end or plane call may raise that is answered with a status code (:func:`_abort`), not a traceback."""


async def _run(ctx: grpc.aio.ServicerContext, fn: Callable[..., T], *args: Any) -> T:
    try:
        return await asyncio.to_thread(fn, *args)
    except ANSWERED as exc:
        await _abort(ctx, exc)


async def _uncontended(ctx: grpc.aio.ServicerContext, twin: TwinCluster, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a short call on ``twin``, on the event loop when nobody holds the twin's lock (a bind takes tens of
    microseconds; its hop to a worker thread and back cost more, each of a region failover's 10,000 binds), else in a
    worker thread as :func:`_run` (the tick may hold the lock for a whole workload's pods: the loop never waits on it)."""
    if not twin.lock.acquire(blocking=False):
        return await _run(ctx, fn, *args)
    try:
        return fn(*args)
    except ANSWERED as exc:
        failure: BaseException = exc
    finally:
        twin.lock.release()
    await _abort(ctx, failure)  # after the release: aborting may suspend, and another call on this thread could take the lock


async def report_agent(plane: ControlPlane, request: cp.AgentReport, context: Any, members: Sequence[str] = ()) -> cp.AgentAck:
    """One agent's report into the evidence book, over gRPC or the twin link; the ack carries its cluster's workload context
    and, while a rebuilt twin waits for its agents, asks for the pods the agent runs, which are adopted (controlplane.adopting);
    ``members``: every member's agents' link, the leader's first (an agent told of one member learns the others)."""
    try:
        report = convert.agent_report(request)
    except ValueError as exc:
        await _abort(context, exc)
    accepted = plane.report(report)
    if request.held:
        await asyncio.to_thread(plane.adopt, report.cluster, report.node, [(h.pod, h.epoch) for h in request.held])
    return cp.AgentAck(
        accepted=accepted, server_time_ms=int(plane.clock() * 1000),
        report_interval_ms=round(plane.report_interval_s() * 1000),
        reason="" if accepted else f"sequence {request.sequence} is not newer than the last one from {request.agent_id}",
        context=convert.workload_context(plane.contexts.get(report.cluster)),
        send_held=plane.adopting.wanted(report.cluster, report.node), members=members,
        offer=convert.batch_offer(plane.colocation.offer(report.cluster, report.node)), takes_heard=True,
    )


class ControlPlaneService(controlplane_pb2_grpc.ControlPlaneServicer):
    def __init__(self, plane: ControlPlane, drills: DrillRunner, leadership: Leadership = Solo(), auth: Authenticator | None = None) -> None:
        """``auth``: where credentials are issued (None: this plane checks none, and issues none)."""
        self.plane, self.drills, self.leadership, self.auth = plane, drills, leadership, auth

    async def _lead(self, context: grpc.aio.ServicerContext) -> None:
        """Writes only on the leader: a standby names it (message and ``fedplane-leader`` trailing metadata)."""
        if self.leadership.is_leader:
            return
        self.leadership.refuse()
        leader = self.leadership.leader()
        where = leader.address if leader is not None and leader.member != self.leadership.member else ""
        context.set_trailing_metadata(((LEADER_KEY, where),))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                            f"not the leader: send writes to {where}" if where else "not the leader, and no leader is elected now: retry shortly")

    async def RegisterCluster(self, request: cp.RegisterClusterRequest, context: grpc.aio.ServicerContext) -> cp.ClusterStatus:
        await self._lead(context)
        try:
            spec = convert.cluster_spec(request.cluster)
        except ValueError as exc:
            await _abort(context, exc)
        if spec.kubeconfig and spec.kubeconfig not in {c.kubeconfig for c in await _run(context, self.plane.registry.clusters)}:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, (  # the server opens no path a client names
                "kubeconfig: leave it empty (the control plane's own $KUBECONFIG) or name one the control plane was started "
                "with (controlplane serve --kubeconfig); it opens no other path a client names"))
        await _run(context, self.plane.register_cluster, spec, request.force)
        rows = await _run(context, self.plane.clusters)
        return convert.cluster_status(next(r for r in rows if r.spec.name == spec.name))

    async def ListClusters(self, request: cp.ListClustersRequest, context: grpc.aio.ServicerContext) -> cp.ListClustersResponse:
        rows = await _run(context, self.plane.clusters)
        return cp.ListClustersResponse(clusters=[convert.cluster_status(r) for r in rows])

    async def ReportAgent(self, request: cp.AgentReport, context: grpc.aio.ServicerContext) -> cp.AgentAck:
        await self._lead(context)
        return await report_agent(self.plane, request, context, self.leadership.members)

    async def SubmitWorkload(self, request: cp.SubmitWorkloadRequest, context: grpc.aio.ServicerContext) -> cp.PlacementDecision:
        await self._lead(context)
        try:
            workload = convert.workload(request.workload)
            if workload.template.qos == "batch" and workload.template.priority < 0:
                raise ValueError(f"a batch workload's priority is its bid in the quota auction: it must be >= 0, got {workload.template.priority}")
        except ValueError as exc:
            await _abort(context, exc)
        if len(request.request_id) > 128 or not request.request_id.isprintable() or " " in request.request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id must be at most 128 printable characters without spaces")
        choice = await _run(context, self.plane.submit, workload, request.dry_run, request.request_id)
        return cp.PlacementDecision(
            workload=workload.name, accepted=choice.ok, dry_run=request.dry_run,
            placements=[cp.ClusterPlacement(cluster=c, replicas=n, epoch=1, state="planned" if request.dry_run else "placed")
                        for c, n in sorted(choice.counts.items())],
            reasons=convert.reasons(choice.reasons, "Placement"),
        )

    async def GetPlacements(self, request: cp.GetPlacementsRequest, context: grpc.aio.ServicerContext) -> cp.GetPlacementsResponse:
        return await _run(context, self._placements, request.workload)

    def _placements(self, name: str) -> cp.GetPlacementsResponse:
        reg = self.plane.registry
        names = [name] if name else [w.name for w in reg.workloads()]
        if name and reg.workload(name) is None:
            raise KeyError(f"unknown workload {name!r}")
        decisions = reg.decisions(1000)
        standby: tuple[str, ...] = ()
        if not self.leadership.is_leader:  # the clusters are the leader's to watch: a standby knows desired state, not readiness
            leader = self.leadership.leader()
            standby = (f"answered by a standby: ready counts are known by the leader{f' at {leader.address}' if leader else ''}",)
        out = []
        for n in names:
            rows = reg.placements(n)
            ready = {}
            for p in rows:
                try:
                    ready[p.cluster] = self.plane.backends(p.cluster).get_workload(n).ready_replicas
                except errors.BackendError:
                    ready[p.cluster] = 0
            why = next((d.reasons for d in decisions if d.workload == n), ())
            w = reg.workload(n)
            out.append(convert.placements(n, rows, ready, standby + why, w.template.qos if w else "",
                                          lambda cluster, n=n: self.plane.colocation.share(n, cluster)))
        return cp.GetPlacementsResponse(workloads=out)

    async def StartMigration(self, request: cp.StartMigrationRequest, context: grpc.aio.ServicerContext) -> cp.Migration:
        await self._lead(context)
        m = await _run(context, self.plane.start_migration, request.workload, request.source, request.target, self.plane.clock(), request.force)
        return convert.migration(m)

    async def DeleteWorkload(self, request: cp.DeleteWorkloadRequest, context: grpc.aio.ServicerContext) -> cp.DeleteWorkloadResponse:
        await self._lead(context)
        removed, pending = await _run(context, self.plane.delete_workload, request.workload, self.plane.clock())
        return cp.DeleteWorkloadResponse(workload=request.workload, removed_from=removed, pending=pending)

    async def GetLeader(self, request: cp.GetLeaderRequest, context: grpc.aio.ServicerContext) -> cp.LeaderInfo:
        leader = self.leadership.leader()
        return cp.LeaderInfo(is_leader=self.leadership.is_leader, leader=leader.address if leader else "",
                             fencing_token=leader.token if leader else 0, member=self.leadership.member,
                             writes_refused=self.leadership.refused, take_over_s=self.leadership.took_over_s)

    async def CancelMigration(self, request: cp.CancelMigrationRequest, context: grpc.aio.ServicerContext) -> cp.Migration:
        await self._lead(context)
        m = await _run(context, self.plane.cancel_migration, request.id, self.plane.clock())
        return convert.migration(m)

    async def ListMigrations(self, request: cp.ListMigrationsRequest, context: grpc.aio.ServicerContext) -> cp.ListMigrationsResponse:
        if request.failback_dry_run:
            return cp.ListMigrationsResponse(migrations=convert.failback_preview(self.plane.failback_preview(self.plane.clock())))
        found = self.plane.journal.active() if request.active_only else self.plane.journal.all()
        return cp.ListMigrationsResponse(migrations=[convert.migration(m) for m in found])

    async def ListDecisions(self, request: cp.ListDecisionsRequest, context: grpc.aio.ServicerContext) -> cp.ListDecisionsResponse:
        if not 0 <= request.limit <= DECISIONS_KEEP:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"limit must be in 0..{DECISIONS_KEEP} (0: 100), got {request.limit}")
        found = self.plane.registry.decisions(request.limit or 100)
        return cp.ListDecisionsResponse(decisions=[
            cp.Decision(at_ms=int(d.at * 1000), kind=d.kind, workload=d.workload, source=d.source, target=d.target,
                        reasons=convert.reasons(d.reasons)) for d in found
        ])

    async def ListAgents(self, request: cp.ListAgentsRequest, context: grpc.aio.ServicerContext) -> cp.ListAgentsResponse:
        rows = await _run(context, self.plane.agents, request.cluster)
        return cp.ListAgentsResponse(clusters=[convert.cluster_agents(*row) for row in rows])

    async def IssueCredential(self, request: cp.IssueCredentialRequest, context: grpc.aio.ServicerContext) -> cp.IssuedCredential:
        """Any member issues (credentials are added, never changed: no leader needed; etcd keeps them for all)."""
        if self.auth is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this control plane runs --insecure: it checks no credentials and issues none")
        token = await _run(context, self.auth.issue, request.role, request.cluster, request.node)
        return cp.IssuedCredential(token=token, role=request.role, cluster=request.cluster, node=request.node)

    async def RunDrill(self, request: cp.RunDrillRequest, context: grpc.aio.ServicerContext) -> cp.DrillReport:
        if not 0 <= request.runs <= MAX_DRILL_RUNS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"runs must be in 0..{MAX_DRILL_RUNS} (0: 1), got {request.runs}")
        report = await _run(context, self.drills, request.scenario, request.runs or 1, request.seed)
        return cp.DrillReport(
            scenario=report["scenario"], runs=report["runs"], detect_s_median=report["detect_s_median"],
            recovery_s_p50=report["recovery_s_p50"], recovery_s_p99=report["recovery_s_p99"],
            success_rate=report["success_rate"], pods_lost=report["pods_lost"], pods_duplicated=report["pods_duplicated"],
            json=json.dumps(report),
        )


def not_leading(leadership: Leadership) -> Fenced:
    """A standby's answer to an agent: the twins live in the leader only, so it names the leader's link."""
    leader = leadership.leader()
    where = leader.link if leader is not None and leader.member != leadership.member else ""
    return Fenced(f"not the leader: {where}" if where else "not the leader, and no leader is elected now: retry shortly")


class TwinClusterService(twincluster_pb2_grpc.TwinClusterServicer):
    def __init__(self, plane: ControlPlane, leadership: Leadership = Solo()) -> None:
        self.plane, self.leadership = plane, leadership

    def _twin(self, name: str) -> TwinCluster:
        if not self.leadership.is_leader:
            raise not_leading(self.leadership)
        twin = self.plane.backends.twins().get(name)
        if twin is None:
            raise errors.UnknownCluster(name, "no embedded twin cluster of this name")
        return twin

    async def _found(self, context: grpc.aio.ServicerContext, name: str) -> TwinCluster:
        """:meth:`_twin` on the event loop: a dict read needs no thread hop (each of a region failover's 10,000 binds
        paid one before its bind's own)."""
        try:
            return self._twin(name)
        except (errors.BackendError, Fenced) as exc:
            await _abort(context, exc)

    async def WatchPods(self, request: tw.WatchPodsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[tw.PodEvent]:
        try:
            twin = self._twin(request.cluster)
            cursor = twin.cursor()
            current = await asyncio.to_thread(twin.list_pods)
        except (errors.BackendError, Fenced) as exc:
            await _abort(context, exc)
        for state in current:
            if not request.pending_only or (state.phase is Phase.PENDING and not state.node):
                yield tw.PodEvent(type=tw.EVENT_ADDED, pod=convert.pod(state))
        wakeup = Wakeup(asyncio.get_running_loop())
        forget = twin.listen(wakeup)
        try:
            while True:
                wakeup.event.clear()
                try:
                    events, cursor = twin.events_since(cursor)
                except errors.BackendError as exc:
                    await _abort(context, exc)
                for e in events:
                    if not request.pending_only or e.pod.phase is Phase.PENDING or e.kind.value == "DELETED":
                        yield convert.pod_event(e)
                with contextlib.suppress(TimeoutError):  # the poll: the twin's clock moves pods without an event
                    await asyncio.wait_for(wakeup.event.wait(), WATCH_POLL_S)
        finally:
            forget()

    async def BindPod(self, request: tw.BindPodRequest, context: grpc.aio.ServicerContext) -> tw.BindPodResponse:
        twin = await self._found(context, request.cluster)
        stale = self.plane.colocation.refusal(request.cluster, request.node, request.reclaimed_milli)
        if stale:
            return convert.bind_result(BindResult(BindOutcome.REJECTED, request.node, request.epoch, stale))
        return convert.bind_result(await _uncontended(context, twin, twin.bind_pod, request.pod, request.node, request.epoch,
                                                      tuple(request.gpus), request.reclaimed_milli))

    async def ReportNodeStatus(self, request: tw.NodeStatusReport, context: grpc.aio.ServicerContext) -> tw.NodeStatusAck:
        twin = await self._found(context, request.cluster)
        return tw.NodeStatusAck(pods_released=await _run(context, twin.mark_node, request.node, request.ready))

    async def CompletePod(self, request: tw.CompletePodRequest, context: grpc.aio.ServicerContext) -> tw.BindPodResponse:
        twin = await self._found(context, request.cluster)
        return convert.bind_result(await _run(context, twin.complete_pod, request.pod, request.epoch, request.succeeded))

    async def ListNodes(self, request: tw.ListNodesRequest, context: grpc.aio.ServicerContext) -> tw.ListNodesResponse:
        twin = await self._found(context, request.cluster)
        return tw.ListNodesResponse(nodes=[convert.node(n) for n in await _run(context, twin.list_nodes)])

    async def DescribeNode(self, request: tw.DescribeNodeRequest, context: grpc.aio.ServicerContext) -> tw.Node:
        twin = await self._found(context, request.cluster)
        node = await _run(context, twin.describe_node, request.node)
        return convert.full_node(node, bool(twin.table.alive[twin.table.index[node.name]]))

    async def ReportAgent(self, request: cp.AgentReport, context: grpc.aio.ServicerContext) -> cp.AgentAck:
        """An agent's own report; refused while its cluster is cut off (a twin partition or outage covers the
        agents' path to us too, as on a real network the twin link is that path)."""
        if not self.leadership.is_leader:
            await _abort(context, not_leading(self.leadership))
        twin = self.plane.backends.twins().get(request.cluster)
        if twin is not None and not twin.reachable:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cluster {request.cluster} is cut off from the control plane")
        return await report_agent(self.plane, request, context, self.leadership.members)

    async def GetSafety(self, request: tw.GetSafetyRequest, context: grpc.aio.ServicerContext) -> tw.SafetyCounters:
        twin = await self._found(context, request.cluster)
        return tw.SafetyCounters(duplicate_binds=twin.safety.duplicate_binds, stale_binds=twin.safety.stale_binds)
