"""``fedplane bench agent``: N real agent processes on loopback place trace pods through the twin service.

As in production, the twin cluster lives in a ``fedplane controlplane serve --agents-bind``
process and the agents reach it over the twin link; the bench registers one twin cluster
of N nodes on it (RegisterCluster), submits each trace pod as a one-replica workload
(SubmitWorkload) and follows the cluster on the twin link's watch, which is its ground
truth: each decision is timed from the pod's announcement (pending at an epoch) to its
bind, over-commits are summed per node from the bound pods, and what every agent says it
runs is compared with where the twin bound it (double bindings). Pods are the openb
trace's requests in file order (a GPU share asks for one whole GPU: a workload's pod
template counts whole GPUs), arriving at ``rate`` per second and living an exponential
time (the trace has no lifetimes), after which the bench completes the pod
(CompletePod) and deletes its workload, as a finished job is cleaned up. Halfway
through, ``kill`` agents are SIGKILLed; their pods must be re-placed by the survivors.
Figures: per-agent RSS (sampled throughout), idle CPU (every agent, before any pod
arrives), decision latency, throughput and the safety counters (the twin's refused
duplicate and stale binds come from GetSafety).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeagent.clusters import ClusterUnavailable, Phase, PodUpdate
from edgeagent.planeclient import PlaneClient
from fedcore.agentcmd import agent_argv, dies_with_starter, precompile
from fedcore.loopback import free_ports
from fedcore.pods import Pod
from fedcore.traces import locate, openb

NODE_SHAPE = (96000, 393216, 8)
"""The openb fleet's most common node (549 of 1,523): 96 cores, 384 GiB, 8 GPUs."""
CLUSTER = "c0"
PLANE_TIMEOUT = 60.0
"""Seconds for the control plane to answer, and for its verdict on the cluster to be healthy."""
SETTLE_TIMEOUT = 60.0
CHECK_EVERY = 2.0
"""Seconds between samples of agents' RSS and of what each says it runs (the double-binding check)."""


@dataclass(frozen=True, slots=True)
class BenchSettings:
    agents: int = 16
    pods: int = 1000
    rate: float = 10.0
    life: float = 6.0
    kill: int = 2
    seed: int = 1
    traces: str | None = None
    idle_seconds: float = 10.0
    """How long every agent is watched idle (before any pod) for the CPU figure."""
    overrides: tuple[tuple[str, object], ...] = ()
    """Agent configuration keys to set (``("gossip.retransmit_mult", 2)``), for tuning runs."""
    scorer_selection: bool = True
    """The control plane's scorer selection (``serve --no-scorer-selection`` when off): its cost, labelled in the JSON."""


@dataclass(slots=True)
class _Proc:
    name: str
    process: subprocess.Popen[bytes]
    http: int
    rss_max: int = 0
    killed: bool = False
    cpu: float = 0.0


def write_policy_model(models: Path, pods: list[Pod], seed: int) -> bool:
    """A stand-in artifact in federated's format (random int8 weights); False when ``onnx`` is missing.

    The bench needs a real model so the agents load onnxruntime and score through
    federated's runtime (the footprint goal counts both); trained artifacts from
    ``fedplane policy`` drop into the same directory layout.
    """
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        return False
    from fedcore.scheduling.fragmentation import PodTypes
    from federated.runtime import artifacts
    from federated.runtime.features import NODE_FEATURES, POD_FEATURES

    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name) for name, shape in (
        ("w_nodes", (len(NODE_FEATURES), 16)), ("w_out", (16, 1)), ("w_pod", (len(POD_FEATURES), 1)))]
    weights.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat"))
    weights.append(numpy_helper.from_array(np.array(100.0, dtype=np.float32), "hundred"))
    nodes = [
        helper.make_node("Transpose", ["nodes"], ["rows"]),  # the policy format reads nodes feature-major
        helper.make_node("MatMul", ["rows", "w_nodes"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w_out"], ["a"]), helper.make_node("MatMul", ["pod", "w_pod"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["s", "hundred"], ["m"]), helper.make_node("Reshape", ["m", "flat"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes, "edge_policy_standin",
        [helper.make_tensor_value_info("pod", TensorProto.FLOAT, [1, len(POD_FEATURES)]),
         helper.make_tensor_value_info("nodes", TensorProto.FLOAT, [len(NODE_FEATURES), None])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    directory = models / "v0001"
    directory.mkdir(parents=True)
    onnx.save(model, str(directory / artifacts.FP32))
    quantize_dynamic(str(directory / artifacts.FP32), str(directory / artifacts.INT8), weight_type=QuantType.QInt8)
    artifacts.write_manifest(directory, PodTypes.from_pods(pods), {"note": "bench stand-in, random weights"})
    return True


def _install_policy(models: Path, pods: list[Pod], seed: int) -> str:
    """The policy the agents load: federated's shipped artifact if present, else a stand-in; names which."""
    from federated.runtime.scorer import default_model_dir

    shipped = default_model_dir()
    if (shipped / "manifest.json").is_file():
        shutil.copytree(shipped, models / "v0001")
        return f"onnx-int8 ({shipped.name} artifact)"
    return "onnx-int8 (random stand-in)" if write_policy_model(models, pods, seed) else "heuristic"


def _agent_config(name: str, port: int, seeds: list[int], http: int, address: str, credentials: Path, data: Path, models: Path,
                  overrides: tuple[tuple[str, object], ...]) -> str:
    raw: dict[str, Any] = {
        "node": name, "cluster": CLUSTER, "data_dir": str(data), "log_level": "warning",
        "gossip": {"bind": f"127.0.0.1:{port}", "seeds": [f"127.0.0.1:{s}" for s in seeds if s != port],
                   "reap_after": 30.0},
        "backend": {"kind": "twin", "address": address, "status_interval": 30.0, "credentials": str(credentials)},
        "probe": {"kind": "twin"},
        "models": {"dir": str(models)},
        "http": {"bind": f"127.0.0.1:{http}"},
    }
    for dotted, value in overrides:
        section, _, key = dotted.rpartition(".")
        (raw.setdefault(section, {}) if section else raw)[key] = value
    return json.dumps(raw)


def _get(port: int, path: str) -> bytes | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return bytes(reply.read())
    except OSError:
        return None


def _metric(port: int, name: str) -> float | None:
    body = _get(port, "/metrics")
    if body is None:
        return None
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@dataclass(slots=True)
class _Truth:
    """The twin's pods as its watch shows them: the bench's ground truth."""

    pods: dict[str, PodUpdate]
    pending_since: dict[tuple[str, int], float]
    """(pod, epoch) -> when it was first seen pending there."""
    decisions: list[tuple[str, float, float, bool]]
    """(pod, seconds from pending to bound, when, at a re-placement epoch)."""


class _Plane:
    """The control plane process (the twin service) and the bench's gRPC connection to it."""

    def __init__(self, workdir: Path, scorer_selection: bool = True) -> None:
        self.workdir = workdir
        self.scorer_selection = scorer_selection
        self.port, self.link = free_ports(2)
        self.process: subprocess.Popen[bytes] | None = None
        self.conn: Any = None
        self.admin = workdir / "admin.cred"
        self.agent_credentials = workdir / "agent.cred"
        """The agents' credential for the bench's cluster, issued once the plane answers."""

    @property
    def link_address(self) -> str:
        return f"127.0.0.1:{self.link}"

    async def start(self, nodes: int) -> None:
        from fedapi import client, common_pb2
        from fedapi import controlplane_pb2 as cp
        from fedplane.lab import credentialing

        argv = [sys.executable, "-m", "fedplane", "controlplane", "serve", "--db", str(self.workdir / "controlplane.db"),
                "--port", str(self.port), "--agent-port", str(self.link), "--metrics-port", "-1", "--agents-bind",
                "--ready-delay", "0", "--admin-credentials", str(self.admin), *(() if self.scorer_selection else ("--no-scorer-selection",))]
        log = open(self.workdir / "controlplane.log", "wb")
        self.process = subprocess.Popen(dies_with_starter(argv), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)  # even if we are SIGKILLed
        process = self.process
        admin = await asyncio.to_thread(credentialing.admin_token, self.admin, PLANE_TIMEOUT, lambda: process.poll() is None)
        self.conn = client.connect(f"127.0.0.1:{self.port}", token=admin)
        spec = cp.ClusterSpec(name=CLUSTER, region="r0", backend=cp.BACKEND_TWIN, twin_nodes=nodes,
                              twin_node_capacity=common_pb2.ResourceVector(cpu_milli=NODE_SHAPE[0], memory_mib=NODE_SHAPE[1],
                                                                         gpu_milli=NODE_SHAPE[2] * 1000))
        deadline = time.monotonic() + PLANE_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the control plane exited early; see {self.workdir / 'controlplane.log'}")
            try:
                await asyncio.to_thread(self.conn.control.RegisterCluster, cp.RegisterClusterRequest(cluster=spec), timeout=5)
                await asyncio.to_thread(credentialing.issue, f"127.0.0.1:{self.port}", admin, self.agent_credentials, "agent", CLUSTER)
                return
            except Exception as exc:  # grpc.RpcError until the server listens
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the control plane did not answer within {PLANE_TIMEOUT:.0f}s: {exc}") from None
                await asyncio.sleep(0.2)

    async def until_healthy(self) -> None:
        """Until the control plane's verdict on the cluster is healthy (it places nothing before)."""
        from fedapi import controlplane_pb2 as cp

        deadline = time.monotonic() + PLANE_TIMEOUT
        while time.monotonic() < deadline:
            listed = await asyncio.to_thread(self.conn.control.ListClusters, cp.ListClustersRequest(), timeout=5)
            if any(c.spec.name == CLUSTER and c.verdict.health == cp.HEALTH_HEALTHY for c in listed.clusters):
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the control plane did not judge {CLUSTER} healthy within {PLANE_TIMEOUT:.0f}s")

    async def submit(self, pod: Pod) -> bool:
        from fedapi import controlplane_pb2 as cp

        template = cp.PodTemplate(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpus=math.ceil(pod.gpu.total_milli / 1000))
        workload = cp.WorkloadSpec(name=pod.uid, replicas=1, pod=template, policy=cp.PlacementPolicy(clusters=[CLUSTER]))
        answer = await asyncio.to_thread(self.conn.control.SubmitWorkload, cp.SubmitWorkloadRequest(workload=workload), timeout=10)
        return bool(answer.accepted)

    async def delete(self, workload: str) -> None:
        from fedapi import controlplane_pb2 as cp

        await asyncio.to_thread(self.conn.control.DeleteWorkload, cp.DeleteWorkloadRequest(workload=workload), timeout=10)

    async def safety(self) -> tuple[int, int]:
        from fedapi import twincluster_pb2 as tw

        counters = await asyncio.to_thread(self.conn.twin.GetSafety, tw.GetSafetyRequest(cluster=CLUSTER), timeout=5)
        return int(counters.duplicate_binds), int(counters.stale_binds)

    async def scorer_decisions(self) -> list[str]:
        """The plane's scorer selection decisions, oldest first: ``scorer:<family>`` adopted, ``scorer-failed``."""
        from fedapi import controlplane_pb2 as cp

        found = await asyncio.to_thread(self.conn.control.ListDecisions, cp.ListDecisionsRequest(limit=20_000), timeout=10)
        return [d.kind for d in reversed(found.decisions) if d.kind.startswith("scorer")]

    def cpu_seconds(self, children: bool = False) -> float:
        """The plane's CPU; ``children``: its finished child processes' instead (the scorer selection worker)."""
        import psutil

        try:
            times = psutil.Process(self.process.pid).cpu_times() if self.process is not None else None
        except psutil.Error:
            return 0.0
        if times is None:
            return 0.0
        return float(times.children_user + times.children_system if children else times.user + times.system)

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class _Run:
    def __init__(self, settings: BenchSettings, workdir: Path, plane: _Plane) -> None:
        self.s = settings
        self.workdir = workdir
        self.plane = plane
        self.rng = random.Random(settings.seed)
        self.nodes = [f"{CLUSTER}-n{i}" for i in range(settings.agents)]
        self.truth = _Truth({}, {}, [])
        self.twin = PlaneClient(plane.link_address, CLUSTER, timeout=10.0)
        """The bench's own client of the cluster (watch, complete pods), as an agent of it (its token: once the plane issued it)."""
        self.procs: list[_Proc] = []
        self.life_tasks: dict[str, asyncio.TimerHandle] = {}
        self.on_killed_nodes: set[str] = set()
        self.completing: set[str] = set()
        """Pods whose work ended (CompletePod sent): one killed while that call is in flight is not owed a re-placement."""
        self.double_bindings = 0
        self.overcommits = 0
        self.killed: set[str] = set()
        self.background: set[asyncio.Task[None]] = set()
        self.completion_failures = 0

    async def start_agents(self, models: Path) -> None:
        from fedapi import credentials

        n = self.s.agents
        ports = free_ports(2 * n)  # one call: no port handed out twice
        ports, https = ports[:n], ports[n:]
        seeds = ports[:3]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the agent pins its own BLAS threads and telemetry (edgeagent.entry)
        self.twin.channel.token = credentials.token_in(str(self.plane.agent_credentials))  # shown from its first connection on
        configs: list[Path] = []
        for i, node in enumerate(self.nodes):
            data = self.workdir / node
            data.mkdir()
            configs.append(data / "agent.yaml")
            configs[-1].write_text(_agent_config(node, ports[i], seeds, https[i], self.plane.link_address, self.plane.agent_credentials, data, models,
                                                 self.s.overrides))
        await asyncio.to_thread(precompile, configs[0], env)
        for cfg, http in zip(configs, https):
            log = open(cfg.parent / "agent.log", "wb")
            proc = subprocess.Popen(dies_with_starter(agent_argv(cfg)), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cfg.parent)
            self.procs.append(_Proc(cfg.parent.name, proc, http))

    async def wait_converged(self, timeout: float = 60.0) -> None:
        """Until every agent serves HTTP and sees all its peers alive."""
        deadline = time.monotonic() + timeout
        want = self.s.agents - 1
        while time.monotonic() < deadline:
            seen = await asyncio.to_thread(lambda: [_metric(p.http, "fedplane_agent_peers_alive") for p in self.procs])
            if all(v is not None and v >= want for v in seen):
                return
            for p in self.procs:
                if p.process.poll() is not None:
                    raise RuntimeError(f"agent {p.name} exited early; see {self.workdir / p.name / 'agent.log'}")
            await asyncio.sleep(0.5)
        raise RuntimeError(f"agents did not converge within {timeout:.0f}s: peers alive {seen}")

    def sample_rss(self) -> None:
        import psutil

        for p in self.procs:
            if not p.killed:
                try:
                    p.rss_max = max(p.rss_max, psutil.Process(p.process.pid).memory_info().rss)
                except psutil.Error:
                    pass

    def cpu_seconds(self) -> float:
        """CPU time of all live agents so far (killed ones keep what they had when sampled)."""
        import psutil

        for p in self.procs:
            try:
                p.cpu = sum(psutil.Process(p.process.pid).cpu_times()[:2])
            except psutil.Error:
                pass
        return sum(p.cpu for p in self.procs)

    async def idle_cpu(self) -> list[float]:
        import psutil

        handles = [psutil.Process(p.process.pid) for p in self.procs]
        before = [sum(h.cpu_times()[:2]) for h in handles]
        await asyncio.sleep(self.s.idle_seconds)
        after = [sum(h.cpu_times()[:2]) for h in handles]
        return [100.0 * (a - b) / self.s.idle_seconds for a, b in zip(after, before)]

    async def follow(self) -> None:
        """The twin's watch, for ever: decisions timed, lifetimes started and stopped (re-watched on a break)."""
        while True:
            try:
                async for update in self.twin.watch():
                    self._observe(update, time.monotonic())
            except ClusterUnavailable:
                await asyncio.sleep(0.2)

    def _observe(self, update: PodUpdate, now: float) -> None:
        truth, uid = self.truth, update.pod.uid
        truth.pods[uid] = update
        key = (uid, update.epoch)
        if update.phase is Phase.PENDING and not update.node:
            truth.pending_since.setdefault(key, now)
            task = self.life_tasks.pop(uid, None)
            if task is not None:
                task.cancel()
        elif update.phase is Phase.RUNNING and update.node:
            since = truth.pending_since.pop(key, None)
            if since is not None:
                truth.decisions.append((uid, now - since, now, update.epoch > 1))
            if uid not in self.life_tasks:
                life = self.rng.expovariate(1.0 / self.s.life)
                self.life_tasks[uid] = asyncio.get_running_loop().call_later(life, self._finish, uid)

    def _finish(self, uid: str) -> None:
        """A pod's work ends, unless its node was killed (a dead node finishes nothing; it gets re-placed)."""
        self.life_tasks.pop(uid, None)
        held = self.truth.pods.get(uid)
        if held is None or held.phase is not Phase.RUNNING or held.node in self.killed:
            return
        self.completing.add(uid)
        task = asyncio.get_running_loop().create_task(self._complete(uid, held.epoch))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _complete(self, uid: str, epoch: int) -> None:
        request = {"cluster": CLUSTER, "pod": uid, "epoch": epoch, "succeeded": True}
        try:
            await self.twin.channel.call("CompletePod", request, 10.0)
            await self.plane.delete(self.truth.pods[uid].pod.workload)
        except Exception:  # the link or gRPC failed: the pod keeps running and shows as lost at the end
            self.completion_failures += 1

    def kill(self) -> list[str]:
        victims = self.rng.sample(self.procs[1:], self.s.kill)  # the first agent stays: it is a seed
        for p in victims:
            self.cpu_seconds()
            p.process.send_signal(signal.SIGKILL)
            p.killed = True
            self.killed.add(p.name)
            self.on_killed_nodes.update(uid for uid, u in self.truth.pods.items()
                                        if u.phase is Phase.RUNNING and u.node == p.name and uid not in self.completing)
        return [p.name for p in victims]

    async def check_double_bindings(self) -> None:
        """Compare what every live agent says it runs with the twin: the same epoch on another node is a double.

        Also counts nodes whose bound pods ask for more than the node holds, from the twin's own bindings.
        """
        load: dict[str, list[int]] = {}
        for u in self.truth.pods.values():
            if u.phase is Phase.RUNNING and u.node:
                used = load.setdefault(u.node, [0, 0, 0])
                used[0] += u.pod.cpu_milli
                used[1] += u.pod.memory_mib
                used[2] += u.pod.gpu.total_milli
        over = sum(1 for c, m, g in load.values() if c > NODE_SHAPE[0] or m > NODE_SHAPE[1] or g > NODE_SHAPE[2] * 1000)
        self.overcommits = max(self.overcommits, over)
        reports = await asyncio.to_thread(lambda: [(p.name, _get(p.http, "/pods")) for p in self.procs if not p.killed])
        for name, body in reports:
            for uid, epoch in json.loads(body or b"{}").items():
                held = self.truth.pods.get(uid)
                if held is not None and held.epoch == epoch and held.phase is Phase.RUNNING and held.node != name:
                    self.double_bindings += 1

    def stop_agents(self) -> None:
        for p in self.procs:
            if p.process.poll() is None:
                p.process.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.process.kill()


async def run_bench(settings: BenchSettings) -> dict[str, Any]:
    pods = openb.load_pods(locate.trace_file(None, locate.OPENB_PODS, settings.traces))[: settings.pods]
    workdir = Path(tempfile.mkdtemp(prefix="fedplane-bench-agent-"))
    plane = _Plane(workdir, settings.scorer_selection)
    run = _Run(settings, workdir, plane)
    watcher: asyncio.Task[None] | None = None
    try:
        await plane.start(settings.agents)
        models = workdir / "models"
        models.mkdir()
        scorer = _install_policy(models, pods, settings.seed)
        await run.start_agents(models)
        await run.wait_converged()
        await plane.until_healthy()
        watcher = asyncio.create_task(run.follow())
        run.sample_rss()
        idle = await run.idle_cpu()
        run.sample_rss()
        cpu_before, plane_before, worker_before = run.cpu_seconds(), plane.cpu_seconds(), plane.cpu_seconds(children=True)
        result = await _place(run, pods)
        run.sample_rss()
        result["agent_cpu_ms_per_pod"] = round(1000 * (run.cpu_seconds() - cpu_before) / max(1, len(pods)), 1)
        result["controlplane_cpu_ms_per_pod"] = round(1000 * (plane.cpu_seconds() - plane_before) / max(1, len(pods)), 1)
        result["scorer_selection_cpu_s"] = round(plane.cpu_seconds(children=True) - worker_before, 2)
        result["scorer_decisions"] = await plane.scorer_decisions()
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, *run.background, return_exceptions=True)
        await run.twin.close()
        run.stop_agents()
        plane.stop()
    keep = os.environ.get("FEDPLANE_BENCH_KEEP")
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "backend": "twin-service",
        "backend_is": ("the twin cluster of a 'fedplane controlplane serve --agents-bind' process, reached by the agents "
                       "over the twin link (their production client); ground truth from its watch and GetSafety"),
        "policy": "agents", "oracle": False,
        "agents": settings.agents, "pods": len(pods),
        "rss_mib_max": round(max(p.rss_max for p in run.procs) / 2**20, 1),
        "idle_cpu_pct": round(max(idle), 2), "idle_cpu_pct_mean": round(float(np.mean(idle)), 2),
        **result, "scorer": scorer, "scorer_selection": "on" if settings.scorer_selection else "off",
        "workload": (f"openb requests (first {len(pods)}; a GPU share asks for one whole GPU), one-replica workloads "
                     f"submitted at {settings.rate:g}/s, exp lifetimes mean {settings.life:g}s"),
        "workdir": str(workdir) if keep else None,
    }


async def _place(run: _Run, pods: list[Pod]) -> dict[str, Any]:
    s = run.s
    truth = run.truth
    start = time.monotonic()
    killed: list[str] = []
    rejected = 0
    next_check = start + CHECK_EVERY
    for i, pod in enumerate(pods):
        await asyncio.sleep(max(0.0, start + i / s.rate - time.monotonic()))
        if not await run.plane.submit(pod):
            rejected += 1
        if i == len(pods) // 2 and s.kill:
            killed = run.kill()
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + CHECK_EVERY
            run.sample_rss()
            await run.check_double_bindings()
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        if len(truth.pods) >= len(pods) - rejected and all(u.phase.finished for u in truth.pods.values()):
            break
        await asyncio.sleep(CHECK_EVERY)
        run.sample_rss()
        await run.check_double_bindings()
    duplicates, stale = await run.plane.safety()
    ms = np.array([d[1] for d in truth.decisions]) * 1000.0
    replaced = [d for d in truth.decisions if d[3]]
    span = max((d[2] for d in truth.decisions), default=start) - start
    unfinished = [uid for uid, u in truth.pods.items() if not u.phase.finished]
    return {
        "decision_ms_p50": round(float(np.percentile(ms, 50)), 1) if ms.size else None,
        "decision_ms_p99": round(float(np.percentile(ms, 99)), 1) if ms.size else None,
        "decision_timed_as": "from the twin watch's pending event (pod at an epoch) to its bound event, on the bench's clock",
        "placements_per_s": round(len(truth.decisions) / max(1e-9, span), 1),
        "double_bindings": run.double_bindings,
        "lost_pods": len(unfinished) + (len(pods) - rejected - len(truth.pods)),
        "submit_rejected": rejected,
        "completion_failures": run.completion_failures,
        "overcommits": run.overcommits,
        "replaced_after_kill": len({d[0] for d in replaced} & run.on_killed_nodes),
        "pods_on_killed_nodes": len(run.on_killed_nodes),
        "killed": killed,
        "refused_duplicate_binds": duplicates,
        "refused_stale_binds": stale,
        "replace_decision_ms_p99": round(float(np.percentile([d[1] * 1000 for d in replaced], 99)), 1) if replaced else None,
    }
