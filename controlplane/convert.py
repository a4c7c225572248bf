"""Translation between fedapi messages and the control plane's domain types (both directions).

Bad input (unknown enum, invalid name, negative request) raises ``ValueError`` with a message
the service returns as INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Callable

from fedapi import common_pb2, controlplane_pb2 as cp, twincluster_pb2 as tw
from fedapi.workloadcontext import LEARNED, NONE, WorkloadContext
from controlplane import limits
from fedcore.pods import class_of
from controlplane import returning
from controlplane.colocating import Offer, Share
from controlplane.failbacks import DEFAULT_WINDOW_S, Failback, mode_of
from controlplane.evidence import AgentReport, AgentRow, NodeSummary, PeerState
from controlplane.journal import Migration, MigrationState
from controlplane.registry import BackendKind, ClusterSpec, Placement, Placer
from controlplane.runtime import ClusterRow
from controlplane.verdicts import Health
from controlplane.workloads import Policy, Spread, Template, Workload
from fedcore.backends.model import PAUSE_IMAGE, BindOutcome, BindResult, EventKind, NodeState, Phase, PodEvent, PodState
from fedcore.nodes import Node
from fedcore.resources import Resources

HEALTH = {h: getattr(cp, f"HEALTH_{h.name}") for h in Health}
MIGRATION_STATE = {s: getattr(cp, f"MIGRATION_{s.name}") for s in MigrationState}
PEER = {cp.PEER_ALIVE: PeerState.ALIVE, cp.PEER_SUSPECT: PeerState.SUSPECT, cp.PEER_DEAD: PeerState.DEAD, cp.PEER_LEFT: PeerState.LEFT}
SPREAD = {cp.SPREAD_NONE: Spread.NONE, cp.SPREAD_CLUSTERS: Spread.CLUSTERS, cp.SPREAD_REGIONS: Spread.REGIONS}
SPREAD_NUMBER = {spread: number for number, spread in SPREAD.items()}
BACKEND = {cp.BACKEND_TWIN: BackendKind.TWIN, cp.BACKEND_UNSPECIFIED: BackendKind.TWIN, cp.BACKEND_KUBERNETES: BackendKind.KUBERNETES}
PHASE = {Phase.PENDING: tw.POD_PENDING, Phase.RUNNING: tw.POD_RUNNING, Phase.SUCCEEDED: tw.POD_SUCCEEDED, Phase.FAILED: tw.POD_FAILED}
EVENT = {EventKind.ADDED: tw.EVENT_ADDED, EventKind.MODIFIED: tw.EVENT_MODIFIED, EventKind.DELETED: tw.EVENT_DELETED}
BIND = {o: getattr(tw, f"BIND_{o.name}") for o in BindOutcome}


def resources(r: Resources) -> common_pb2.ResourceVector:
    return common_pb2.ResourceVector(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, disk_mib=r.disk_mib, gpu_milli=r.gpu_milli)


def from_resources(v: common_pb2.ResourceVector) -> Resources:
    return Resources(v.cpu_milli, v.memory_mib, v.disk_mib, v.gpu_milli)


def reasons(lines: tuple[str, ...] | list[str], code: str = "") -> list[common_pb2.Reason]:
    return [common_pb2.Reason(code=code, message=line) for line in lines]


def cluster_spec(m: cp.ClusterSpec) -> ClusterSpec:
    if m.backend not in BACKEND:
        raise ValueError(f"unknown backend {m.backend}")
    cap = m.twin_node_capacity
    return ClusterSpec(
        m.name, m.region, BACKEND[m.backend], m.kube_context, m.kubeconfig, dict(m.labels), m.twin_nodes or 4,
        int(cap.cpu_milli) or 8000, int(cap.memory_mib) or 32768, _placer(m.placer), int(cap.gpu_milli) // 1000,
    )


def _placer(value: str) -> Placer:
    try:
        return Placer(value or Placer.AGENTS.value)
    except ValueError:
        raise ValueError(f"unknown placer {value!r}; choose from {', '.join(p.value for p in Placer)}") from None


def to_cluster_spec(s: ClusterSpec) -> cp.ClusterSpec:
    backend = cp.BACKEND_TWIN if s.backend is BackendKind.TWIN else cp.BACKEND_KUBERNETES
    return cp.ClusterSpec(
        name=s.name, region=s.region, backend=backend, kube_context=s.kube_context, kubeconfig=s.kubeconfig,
        labels=s.labels, twin_nodes=s.twin_nodes, twin_node_capacity=common_pb2.ResourceVector(cpu_milli=s.twin_cpu_milli, memory_mib=s.twin_memory_mib,
                                                                                      gpu_milli=s.twin_gpus * 1000),
        placer=s.placer.value,
    )


def cluster_status(row: ClusterRow) -> cp.ClusterStatus:
    return cp.ClusterStatus(
        spec=to_cluster_spec(row.spec),
        verdict=cp.Verdict(health=HEALTH[row.verdict.health], reasons=reasons(row.verdict.reasons, row.verdict.health.value), since_ms=int(row.since * 1000)),
        capacity=resources(row.capacity), allocated=resources(row.used), load=row.load, load_forecast=row.forecast,
        taints=[f"{t.key}={t.value}:{t.effect.value}" for t in row.verdict.taints], nodes=row.nodes, agents_reporting=row.agents,
        context=workload_context(row.context),
    )


def workload_context(c: WorkloadContext) -> cp.WorkloadContext | None:
    """The message of a context; None (the field left absent) for no context, as an older control plane sends."""
    if not c.known:
        return None
    profile = cp.PodTypes(**c.profile.to_wire()) if c.profile is not None else None
    return cp.WorkloadContext(cpu_pressure=c.cpu_pressure, version=c.version, profile=profile,
                              scorer="" if c.scorer == LEARNED else c.scorer, max_cpu_milli=c.max_cpu_milli, max_gpus=c.max_gpus)


def from_workload_context(m: cp.WorkloadContext) -> WorkloadContext:
    """An agent's word on what it scores with (its version names the profile, which a report does not carry) and the
    scorer family it places with.

    Raises ValueError naming the bad value (NaN, negative, huge, an unknown scorer family)."""
    try:
        return WorkloadContext(m.cpu_pressure, m.version, scorer=m.scorer or LEARNED)
    except ValueError as exc:
        raise ValueError(f"workload context: {exc}") from None


def agent_report(m: cp.AgentReport) -> AgentReport:
    if not m.cluster or not m.node or not m.agent_id:
        raise ValueError("an agent report needs cluster, node and agent_id")
    for what, value in (("cluster", m.cluster), ("node", m.node), ("agent_id", m.agent_id), ("model_version", m.summary.model_version)):
        limits.text(f"agent report {what}", value)
    limits.text("agent report health_reason", m.health_reason, 1024, printable=False)
    limits.entries("agent report peers", m.peers, limits.MAX_TWIN_NODES)
    s = m.summary
    for name, v in (("capacity", s.capacity), ("allocated", s.allocated)):
        if min(v.cpu_milli, v.memory_mib, v.disk_mib, v.gpu_milli) < 0:
            raise ValueError(f"agent {m.agent_id}: its node's {name} must be non-negative")
    if s.online_measured and s.online_used_milli < 0:
        raise ValueError(f"agent {m.agent_id}: online_used_milli must be non-negative, got {s.online_used_milli}")
    summary = NodeSummary(s.node or m.node, from_resources(s.capacity), from_resources(s.allocated), s.pods, s.ready,
                          s.load, s.model_version, s.online_used_milli if s.online_measured else None)
    peers = tuple((p.cluster or m.cluster, p.node, PEER.get(p.state, PeerState.SUSPECT)) for p in m.peers)
    heard = tuple((p.cluster or m.cluster, p.node, p.heard_ms / 1000) for p in m.peers if p.heard_ms)
    context = from_workload_context(m.context) if m.HasField("context") else NONE
    return AgentReport(m.cluster, m.node, m.agent_id, m.sequence, summary, peers, m.healthy, m.health_reason, context, heard)


def batch_offer(offer: Offer | None) -> cp.BatchOffer:
    """A node's batch offer for its agent's ack (unset ``colocated``: no batch in its cluster)."""
    if offer is None:
        return cp.BatchOffer()
    return cp.BatchOffer(colocated=True, reclaimed_milli=offer.reclaimed_milli, quota_milli=offer.quota_milli)


def cluster_agents(cluster: str, health: Health, nodes: list[NodeState], agents: list[AgentRow]) -> cp.ClusterAgents:
    by_node = {a.report.node: a.report.agent_id for a in agents}
    return cp.ClusterAgents(
        cluster=cluster, health=HEALTH[health],
        nodes=[cp.NodeListing(name=n.name, ready=n.ready, agent_id=by_node.get(n.name, "")) for n in nodes],
        agents=[cp.AgentListing(
            node=a.report.node, agent_id=a.report.agent_id, state=a.state, last_report_s=round(a.age, 3),
            healthy=a.report.healthy, health_reason=a.report.health_reason,
            peers_alive=a.peers(PeerState.ALIVE), peers_suspect=a.peers(PeerState.SUSPECT),
            peers_dead=a.peers(PeerState.DEAD) + a.peers(PeerState.LEFT), remote_alive=a.peers(PeerState.ALIVE, own=False),
            load=a.report.summary.load, model_version=a.report.summary.model_version, pods=a.report.summary.pods,
            context=workload_context(a.report.context),
        ) for a in agents],
    )


def workload(m: cp.WorkloadSpec) -> Workload:
    if m.policy.spread not in SPREAD:
        raise ValueError(f"unknown spread {m.policy.spread}")
    t, p = m.pod, m.policy
    template = Template(
        int(t.cpu_milli), int(t.memory_mib), t.gpus, t.gpu_model, tuple(t.archs),
        tuple((x.key, x.value, x.effect) for x in t.tolerations), dict(t.node_selector), t.priority,
        t.image or PAUSE_IMAGE, t.qos or "online",
    )
    failback = Failback(mode_of(p.failback), p.failback_window_s or DEFAULT_WINDOW_S, p.maintenance_window)
    policy = Policy(SPREAD[p.spread], tuple(p.clusters), tuple(p.regions), tuple(p.avoid_clusters), dict(p.cluster_labels),
                    p.movable, p.max_per_cluster, p.home_region, failback, p.group)
    return Workload(m.name, m.replicas, template, policy, m.stateful)


def to_workload(w: Workload) -> cp.WorkloadSpec:
    """The API form of a workload (the inverse of :func:`workload`; a property test round-trips every field)."""
    t, p = w.template, w.policy
    return cp.WorkloadSpec(
        name=w.name, replicas=w.replicas,
        pod=cp.PodTemplate(cpu_milli=t.cpu_milli, memory_mib=t.memory_mib, gpus=t.gpus, gpu_model=t.gpu_model, archs=list(t.archs),
                           tolerations=[common_pb2.Toleration(key=k, value=v, effect=e) for k, v, e in t.tolerations],
                           node_selector=t.node_selector, priority=t.priority, image=t.image, qos=t.qos),
        policy=cp.PlacementPolicy(spread=SPREAD_NUMBER[p.spread], clusters=p.clusters, regions=p.regions, avoid_clusters=p.avoid_clusters,
                                  cluster_labels=p.cluster_labels, movable=p.movable, max_per_cluster=p.max_per_cluster,
                                  home_region=p.home_region, failback=p.failback.mode.value, failback_window_s=p.failback.window_s,
                                  maintenance_window=p.failback.maintenance, group=p.group),
        stateful=w.stateful,
    )


def placements(name: str, rows: list[Placement], ready: dict[str, int], why: tuple[str, ...] = (), qos: str = "",
               shares: Callable[[str], Share] = lambda cluster: Share()) -> cp.PlacementDecision:
    """``shares``: a batch workload's reclaimed CPU and preemptions on a cluster (:mod:`controlplane.colocating`)."""
    return cp.PlacementDecision(
        workload=name, accepted=True, qos=qos,
        placements=[cp.ClusterPlacement(cluster=p.cluster, replicas=p.replicas, epoch=p.epoch, ready=ready.get(p.cluster, 0), state=p.state.value,
                                        reclaimed_milli=shares(p.cluster).reclaimed_milli, preemptions=shares(p.cluster).preemptions)
                    for p in rows],
        reasons=reasons(why),
    )


def migration(m: Migration) -> cp.Migration:
    return cp.Migration(
        id=m.id, workload=m.workload, source=m.source, target=m.target, replicas=m.replicas, epoch=m.epoch,
        state=MIGRATION_STATE[m.state], kind=m.kind.value, reasons=reasons(m.reasons), error=m.error, attempts=m.attempts,
    )


def failback_preview(pending: list[returning.Pending]) -> list[cp.Migration]:
    """The dry run of failback: each home's return as it would start now (``error`` empty), or why it waits."""
    out = []
    for p in pending:
        h = p.home
        for m in p.moves or (None,):
            why = m.reasons if m is not None else p.reasons
            out.append(cp.Migration(workload=h.workload, source=h.away, target=h.home, replicas=m.replicas if m else h.replicas,
                                    kind="return", reasons=reasons(why), error="" if m else "waits: " + "; ".join(p.reasons)))
    return out


def pod(p: PodState) -> tw.Pod:
    out = tw.Pod(name=p.name, workload=p.workload, epoch=p.epoch, phase=PHASE[p.phase], ready=p.ready, node=p.node, requests=resources(p.request))
    if p.spec is not None:
        s = p.spec
        out.spec.CopyFrom(tw.PodSpec(
            gpu_count=s.gpu.count, gpu_milli_each=s.gpu.milli_each, gpu_model=s.gpu_model, archs=sorted(a.value for a in s.archs),
            node_selector=s.node_selector, max_per_node=s.max_per_node, priority=s.priority, qos=class_of(s.qos),
            tolerations=[common_pb2.Toleration(key=t.key, value=t.value or "", effect=t.effect.value if t.effect else "") for t in s.tolerations],
        ))
    return out


def pod_event(e: PodEvent) -> tw.PodEvent:
    return tw.PodEvent(type=EVENT[e.kind], pod=pod(e.pod))


def bind_result(r: BindResult) -> tw.BindPodResponse:
    return tw.BindPodResponse(outcome=BIND[r.outcome], node=r.node, epoch=r.epoch, reason=r.reason)


def node(n: NodeState) -> tw.Node:
    return tw.Node(name=n.name, capacity=resources(n.capacity), ready=n.ready, arch=n.arch, labels=n.labels)


def full_node(n: Node, ready: bool) -> tw.Node:
    """A twin node with everything an agent's filters need (gpus, model, taints, topology)."""
    return tw.Node(
        name=n.name, capacity=resources(n.capacity), ready=ready, arch=n.arch.value, labels=n.labels, gpus=n.gpus,
        gpu_model=n.gpu_model, cluster=n.cluster, zone=n.zone, region=n.region,
        taints=[tw.Taint(key=t.key, value=t.value, effect=t.effect.value) for t in n.taints],
    )
