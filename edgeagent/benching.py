"""``fedplane bench agent``: N real agent processes on loopback place trace pods through the twin.

The bench process hosts the twin cluster (:class:`InMemoryCluster` served by the
:mod:`edgeagent.twinharness` test harness), which is also the ground truth: it times
each decision from the pod's announcement (pending at an epoch) to its bind, fences
every bind, and refuses any over-commit. Pods are the openb trace's requests in file
order, arriving at ``rate`` per second and living an exponential time (the trace has
no lifetimes). Halfway through, ``kill`` agents are SIGKILLed; their pods must be
re-placed by the survivors. Figures: per-agent RSS (sampled throughout), idle CPU
(every agent, before any pod arrives), decision latency, throughput and the safety
counters. ``capacity_refusals`` counts binds the back end refused for lack of room on
the node (the agent and the back end may pick different GPU devices for the same
pods); the back end's table never over-commits, and ``overcommits`` checks that
ground truth throughout the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeagent.clusters import Phase, PodUpdate
from edgeagent.memcluster import InMemoryCluster
from edgeagent.twinharness import TwinHarness
from fedcore.agentcmd import agent_argv, precompile
from fedcore.loopback import free_ports
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.traces import locate, openb

NODE_SHAPE = (96000, 393216, 8, "G2")
"""The openb fleet's most common node (549 of 1,523): 96 cores, 384 GiB, 8 GPUs."""
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


def _agent_config(name: str, port: int, seeds: list[int], http: int, address: str, data: Path, models: Path,
                  overrides: tuple[tuple[str, object], ...]) -> str:
    raw: dict[str, Any] = {
        "node": name, "cluster": "c0", "data_dir": str(data), "log_level": "warning",
        "gossip": {"bind": f"127.0.0.1:{port}", "seeds": [f"127.0.0.1:{s}" for s in seeds if s != port],
                   "reap_after": 30.0},
        "backend": {"kind": "twin", "address": address, "status_interval": 30.0},
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


class _Run:
    def __init__(self, settings: BenchSettings, workdir: Path) -> None:
        self.s = settings
        self.workdir = workdir
        self.rng = random.Random(settings.seed)
        nodes = [Node(f"edge-{i:02d}", *NODE_SHAPE[:2], gpus=NODE_SHAPE[2], gpu_model=NODE_SHAPE[3])
                 for i in range(settings.agents)]
        self.cluster = InMemoryCluster(nodes)
        self.procs: list[_Proc] = []
        self.life_tasks: dict[str, asyncio.TimerHandle] = {}
        self.on_killed_nodes: set[str] = set()
        self.double_bindings = 0
        self.overcommits = 0
        self.killed: set[str] = set()

    async def start_agents(self, address: str, models: Path) -> None:
        n = self.s.agents
        ports = free_ports(2 * n)  # one call: no port handed out twice
        ports, https = ports[:n], ports[n:]
        seeds = ports[:3]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the agent pins its own BLAS threads and telemetry (edgeagent.entry)
        configs: list[Path] = []
        for i in range(n):
            data = self.workdir / f"edge-{i:02d}"
            data.mkdir()
            configs.append(data / "agent.yaml")
            configs[-1].write_text(_agent_config(data.name, ports[i], seeds, https[i], address, data, models, self.s.overrides))
        await asyncio.to_thread(precompile, configs[0], env)  # this loop serves the twin link: keep it free
        for cfg, http in zip(configs, https):
            log = open(cfg.parent / "agent.log", "wb")
            proc = subprocess.Popen(agent_argv(cfg), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cfg.parent)
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

    def watch_lifetimes(self) -> None:
        """Finish each pod ``life`` seconds after it starts running (re-armed if it is re-placed)."""
        loop = asyncio.get_running_loop()

        def follow(update: PodUpdate) -> None:
            uid = update.pod.uid
            if update.phase is Phase.RUNNING and uid not in self.life_tasks:
                life = self.rng.expovariate(1.0 / self.s.life)
                self.life_tasks[uid] = loop.call_later(life, self._finish, uid)
            elif update.phase is Phase.PENDING and uid in self.life_tasks:
                self.life_tasks.pop(uid).cancel()

        self.cluster.subscribe(follow)

    def _finish(self, uid: str) -> None:
        """A pod's work ends, unless its node was killed (a dead node finishes nothing; it gets re-placed)."""
        self.life_tasks.pop(uid, None)
        if self.cluster.bound_node(uid) not in self.killed:
            self.cluster.finish(uid)

    def kill(self) -> list[str]:
        victims = self.rng.sample(self.procs[1:], self.s.kill)  # the first agent stays: it is a seed
        for p in victims:
            self.cpu_seconds()
            p.process.send_signal(signal.SIGKILL)
            p.killed = True
            self.killed.add(p.name)
            self.on_killed_nodes.update(uid for uid, c in self.cluster.pods.items()
                                        if c.phase is Phase.RUNNING and self.cluster.bound_node(uid) == p.name)
        return [p.name for p in victims]

    async def check_double_bindings(self) -> None:
        """Compare what every live agent says it runs with the cluster: the same epoch on another node is a double.

        Also counts nodes over capacity in the cluster's ground truth at this moment.
        """
        self.overcommits = max(self.overcommits, len(self.cluster.overcommitted_nodes()))
        reports = await asyncio.to_thread(lambda: [(p.name, _get(p.http, "/pods")) for p in self.procs if not p.killed])
        for name, body in reports:
            for uid, epoch in json.loads(body or b"{}").items():
                held = self.cluster.pods.get(uid)
                if held is not None and held.epoch == epoch and held.phase is Phase.RUNNING:
                    if self.cluster.bound_node(uid) != name:
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
    run = _Run(settings, workdir)
    harness = TwinHarness(run.cluster)
    try:
        address = await harness.start()
        models = workdir / "models"
        models.mkdir()
        scorer = _install_policy(models, pods, settings.seed)
        await run.start_agents(address, models)
        await run.wait_converged()
        run.sample_rss()
        idle = await run.idle_cpu()
        run.sample_rss()
        cpu_before = run.cpu_seconds()
        result = await _place(run, pods)
        run.sample_rss()
        result["agent_cpu_ms_per_pod"] = round(1000 * (run.cpu_seconds() - cpu_before) / max(1, len(pods)), 1)
    finally:
        run.stop_agents()
        await harness.stop()
    keep = os.environ.get("FEDPLANE_BENCH_KEEP")
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "backend": "memcluster-harness",
        "backend_is": ("the in-memory test cluster (edgeagent.memcluster) served on the twin link by edgeagent.twinharness; "
                       "the agents use their production twin client, but this fence is the test double's, not the twin service's"),
        "policy": "agents", "oracle": False,
        "agents": settings.agents, "pods": len(pods),
        "rss_mib_max": round(max(p.rss_max for p in run.procs) / 2**20, 1),
        "idle_cpu_pct": round(max(idle), 2), "idle_cpu_pct_mean": round(float(np.mean(idle)), 2),
        **result, "scorer": scorer,
        "workload": f"openb requests (first {len(pods)}), arrivals {settings.rate:g}/s, exp lifetimes mean {settings.life:g}s",
        "workdir": str(workdir) if keep else None,
    }


async def _place(run: _Run, pods: list[Pod]) -> dict[str, Any]:
    s = run.s
    cluster = run.cluster
    run.watch_lifetimes()
    start = time.monotonic()
    killed: list[str] = []
    next_check = start + CHECK_EVERY
    for i, pod in enumerate(pods):
        await asyncio.sleep(max(0.0, start + i / s.rate - time.monotonic()))
        cluster.submit(pod)
        if i == len(pods) // 2 and s.kill:
            killed = run.kill()
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + CHECK_EVERY
            run.sample_rss()
            await run.check_double_bindings()
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        if all(p.phase.finished for p in cluster.pods.values()):
            break
        await asyncio.sleep(CHECK_EVERY)
        run.sample_rss()
        await run.check_double_bindings()
    decisions = cluster.evidence.decisions
    ms = np.array([d.seconds for d in decisions]) * 1000.0
    replaced = [d for d in decisions if d.replaced]
    span = max((d.at for d in decisions), default=start) - start
    unfinished = [uid for uid, p in cluster.pods.items() if not p.phase.finished]
    return {
        "decision_ms_p50": round(float(np.percentile(ms, 50)), 1) if ms.size else None,
        "decision_ms_p99": round(float(np.percentile(ms, 99)), 1) if ms.size else None,
        "placements_per_s": round(len(decisions) / max(1e-9, span), 1),
        "double_bindings": run.double_bindings,
        "lost_pods": len(unfinished),
        "overcommits": run.overcommits,
        "capacity_refusals": cluster.evidence.capacity_refusals,
        "replaced_after_kill": len({d.pod for d in replaced} & run.on_killed_nodes),
        "pods_on_killed_nodes": len(run.on_killed_nodes),
        "killed": killed,
        "refused_duplicate_binds": cluster.evidence.duplicate_refusals,
        "refused_stale_binds": cluster.evidence.stale_refusals,
        "replace_decision_ms_p99": round(float(np.percentile([d.seconds * 1000 for d in replaced], 99)), 1) if replaced else None,
    }
