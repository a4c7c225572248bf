"""Kubernetes end to end: the control plane's workloads reach the edge agents, fail over and are cleaned up.

One scenario, used by the test suite (small) and by ``fedplane bench kube`` (3 clusters x 3
agents, 300 pods). Each cluster is a Kubernetes API served over HTTP (:mod:`fedplane.lab.doubles.kubedouble`:
kmock plus binding, eviction with disruption budgets and the Deployment controller); the control
plane and the agents talk to it with the real ``kubernetes`` client through their own adapters:

1. the control plane creates Deployments whose pods carry ``schedulerName: fedplane``;
2. the pods are created pending; that cluster's agents (gossip over loopback UDP, claims, the
   placement core, the journal) claim and bind them through the pods/binding subresource;
3. the control plane sees the placements (the Deployments' ready replicas);
4. the busiest cluster goes dark (its API answers 503): probes fail, the verdict is DOWN, the
   planner fails its workloads over at a bumped epoch and the other clusters' agents bind them;
5. the cluster comes back: the control plane evicts its stale pods through the Eviction API
   (the clusters carry a PodDisruptionBudget per workload, which the evictions respect).

Nothing stands in for the agents or the control plane: both run their shipped code in this
process (the agents in one event loop, the control plane's tick in a thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from fedcore.kubeobjects import EPOCH_ANNOTATION, SCHEDULER_NAME
from fedcore.loopback import free_ports
from fedplane.lab.doubles.kubeclusters import ClusterHandle, DoubleCluster
from fedplane.lab.doubles.kubedouble import workload_of

AGENT_UA = "fedplane-agent"
CONTROL_PLANE_UA = "fedplane-controlplane"


@dataclass(frozen=True, slots=True)
class KubeScenario:
    clusters: int = 3
    agents: int = 3
    """Agents (= nodes) per cluster."""
    pods: int = 300
    replicas: int = 10
    """Replicas per workload (pods / replicas workloads)."""
    node_cpu_milli: int = 16000
    node_memory_mib: int = 65536
    pod_cpu_milli: int = 200
    pod_memory_mib: int = 256
    tick_s: float = 0.2
    timeout_s: float = 120.0
    prefix: str = "w"
    """Workload names are this plus a number."""


@dataclass(slots=True)
class Figures:
    pods: int = 0
    bound_by_agents: int = 0
    bound_by_other: int = 0
    placed_s_p50: float = 0.0
    placed_s_p99: float = 0.0
    detect_s: float = 0.0
    failover_recovery_s: float = float("inf")
    lost: int = 0
    duplicated: int = 0
    evictions_requested: int = 0
    evictions_done: int = 0
    evictions_blocked: int = 0
    agent_evictions_requested: int = 0
    agent_evictions_done: int = 0
    dark_cluster: str = ""
    stale_pods_left: int = 0
    phases: dict[str, float] = field(default_factory=dict)


class _Ticker:
    """The control plane's reconcile loop, in a thread (its calls to the API are synchronous)."""

    def __init__(self, plane: Any, every: float) -> None:
        self.plane, self.every = plane, every
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="cp-tick", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.plane.tick(time.monotonic())
            except Exception as exc:  # a tick that raises is a finding: keep it, keep ticking
                self.errors.append(repr(exc)[:300])
            self.stop.wait(self.every)


async def _until(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> float:
    start = time.monotonic()
    while not await asyncio.to_thread(predicate):
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(poll)
    return time.monotonic()


def _node(name: str, s: KubeScenario) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": f"{s.node_cpu_milli}m", "memory": f"{s.node_memory_mib}Mi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _running(cluster: ClusterHandle) -> list[dict[str, Any]]:
    return [p for p in cluster.pods() if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") == "Running" and not (p.get("metadata") or {}).get("deletionTimestamp")]


def double_clusters(s: KubeScenario) -> list[ClusterHandle]:
    return [DoubleCluster(f"k{i}", {f"k{i}-n{j}": _node(f"k{i}-n{j}", s) for j in range(s.agents)}) for i in range(s.clusters)]


async def run_scenario(s: KubeScenario, workdir: Path, clusters: list[ClusterHandle] | None = None,
                       log_level: int = logging.WARNING) -> Figures:
    """The whole scenario on ``clusters`` (default: API doubles); returns its figures.

    Raises TimeoutError when a step never completes. The clusters are closed at the end.
    """
    import kubernetes  # noqa: F401  (fail early and clearly without the 'full' extra)

    from controlplane.registry import BackendKind, ClusterSpec, PlacementState, Placer
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.verdicts import Timings
    from controlplane.workloads import Policy, Spread, Template, Workload
    from edgeagent import config as agent_config
    from edgeagent.daemon import Agent
    from edgeagent.kube import KubeCluster
    from fedcore.backends.kubernetes import KubernetesCluster

    logging.getLogger("edgeagent").setLevel(log_level)
    logging.getLogger("controlplane").setLevel(log_level)
    handles = {h.name: h for h in (clusters if clusters is not None else double_clusters(s))}
    names = list(handles)
    figures = Figures()
    agents: list[Agent] = []
    tasks: list[asyncio.Task[None]] = []
    ticker: _Ticker | None = None
    plane: ControlPlane | None = None
    try:
        backends = Backends(time.monotonic)
        for c, h in handles.items():
            backends.by_name[c] = KubernetesCluster(c, h.client(CONTROL_PLANE_UA), h.namespace)
        timings = Timings(probe_interval_s=s.tick_s, report_interval_s=s.tick_s, fresh_s=5 * s.tick_s)
        plane = ControlPlane(workdir / "cp.db", backends, time.monotonic, timings)
        for i, c in enumerate(names):
            plane.register_cluster(ClusterSpec(c, f"r{i}", BackendKind.KUBERNETES, kube_context=c, placer=Placer.AGENTS))

        per_cluster = {c: h.nodes() for c, h in handles.items()}
        ports = iter(free_ports(sum(len(n) for n in per_cluster.values())))
        for c, h in handles.items():
            gossip = {node: next(ports) for node in per_cluster[c]}
            for node, port in gossip.items():
                cfg = agent_config.parse({
                    "node": node, "cluster": c, "data_dir": str(workdir / c / node), "log_level": "warning",
                    "gossip": {"bind": f"127.0.0.1:{port}", "seeds": [f"127.0.0.1:{p}" for n, p in gossip.items() if n != node]},
                    "backend": {"kind": "kubernetes", "scheduler_name": SCHEDULER_NAME, "status_interval": 30.0},
                    "probe": {"kind": "twin", "interval": 1.0}, "http": {"bind": ""},
                })
                cluster = KubeCluster("", SCHEDULER_NAME, 5.0, api_client=h.client(f"{AGENT_UA}/{node}"))
                agents.append(Agent(cfg, cluster=cluster, handle_signals=False))
        tasks = [asyncio.create_task(a.run()) for a in agents]
        await _until(lambda: all(a.gossip is not None and len(a.gossip.members()) == len(per_cluster[a.config.cluster])
                                 for a in agents), 30, "gossip to join")

        ticker = _Ticker(plane, s.tick_s)
        ticker.thread.start()
        await _until(lambda: all(v.health.value == "healthy" for v, _ in plane.verdicts.values()) and len(plane.verdicts) == len(names),
                     30, "every cluster to be judged healthy")

        workloads = [Workload(f"{s.prefix}{k:03d}", s.replicas, Template(s.pod_cpu_milli, s.pod_memory_mib), Policy(spread=Spread.NONE))
                     for k in range(s.pods // s.replicas)]
        for h in handles.values():  # what a careful operator adds: at most one replica of a workload down at a time
            for w in workloads:
                h.add_budget(w.name, 1)
        t0 = time.monotonic()
        for w in workloads:
            choice = await asyncio.to_thread(plane.submit, w, False)
            if not choice.ok:
                raise RuntimeError(f"could not place {w.name}: {'; '.join(choice.reasons)}")
        total = len(workloads) * s.replicas

        def ready_seen_by_plane() -> bool:
            return sum(w.ready_replicas for c in names for w in backends(c).list_workloads()) >= total

        t_placed = await _until(ready_seen_by_plane, s.timeout_s, f"the control plane to see {total} ready replicas")
        figures.phases["place_s"] = round(t_placed - t0, 3)
        waits = sorted(w for h in handles.values() for w in h.waits()) or [float("nan")]
        figures.placed_s_p50 = round(statistics.median(waits), 3)
        figures.placed_s_p99 = round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3)

        counts = {c: len(_running(h)) for c, h in handles.items()}
        dark = max(sorted(counts), key=lambda c: counts[c])
        figures.dark_cluster = dark
        live = [c for c in names if c != dark]
        t_dark = time.monotonic()
        handles[dark].set_dark(True)

        def failed_over() -> bool:
            current = {w.name: w.replicas for w in plane.registry.workloads()}
            running: dict[str, int] = {}
            for c in live:
                for p in _running(handles[c]):
                    running[workload_of(p)] = running.get(workload_of(p), 0) + 1
            return all(running.get(n, 0) >= k for n, k in current.items())

        t_detect = await _until(lambda: plane.verdicts[dark][0].health.failed, s.timeout_s, f"{dark} to be judged failed")
        figures.detect_s = round(t_detect - t_dark, 3)
        t_recovered = await _until(failed_over, s.timeout_s, "the failed-over replicas to run on the other clusters")
        figures.failover_recovery_s = round(t_recovered - t_dark, 3)

        await _until(lambda: not plane.journal.active() and any(
            p.state is PlacementState.STALE for p in plane.registry.placements()), s.timeout_s,
            f"the failover migrations to finish, leaving {dark}'s copies stale")
        handles[dark].set_dark(False)
        t_back = time.monotonic()

        def cleaned() -> bool:
            stale = [p for p in plane.registry.placements() if p.state is PlacementState.STALE]
            return not stale and not _running(handles[dark])

        t_clean = await _until(cleaned, s.timeout_s, f"{dark}'s stale pods to be evicted")
        figures.phases["cleanup_s"] = round(t_clean - t_back, 3)
        await asyncio.sleep(2 * s.tick_s)  # let the agents of the returned cluster see the evictions

        _judge(figures, plane, handles)
        figures.agent_evictions_requested = sum(a.placer_.counters.evictions for a in agents)
        figures.agent_evictions_done = sum(a.placer_.counters.evictions_done for a in agents)
        registry = plane.metrics.registry
        figures.evictions_requested = int(sum(registry.get_sample_value("fedplane_evictions_requested_total", {"cluster": c}) or 0
                                              for c in names)) + figures.agent_evictions_requested
        figures.evictions_done = int(sum(registry.get_sample_value("fedplane_evictions_done_total", {"cluster": c, "outcome": o}) or 0
                                         for c in names for o in ("evicted", "gone", "stale-epoch"))) + figures.agent_evictions_done
        figures.evictions_blocked = int(sum(registry.get_sample_value("fedplane_evictions_blocked_total", {"cluster": c}) or 0 for c in names))
        if ticker.errors:
            figures.phases["tick_errors"] = len(ticker.errors)
        return figures
    finally:
        if ticker is not None:
            ticker.stop.set()
            ticker.thread.join(10)
        for a in agents:
            a.stop()
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        if plane is not None:
            plane.close()
        for h in reversed(list(handles.values())):  # kmock chains a resolver per server: stop in reverse
            h.close()


def _judge(f: Figures, plane: Any, handles: dict[str, ClusterHandle]) -> None:
    """Count what runs at the end against the control plane's desired state: lost, duplicated, who bound it."""
    desired = {w.name: w.replicas for w in plane.registry.workloads()}
    epochs = {w: max((p.epoch for p in plane.registry.placements(w)), default=1) for w in desired}
    running: dict[str, int] = {}
    for h in handles.values():
        for p in _running(h):
            w = workload_of(p)
            if w not in desired:
                continue
            running[w] = running.get(w, 0) + 1
            meta = p.get("metadata") or {}
            if h.binder(p).startswith(AGENT_UA):
                f.bound_by_agents += 1
            else:
                f.bound_by_other += 1
            if int((meta.get("annotations") or {}).get(EPOCH_ANNOTATION, 1)) > epochs.get(w, 1):
                f.duplicated += 1  # an epoch the control plane never issued
    f.pods = sum(running.values())
    for w, k in desired.items():
        f.lost += max(0, k - running.get(w, 0))
        f.duplicated += max(0, running.get(w, 0) - k)
    f.stale_pods_left = len(_running(handles[f.dark_cluster])) if f.dark_cluster else 0


@click.command("kube")
@click.option("--clusters", default=3, show_default=True, type=click.IntRange(2, 10), help="Kubernetes clusters (API doubles)")
@click.option("--agents", default=3, show_default=True, type=click.IntRange(1, 20), help="agents (nodes) per cluster")
@click.option("--pods", default=300, show_default=True, type=click.IntRange(1, 5000), help="pods in total")
@click.option("--replicas", default=10, show_default=True, type=click.IntRange(1, 1000), help="replicas per workload")
@click.option("--timeout", default=120.0, show_default=True, type=click.FloatRange(5, 3600), help="seconds any one step may take")
@click.option("--context", "contexts", multiple=True,
              help="run on this real cluster's kubeconfig context instead (repeat, two or more; kind/k3d: see README)")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="kubeconfig for --context (default $KUBECONFIG)")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON object")
def bench_kube(clusters: int, agents: int, pods: int, replicas: int, timeout: float, contexts: tuple[str, ...],
               kubeconfig: str | None, as_json: bool) -> None:
    """Control plane -> agents bind -> a cluster goes dark -> failover -> it returns -> its stale pods are evicted.

    Every cluster is a Kubernetes API double served over HTTP (kmock plus binding, eviction with
    PodDisruptionBudgets and a Deployment controller); the control plane and the agents run their
    shipped code and use the real kubernetes client. Timings are wall-clock on a shared machine.
    """
    if pods % replicas:
        raise click.UsageError(f"--pods {pods} must be a multiple of --replicas {replicas}")
    if len(contexts) == 1:
        raise click.UsageError("--context: give two or more (one goes dark, the others take its workloads)")
    handles: list[ClusterHandle] | None = None
    if contexts:
        from fedplane.lab.doubles.kubeclusters import RealCluster

        try:
            handles = [RealCluster(f"c{i}", ctx, kubeconfig) for i, ctx in enumerate(contexts)]
        except Exception as exc:  # the client's config errors come in many types
            raise click.ClickException(f"cannot use kubeconfig context(s) {', '.join(contexts)}: {exc}") from None
        clusters = len(contexts)
    scenario = KubeScenario(clusters=clusters, agents=agents, pods=pods, replicas=replicas, timeout_s=timeout,
                            **({"pod_cpu_milli": 10, "pod_memory_mib": 16} if contexts else {}))
    with tempfile.TemporaryDirectory(prefix="fedplane-bench-kube-") as tmp:
        try:
            figures = asyncio.run(run_scenario(scenario, Path(tmp), handles))
        except TimeoutError as exc:
            raise click.ClickException(str(exc)) from None
    out = {**asdict(figures), "scenario": asdict(scenario),
           "api": (f"real clusters {', '.join(contexts)} through loopback TCP gates" if contexts else
                   "kmock 0.8 API double over HTTP + binding/eviction/PDB/Deployment controller; real kubernetes client"),
           "evictions_by": "control plane cleanup (Eviction API) + agents' Evict effects"}
    if as_json:
        click.echo(json.dumps(out))
        return
    for key in ("pods", "bound_by_agents", "bound_by_other", "placed_s_p50", "placed_s_p99", "detect_s", "failover_recovery_s",
                "lost", "duplicated", "evictions_requested", "evictions_done", "evictions_blocked", "dark_cluster"):
        click.echo(f"{key:>22}  {out[key]}")
