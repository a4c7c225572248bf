"""The control plane's sub-commands: ``fedplane controlplane …``, ``fedplane drill failover`` and ``fedplane demo``.

``serve`` runs the service; the other ``controlplane`` commands are gRPC clients of a running one
(``--target``, default ``$FEDPLANE_CONTROLPLANE``, else the credential's plane, else 127.0.0.1:50051), showing
the credential in ``--credentials`` or ``$FEDPLANE_CREDENTIALS`` (:mod:`fedapi.credentials`). gRPC errors and
bad input end with a clear message and exit code 2, never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import grpc
from google.protobuf.json_format import MessageToDict

from controlplane import quantities
from controlplane.printing import emit
from controlplane.cliclient import tls_options, tls_files, client_options, plane_target, connect, call
from controlplane.modelcommands import models
from fedapi import common_pb2, credentials
from fedapi import controlplane_pb2 as cp
from fedcore import reporting
from fedcore.commands import fail

if TYPE_CHECKING:
    from controlplane.auth import Authenticator

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
INT64_MAX = 2**63 - 1
"""Largest value of a proto ``int64`` field (CPU milli, memory MiB): click refuses more, naming the option."""
INT32_MAX = 2**31 - 1
SPREADS = {"none": cp.SPREAD_NONE, "clusters": cp.SPREAD_CLUSTERS, "regions": cp.SPREAD_REGIONS}


@click.group()
def controlplane() -> None:
    """The central control plane: serve it, or talk to a running one."""


@controlplane.command()
@click.option("--db", default="fedplane-controlplane.db", show_default=True, type=click.Path(dir_okay=False), help="SQLite file (registry and journal).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=50051, show_default=True, type=click.IntRange(0, 65535))
@click.option("--agent-port", default=7070, show_default=True, type=click.IntRange(0, 65535), help="Twin link port: where edge agents reach the twin clusters' API (0: any).")
@click.option("--metrics-port", default=9464, show_default=True, type=click.IntRange(-1, 65535), help="Prometheus /metrics port (-1: off, 0: any).")
@click.option("--ui-port", default=-1, show_default=True, type=click.IntRange(-1, 65535),
              help="Web console port (-1: off, 0: any): server-rendered pages, live over SSE; a viewer's token or better to read.")
@click.option("--twin-clusters", default=0, show_default=True, type=click.IntRange(0, 1000), help="Register N embedded twin clusters c0..cN-1.")
@click.option("--regions", default=2, show_default=True, type=click.IntRange(1, 100), help="Twin clusters are dealt round-robin into regions r0..")
@click.option("--twin-nodes", default=4, show_default=True, type=click.IntRange(1, 10_000), help="Nodes per twin cluster.")
@click.option("--ready-delay", default=0.5, show_default=True, type=click.FloatRange(0, 600), help="Twin pods become Ready this many seconds after binding.")
@click.option("--agents-bind", is_flag=True, help="Twin pods wait for edge agents to bind them (TwinCluster API); default: the twin binds.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Register Kubernetes clusters from this kubeconfig.")
@click.option("--kube-context", "contexts", multiple=True, help="Context to register (repeatable; default: all in --kubeconfig).")
@click.option("--placer", type=click.Choice(["agents", "kube-scheduler"]), default="agents", show_default=True,
              help="Kubernetes clusters: who binds the control plane's pods (agents: schedulerName fedplane).")
@click.option("--probe-interval", default=0.2, show_default=True, type=click.FloatRange(0.01, 60))
@click.option("--return-after", default=0.0, show_default=True, type=click.FloatRange(0), help="Move failed-over replicas back once their cluster has been healthy this long (0: never).")
@click.option("--score-profile", default="", help="Add this scheduling profile's score plugins to cluster ranking (e.g. a learned one).")
@click.option("--volumes", "volumes_dir", default="", type=click.Path(file_okay=False),
              help="Volume host of the --twin-clusters: stateful workloads' volumes under DIR/<cluster>, handed over (fenced, "
                   "checkpointed, restored) when they migrate; empty: a stateful workload cannot migrate.")
@click.option("--scorer-selection/--no-scorer-selection", default=True, show_default=True, envvar="FEDPLANE_SCORER_SELECTION", show_envvar=True,
              help="Choose each cluster's scorer family (learned, fgd, bestfit) by replaying its workload on its fleet in the "
                   "twin (one nice 19 worker process, off the tick, at most every few minutes per cluster); its agents switch together.")
@click.option("--etcd", "etcd_endpoints", default="", metavar="URL[,URL...]",
              help="Replicated mode: keep state in this etcd cluster (>= 3.5) instead of --db; members elect one leader, standbys answer reads.")
@click.option("--member", default="", help="Replicated mode: this member's name (default: host:port).")
@click.option("--advertise", default="", help="Replicated mode: the address other members and clients reach this one at (default: host:port).")
@click.option("--admin-credentials", default="fedplane-admin.cred", show_default=True, type=click.Path(dir_okay=False),
              envvar="FEDPLANE_ADMIN_CREDENTIALS", show_envvar=True,
              help="Admin credential file: written (0600) on first start, kept while this plane knows its token.")
@click.option("--models", "models_dir", default="", type=click.Path(file_okay=False),
              help="Models directory: the plane signs the models it promotes or canaries (its key created here on first start) "
                   "and agents fetch them over their link; empty: the plane ships no models.")
@click.option("--experience", "experience_dir", default="", type=click.Path(file_okay=False),
              help="Experience directory: agents ship their experience rows here over their link, held per agent for their "
                   "region's trainer (bounded: --experience-max-mib per agent, twice); empty: agents keep their rows.")
@click.option("--experience-max-mib", default=64, show_default=True, type=click.IntRange(1, 65536))
@click.option("--experience-feed-port", default=-1, show_default=True, type=click.IntRange(-1, 65535),
              help="Serve --experience to the regions' trainers on this port (HTTPS with --tls-*; each pulls with a credential "
                   "of role agent for its cluster and no node); -1: none.")
@click.option("--colocation-round-s", default=5.0, show_default=True, type=click.FloatRange(0, 3600),
              help="Seconds between a colocation round's runs on a cluster (reclaimed CPU offers, the batch quota auction; 0: every tick).")
@click.option("--colocation-stride-s", default=30.0, show_default=True, type=click.FloatRange(0, 3600, min_open=True),
              help="Seconds between a node's online usage samples (its forecast's stride); at least --colocation-round-s.")
@click.option("--colocation-headroom-milli", default=0, show_default=True, type=click.IntRange(0, 1_000_000),
              help="CPU (millicores) every node keeps free of batch whatever its forecast says (system daemons, the agent).")
@click.option("--insecure", is_flag=True, help="Check no credentials (anyone who reaches the port is admin): loopback only.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Log lines on stderr: text (UTC times) or one JSON object per line; every decision is one line.")
@tls_options
def serve(
    db: str, host: str, port: int, agent_port: int, metrics_port: int, ui_port: int, twin_clusters: int, regions: int, twin_nodes: int, ready_delay: float,
    agents_bind: bool, kubeconfig: str | None, contexts: Sequence[str], placer: str, probe_interval: float, return_after: float, score_profile: str,
    volumes_dir: str, scorer_selection: bool, etcd_endpoints: str, member: str, advertise: str, admin_credentials: str, models_dir: str, experience_dir: str,
    experience_max_mib: int, experience_feed_port: int, colocation_round_s: float, colocation_stride_s: float,
    colocation_headroom_milli: int, insecure: bool,
    log_format: str, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
) -> None:
    """Run the control plane: gRPC API, reconcile loop (probe, judge, plan, migrate) and /metrics.

    Embedded (default): one process on one SQLite file. Replicated (--etcd): run several, each
    with its own --port; one leads (an etcd lease, fenced writes), the others take over within ~5 s.
    Every caller shows a credential ('fedplane controlplane credentials' issues them); the first admin's is written to
    --admin-credentials.
    """
    from controlplane import auth, campaigning, collecting, logs, server
    from controlplane import learninglink
    from controlplane.experienceinbox import ExperienceInbox
    from federated.flower.shelf import ModelShelf
    from controlplane.planner import PlannerConfig
    from controlplane.colocating import ColocationConfig
    from controlplane.registry import BackendKind, ClusterSpec, Placer
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.store import StoreError
    from controlplane.verdicts import Timings
    from fedcore.backends import errors
    from fedcore.backends.kubernetes import contexts as kube_contexts
    from fedcore.backends.twin import Binder
    from fedcore.backends.volumes import DirectoryVolumes
    from fedcore.scheduling import profiles

    logs.configure(log_format)
    tls = tls_files(tls_cert, tls_key, tls_ca)
    console = None
    if ui_port >= 0:
        try:
            from controlplane.console import serving as console
        except ImportError as exc:
            fail(f"--ui-port: the web console needs aiohttp ({exc}): pip install 'fedplane[console]'")
    if colocation_stride_s < colocation_round_s:
        fail(f"--colocation-stride-s {colocation_stride_s:g} is shorter than --colocation-round-s {colocation_round_s:g}: a node's usage "
             "is sampled at most once a round, so its forecast's stride (and horizon) would be longer than it says")
    if insecure and not auth.loopback(host):
        fail(f"--insecure refuses to serve on {host}: without credentials anyone who reaches the port is admin; bind 127.0.0.1 or drop --insecure")
    specs = [ClusterSpec(f"c{i}", f"r{i % regions}", twin_nodes=twin_nodes) for i in range(twin_clusters)]
    try:
        if kubeconfig or contexts:
            for ctx in contexts or kube_contexts(kubeconfig):
                name = re.sub(r"[^a-z0-9-]+", "-", ctx.lower()).strip("-")[:63]
                specs.append(ClusterSpec(name, "default", BackendKind.KUBERNETES, ctx, kubeconfig or "", placer=Placer(placer)))
        timings = Timings(probe_interval_s=probe_interval, report_interval_s=probe_interval, fresh_s=5 * probe_interval)
        colocation = ColocationConfig(colocation_stride_s, colocation_round_s, headroom_milli=colocation_headroom_milli)
        if score_profile:
            profiles.make(score_profile, profiles.ProfileContext())  # fail now, not at the first placement
        binder = Binder.EXTERNAL if agents_bind else Binder.INTERNAL
        backends, planning = Backends(time.monotonic, ready_delay, binder), PlannerConfig(learned_profile=score_profile, return_after_s=return_after)
        volumes = (DirectoryVolumes({s.name: Path(volumes_dir) / s.name for s in specs if s.backend is BackendKind.TWIN},
                                    Path(volumes_dir) / ".snapshots") if volumes_dir else None)
        leadership: campaigning.Leadership = campaigning.Solo()
        if etcd_endpoints:
            from controlplane.etcdstore import EtcdStore
            from controlplane.leading import Election

            endpoints = [e.strip() for e in etcd_endpoints.split(",") if e.strip()]
            store = EtcdStore(endpoints)
            plane = ControlPlane(store, backends, time.monotonic, timings, planning, lead=False, scorer_selection=scorer_selection,
                                 volumes=volumes, colocation=colocation)
            # credentials are only ever added, so every member writes them unfenced (no leader needed to issue one)
            checker = auth.Authenticator(EtcdStore(endpoints, prefix=store.prefix, require_fence=False))
            election = Election(store, member, advertise)
            election.leader()  # etcd must answer now: a clear error beats a member that campaigns into the void
            leadership = campaigning.Campaign(election, plane, specs)
        else:
            plane = ControlPlane(db, backends, time.monotonic, timings, planning, scorer_selection=scorer_selection, volumes=volumes,
                                 colocation=colocation)
            checker = auth.Authenticator(plane.store)
            for spec in specs:
                plane.register_cluster(spec)
        gate: auth.Authenticator | auth.Insecure = auth.INSECURE if insecure else checker
        shelf = ModelShelf(Path(models_dir), learninglink.recorder(plane), learninglink.noter(plane)) if models_dir else None
        inbox = ExperienceInbox(Path(experience_dir), experience_max_mib << 20) if experience_dir else None
        if insecure:
            reporting.stderr.print("warning: --insecure: no credentials are checked, anyone who reaches this port is admin")
    except (ValueError, OSError, errors.BackendError, StoreError) as exc:
        fail(str(exc))

    async def main() -> None:
        running = await server.start(plane, host, port, tls, None if metrics_port < 0 else metrics_port, link_port=agent_port, leadership=leadership,
                                     auth=gate, shelf=shelf, inbox=inbox)
        feed = _experience_feed(inbox, checker, host, experience_feed_port, tls)
        if isinstance(gate, auth.Authenticator):
            try:
                _admin_credential(gate, admin_credentials, advertise or f"{host}:{running.port}")
            except (OSError, ValueError, StoreError) as exc:
                await running.stop()
                plane.close()
                fail(f"cannot write the admin credential to {admin_credentials}: {exc}")
        try:
            ui = await console.serve_plane(plane, leadership, console.viewers(gate), host, ui_port, tls) if console else None
        except OSError:
            await running.stop()
            plane.close()
            raise
        freezer = collecting.Freezer(plane.metrics.gc_pause, plane.live_items)
        freezer.install()  # started: what lives now lives as long as the process (controlplane.collecting)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        reporting.stderr.print(
            f"control plane on {host}:{running.port}, agents' twin link on {host}:{running.link_port} "
            + (f"(replicated on etcd {etcd_endpoints}, member {leadership.member}: campaigning)" if etcd_endpoints
               else f"({len(specs)} clusters registered now, db {db})")
            + (f", metrics on :{running.metrics_port}/metrics" if running.metrics_port else "")
            + (f", console on http{'s' if tls else ''}://{host}:{ui.port}/" if ui else "")
        )
        await stop.wait()
        freezer.uninstall()
        if ui:
            await ui.stop()
        await running.stop()
        if feed is not None:
            feed.stop()
        if inbox is not None:
            inbox.close()
        plane.close()

    try:
        asyncio.run(main())
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc}")


def _experience_feed(inbox: Any, checker: Any, host: str, port: int, tls: Any) -> Any:
    """The experience inbox served to the regions' trainers (:mod:`controlplane.experiencefeed`), or None."""
    if port < 0 or inbox is None:
        return None
    from controlplane.experiencefeed import ExperienceFeed, server_tls

    feed = ExperienceFeed(inbox, checker, host, port, server_tls(str(tls.cert), str(tls.key)) if tls else None)
    feed.start()
    reporting.stderr.print(f"experience feed for the regions' trainers on {'https' if tls else 'http'}://{host}:{feed.port}/v1/experience/")
    return feed


def _admin_credential(checker: Authenticator, path: str, target: str) -> None:
    """Keep the admin credential in ``path`` if this plane knows its token; else issue one and write it there (0600)."""
    try:
        found = credentials.read(path) if os.path.exists(path) else None
    except ValueError:
        found = None
    principal = checker.authenticate(found.token) if found is not None else None
    if principal is not None and principal.role == "admin":
        return
    if os.path.exists(path):
        reporting.stderr.print(f"{path} holds no admin credential of this control plane: writing a new one")
    token = checker.issue("admin")
    credentials.write(path, credentials.Credential(token, "admin", target=target))
    reporting.stderr.print(f"admin credential written to {path} (mode 0600): export {credentials.ENV}={path}")


@controlplane.command()
@click.option("--register", "name", help="Register a cluster with this name instead of listing.")
@click.option("--region", help="Region of the cluster to register.")
@click.option("--kube-context", default="", help="Kubernetes context (a twin cluster when omitted).")
@click.option("--kubeconfig", default="", help="Kubeconfig of --kube-context: one the control plane was started with (empty: its own $KUBECONFIG).")
@click.option("--twin-nodes", default=4, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--placer", type=click.Choice(["agents", "kube-scheduler"]), default="agents", show_default=True,
              help="Kubernetes clusters: who binds the control plane's pods (agents: schedulerName fedplane).")
@click.option("--force", is_flag=True, help="Apply another spec to a registered cluster (its back end is rebuilt and its replicas "
                                             "re-created; without it another spec is refused and nothing changes).")
@client_options
def clusters(
    name: str | None, region: str | None, kube_context: str, kubeconfig: str, twin_nodes: int, placer: str, force: bool, target: str,
    as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
) -> None:
    """List clusters with their verdicts (health and the evidence for it), load and taints; or register one (the same
    spec again changes nothing)."""
    tls = tls_files(tls_cert, tls_key, tls_ca)
    if name:
        if not region:
            fail("--register needs --region")
        backend = cp.BACKEND_KUBERNETES if kube_context else cp.BACKEND_TWIN
        spec = cp.ClusterSpec(name=name, region=region or "", backend=backend, kube_context=kube_context, kubeconfig=kubeconfig, twin_nodes=twin_nodes,
                              placer=placer)
        emit(as_json, call(target, tls, "RegisterCluster", cp.RegisterClusterRequest(cluster=spec, force=force)), "registered",
             lambda d: [_cluster_row(d)])
        return
    emit(as_json, call(target, tls, "ListClusters", cp.ListClustersRequest()), "clusters",
         lambda d: [_cluster_row(c) for c in d.get("clusters", [])])


@controlplane.command()
@click.option("--cluster", default="", help="Only this cluster.")
@click.option("--nodes", "show_nodes", is_flag=True, help="List the clusters' nodes (as their APIs list them) instead of their agents.")
@client_options
def agents(cluster: str, show_nodes: bool, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Each cluster's agents as they report themselves (state, quorum and health, gossip view, load, model, the workload
    context they score with), or its nodes."""
    found = call(target, tls_files(tls_cert, tls_key, tls_ca), "ListAgents", cp.ListAgentsRequest(cluster=cluster))
    if show_nodes:
        emit(as_json, found, "nodes", lambda d: [
            {"cluster": c["cluster"], "node": n["name"], "ready": n.get("ready", False), "agent": n.get("agent_id", "")}
            for c in d.get("clusters", []) for n in c.get("nodes", [])
        ])
        return
    emit(as_json, found, "agents", lambda d: [
        {"cluster": c["cluster"], "health": c.get("health", "").removeprefix("HEALTH_").lower(), "node": a["node"],
         "state": a.get("state", ""), "last_report_s": round(a.get("last_report_s", 0.0), 1),
         "peers a/s/d": f"{a.get('peers_alive', 0)}/{a.get('peers_suspect', 0)}/{a.get('peers_dead', 0)}",
         "remote_alive": a.get("remote_alive", 0), "load": round(a.get("load", 0.0), 2), "pods": a.get("pods", 0),
         "model": a.get("model_version", ""), "scorer": _scorer(a), "cpu_pressure": _cpu_pressure(a), "why": a.get("health_reason", "")[:70]}
        for c in d.get("clusters", []) for a in c.get("agents", [])
    ])


def _cluster_row(c: dict[str, Any]) -> dict[str, Any]:
    verdict = c.get("verdict", {})
    return {
        "cluster": c["spec"]["name"], "region": c["spec"].get("region", ""),
        "placer": c["spec"].get("placer") or "agents",
        "health": verdict.get("health", "").removeprefix("HEALTH_").lower(),
        "load": round(c.get("load", 0.0), 3), "forecast": round(c.get("load_forecast", 0.0), 3),
        "nodes": c.get("nodes", 0), "agents": c.get("agents_reporting", 0), "cpu_pressure": _cpu_pressure(c),
        "profile": _profile(c), "scorer": _scorer(c),
        "taints": " ".join(c.get("taints", [])), "evidence": "; ".join(r["message"] for r in verdict.get("reasons", []))[:90],
    }


def _cpu_pressure(d: dict[str, Any]) -> float | str:
    """The workload context's CPU pressure (sent to a cluster's agents, or one agent's own), "-" where there is none."""
    context = d.get("context")
    return round(float(context.get("cpu_pressure", 0.0)), 2) if context else "-"


def _scorer(d: dict[str, Any]) -> str:
    """The scorer family a cluster's agents are sent (or one agent says it places with); "-" without a context."""
    context = d.get("context")
    return str(context.get("scorer") or "learned") if context else "-"


def _profile(d: dict[str, Any]) -> str:
    """The profile a cluster's agents are sent, by its heaviest shapes ("8c 2x1.0g 56%"); "-" without a context, and
    "artifact" when agents score with their model's own shapes (no GPU workload placed)."""
    context = d.get("context")
    if not context:
        return "-"
    profile = context.get("profile") or {}
    cpu, milli, count, weight = (profile.get(k, []) for k in ("cpu", "milli", "count", "weight"))
    if not cpu:
        return "artifact"
    shapes = [f"{int(c) / 1000:g}c {int(n)}x{int(m) / 1000:g}g {float(w):.0%}" for c, m, n, w in zip(cpu, milli, count, weight)]
    return ", ".join(shapes[:3]) + (f" (+{len(shapes) - 3})" if len(shapes) > 3 else "")


def _toleration(spec: str) -> common_pb2.Toleration:
    """``KEY[=VALUE][:EFFECT]``."""
    head, _, effect = spec.partition(":")
    key, _, value = head.partition("=")
    if not key:
        fail(f"bad toleration {spec!r}: expected KEY[=VALUE][:EFFECT]")
    return common_pb2.Toleration(key=key, value=value, effect=effect)


@controlplane.command()
@click.argument("name")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--cpu", "cpu_milli", default="500m", show_default=True, type=quantities.Cpu(), help="CPU per replica, a Kubernetes quantity (500m, 2).")
@click.option("--memory", "memory_mib", default="512Mi", show_default=True, type=quantities.Memory(), help="Memory per replica, a Kubernetes quantity (512Mi, 1Gi).")
@click.option("--gpus", default=0, show_default=True, type=click.IntRange(0, 64))
@click.option("--gpu-model", default="")
@click.option("--arch", "archs", multiple=True, type=click.Choice(["amd64", "arm64", "armv7"]))
@click.option("--spread", default="none", show_default=True, type=click.Choice(list(SPREADS)))
@click.option("--cluster", "only_clusters", multiple=True, help="Allowed clusters (repeatable).")
@click.option("--region", "only_regions", multiple=True, help="Allowed regions (repeatable).")
@click.option("--avoid", "avoid", multiple=True, help="Clusters to avoid (repeatable).")
@click.option("--toleration", "tolerations", multiple=True, metavar="KEY[=VALUE][:EFFECT]", help="Tolerate a cluster taint.")
@click.option("--pinned", is_flag=True, help="Never migrate it for load (failover still applies).")
@click.option("--max-per-cluster", default=0, show_default=True, type=click.IntRange(0, INT32_MAX))
@click.option("--home-region", default="", help="Prefer clusters near this region.")
@click.option("--failback", default="", type=click.Choice(["", "never", "stable", "maintenance"]),
              help="Return home never, once healthy for --failback-window (stable), or also inside --maintenance-window (default: the plane's --return-after).")
@click.option("--failback-window", default=60.0, show_default=True, type=click.FloatRange(1, 86_400), help="Seconds the home must stay healthy (up to 4x after falls).")
@click.option("--maintenance-window", default="", metavar="HH:MM-HH:MM", help="Daily UTC window for --failback maintenance.")
@click.option("--group", default="", help="Workloads of one group fail back together.")
@click.option("--stateful", is_flag=True, help="Its replicas write a volume: migrations hand the state over (fence, checkpoint, restore).")
@click.option("--qos", default="online", show_default=True, type=click.Choice(["online", "batch"]),
              help="online: latency-sensitive, never on reclaimed capacity; batch: best-effort, runs on what online pods "
                   "reserve but do not use, suppressed or preempted (lowest bid first) when online needs it back.")
@click.option("--bid", default=None, type=click.IntRange(0, 1_000_000_000),
              help="batch only: its bid in the quota auction (sent as the pod priority; a higher bid is suppressed and preempted later).")
@click.option("--dry-run", is_flag=True, help="Say where it would go and why, without acting.")
@click.option("--request-id", default="", help="Idempotency key: a retried submit with the same id returns the first answer (default: a fresh one).")
@client_options
def submit(
    name: str, replicas: int, cpu_milli: int, memory_mib: int, gpus: int, gpu_model: str, archs: Sequence[str], spread: str,
    only_clusters: Sequence[str], only_regions: Sequence[str], avoid: Sequence[str], tolerations: Sequence[str], pinned: bool,
    max_per_cluster: int, home_region: str, failback: str, failback_window: float, maintenance_window: str, group: str,
    stateful: bool, qos: str, bid: int | None, dry_run: bool, request_id: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None,
    tls_ca: str | None,
) -> None:
    """Submit a workload with its placement policy (or --dry-run: explain the placement only)."""
    if bid is not None and qos != "batch":
        raise click.BadParameter("only batch workloads bid for reclaimed capacity; online work outbids batch by its class", param_hint="--bid")
    spec = cp.WorkloadSpec(
        name=name, replicas=replicas,
        pod=cp.PodTemplate(cpu_milli=cpu_milli, memory_mib=memory_mib, gpus=gpus, gpu_model=gpu_model, archs=archs,
                           tolerations=[_toleration(t) for t in tolerations], qos=qos, priority=bid or 0),
        policy=cp.PlacementPolicy(spread=SPREADS[spread], clusters=only_clusters, regions=only_regions, avoid_clusters=avoid,
                                  movable=not pinned, max_per_cluster=max_per_cluster, home_region=home_region, failback=failback,
                                  failback_window_s=failback_window, maintenance_window=maintenance_window, group=group),
        stateful=stateful,
    )
    decision = call(target, tls_files(tls_cert, tls_key, tls_ca), "SubmitWorkload", cp.SubmitWorkloadRequest(workload=spec, dry_run=dry_run, request_id=request_id or uuid.uuid4().hex))
    emit(as_json, decision, f"{name}: {'accepted' if decision.accepted else 'NOT placed'}{' (dry run)' if dry_run else ''}",
         lambda d: [{"cluster": p["cluster"], "replicas": p.get("replicas", 0)} for p in d.get("placements", [])]
         + [{"cluster": "why", "replicas": r["message"]} for r in d.get("reasons", [])])
    if not decision.accepted:
        raise SystemExit(1)


@controlplane.command()
@click.option("--workload", default="", help="Only this workload.")
@client_options
def placements(workload: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Where every workload runs (class, cluster, replicas ready/desired, fencing epoch, state, batch: CPU on reclaimed
    capacity and pods preempted) and why."""
    found = call(target, tls_files(tls_cert, tls_key, tls_ca), "GetPlacements", cp.GetPlacementsRequest(workload=workload))
    emit(as_json, found, "placements", lambda d: [
        {"workload": w["workload"], "class": w.get("qos") or "online", "cluster": p["cluster"], "ready": f"{p.get('ready', 0)}/{p.get('replicas', 0)}",
         "epoch": p.get("epoch", 0), "state": p.get("state", ""),
         "reclaimed": f"{int(p.get('reclaimed_milli', 0))}m" if w.get("qos") == "batch" else "-",
         "preempted": p.get("preemptions", 0) if w.get("qos") == "batch" else "-", "why": "; ".join(r["message"] for r in w.get("reasons", []))[:120]}
        for w in d.get("workloads", []) for p in w.get("placements", [])
    ])


@controlplane.command()
@click.option("--workload", help="Workload to move.")
@click.option("--source", help="Cluster to move it from.")
@click.option("--to", "target_cluster", default="", help="Target cluster (default: the planner chooses).")
@click.option("--force", is_flag=True, help="Move even to a cluster the workload's placement policy forbids (recorded as forced).")
@click.option("--cancel", "cancel_id", help="Cancel this migration instead.")
@click.option("--list", "list_all", is_flag=True, help="List migrations instead.")
@click.option("--dry-run", is_flag=True, help="Show what failback would move home now and why the rest waits, without acting.")
@client_options
def migrate(
    workload: str | None, source: str | None, target_cluster: str, force: bool, cancel_id: str | None, list_all: bool, dry_run: bool,
    target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
) -> None:
    """Start a make-before-break migration (within the policy unless --force), cancel or list them, or (--dry-run) preview failback."""
    tls = tls_files(tls_cert, tls_key, tls_ca)

    def rows(d: dict[str, Any]) -> list[dict[str, Any]]:
        items = d.get("migrations", [d])
        return [{"id": m.get("id", ""), "workload": m.get("workload", ""), "from": m.get("source", ""), "to": m.get("target", ""),
                 "kind": m.get("kind", ""), "state": m.get("state", "").removeprefix("MIGRATION_").lower(), "error": m.get("error", "")}
                for m in items]

    if dry_run:
        emit(as_json, call(target, tls, "ListMigrations", cp.ListMigrationsRequest(failback_dry_run=True)), "failback (dry run)",
             lambda d: [{**r, "state": "would start" if not r["error"] else "waits", "why": "; ".join(x["message"] for x in m.get("reasons", []))}
                        for r, m in zip(rows(d), d.get("migrations", []))])
    elif list_all:
        emit(as_json, call(target, tls, "ListMigrations", cp.ListMigrationsRequest()), "migrations", rows)
    elif cancel_id:
        emit(as_json, call(target, tls, "CancelMigration", cp.CancelMigrationRequest(id=cancel_id)), "cancelled", rows)
    elif workload and source:
        req = cp.StartMigrationRequest(workload=workload, source=source, target=target_cluster, force=force)
        emit(as_json, call(target, tls, "StartMigration", req), "migration started", rows)
    else:
        fail("give --workload and --source to start a migration, --cancel ID, or --list")


@controlplane.command()
@click.argument("name")
@client_options
def delete(name: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Delete a workload from every cluster and the registry (its migrations are cancelled; the name is free again)."""
    found = call(target, tls_files(tls_cert, tls_key, tls_ca), "DeleteWorkload", cp.DeleteWorkloadRequest(workload=name))
    emit(as_json, found, f"{name}: deleted", lambda d: [{"cluster": c, "removed": "now"} for c in d.get("removed_from", [])]
         + [{"cluster": c, "removed": "when it answers again"} for c in d.get("pending", [])])


@controlplane.command()
@client_options
def leader(target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """Who leads, as every member given in --target sees it (fencing token, refused writes)."""
    tls = tls_files(tls_cert, tls_key, tls_ca)
    rows: list[dict[str, Any]] = []
    for member in [t.strip() for t in plane_target(target).split(",") if t.strip()]:
        conn = connect(member, tls)
        try:
            info = MessageToDict(conn.control.GetLeader(cp.GetLeaderRequest(), timeout=5), preserving_proto_field_name=True,
                                 always_print_fields_with_no_presence=True)
            rows.append({"target": member, **info})
        except grpc.RpcError as exc:
            rows.append({"target": member, "error": f"{exc.code().name}: {exc.details()}"})
        finally:
            conn.close()
    if as_json:
        reporting.emit_json({"members": rows})
    else:
        reporting.table("control-plane members", [
            {"target": r["target"], "member": r.get("member", ""), "leads": r.get("is_leader", ""), "leader": r.get("leader") or ("" if "error" in r else "unknown"),
             "token": r.get("fencing_token", ""), "writes refused": r.get("writes_refused", ""), "error": r.get("error", "")}
            for r in rows])
    if not any(r.get("is_leader") for r in rows):
        raise SystemExit(1)


@controlplane.command()
@click.option("--limit", default=30, show_default=True, type=click.IntRange(1, 10_000))
@client_options
def decisions(limit: int, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None) -> None:
    """The planner's recent decisions (verdicts, placements, failovers, rebalances, cleanups) with their reasons."""
    found = call(target, tls_files(tls_cert, tls_key, tls_ca), "ListDecisions", cp.ListDecisionsRequest(limit=limit))
    emit(as_json, found, "decisions", lambda d: [
        {"at_s": round(int(x.get("at_ms", 0)) / 1000, 2), "kind": x["kind"], "workload": x.get("workload", ""),
         "from": x.get("source", ""), "to": x.get("target", ""), "reasons": "; ".join(r["message"] for r in x.get("reasons", []))[:100]}
        for x in d.get("decisions", [])
    ])




@controlplane.command(name="credentials")
@click.option("--role", required=True, type=click.Choice(["viewer", "operator", "agent", "admin"]), help="What the holder may do.")
@click.option("--cluster", default="", help="Role agent: the only cluster it acts for (required).")
@click.option("--node", default="", help="Role agent: the only node it binds to and reports as (default: any node of its cluster).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, writable=True), help="Write the credential file here (mode 0600).")
@client_options
def credentials_(
    role: str, cluster: str, node: str, out: str, target: str, as_json: bool, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
) -> None:
    """Issue a credential (admin only): a JSON file with a bearer token for the CLI (--credentials, $FEDPLANE_CREDENTIALS),
    an agent (backend.credentials) or the web console (its token)."""
    if role == "agent" and not cluster:
        fail("--role agent needs --cluster (the cluster the agent acts for)")
    if role != "agent" and (cluster or node):
        fail(f"--cluster and --node bind an agent's credential; a {role} credential is not bound to one")
    target = plane_target(target)
    issued = call(target, tls_files(tls_cert, tls_key, tls_ca), "IssueCredential", cp.IssueCredentialRequest(role=role, cluster=cluster, node=node))
    try:
        credentials.write(out, credentials.Credential(issued.token, issued.role, issued.cluster, issued.node, target))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    summary = {"role": issued.role, "cluster": issued.cluster, "node": issued.node, "file": out, "target": target}
    if as_json:
        reporting.emit_json(summary)
    else:
        reporting.stderr.print(f"{role} credential written to {out} (mode 0600)" + (f" for cluster {cluster}" if cluster else "")
                               + (f", node {node}" if node else ""))


controlplane.add_command(models)
