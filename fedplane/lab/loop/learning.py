"""The learning loop end to end on one machine: regions of real agents, one Flower SuperNode per region, rollout.

Each region is its own twin cluster (an :class:`InMemoryCluster` served over the twin link by
the :mod:`fedplane.lab.doubles.linkharness` test harness) with ``agents_per_region`` real ``fedplane agent``
processes gossiping among themselves and placing that region's traffic: regions differ by
workload mix, drawn from the openb trace's training pods by GPU shape (GPU-sharing pods, one
whole GPU, multi-GPU and CPU-only: non-IID by construction). The agents score with the int8
policy in their models directory and write their experience in their data directory.

The Flower side is a real Deployment Engine (:mod:`federated.flower.engine`): a SuperLink and
one SuperNode per region, the region's trainer, whose ClientApp reads its agents' experience
logs (read-only; on one machine the region's data directories stand in for shipping the rows
to a regional trainer). Why a regional trainer and not a SuperNode beside every agent: the
agent must stay within 70 MiB and torch-free, and a SuperNode with its ClientApp process costs
about the agent's whole budget again (``supernode_rss_mib`` in the bench output: measured, not
assumed), and on a 2-core machine every extra ClientApp process adds ~2 s of start-up per round.
The loop app (:mod:`federated.flower.loopserver`) runs the rounds and the rollout to these
agents; this module starts and stops everything and drives the traffic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from controlplane.auth import Authenticator
from controlplane.experienceinbox import ExperienceInbox
from controlplane.sqlitestore import SqliteStore
from edgeagent.clusters import Phase, PodUpdate
from fedapi import credentials
from fedcore.agentcmd import agent_argv, dies_with_starter, precompile
from fedcore.loopback import free_ports
from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.traces import locate, openb
from federated import splits
from federated.flower import appdir, engine, loopconfig
from federated.flower.shelf import ModelShelf
from fedplane.lab.doubles.linkharness import TwinHarness
from fedplane.lab.doubles.memcluster import InMemoryCluster
from fedplane.lab.drills.agentfleet import Hosts, Loopback

NODE_SHAPE = (96000, 393216, 8, "G2")
"""The openb fleet's most common node: 96 cores, 384 GiB, 8 GPUs."""
MIXES = ("GPU-sharing pods", "one whole GPU", "multi-GPU and CPU-only pods")
MAX_PENDING = 3
"""A region's traffic waits while this many of its pods are pending: the cluster runs full, not flooded."""
Line = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LoopSettings:
    regions: int = 3
    agents_per_region: int = 3
    rounds: int = 10
    cold_start: str = "random"
    prox: float = 1e-6
    window: int = 200
    warmup_s: float = 12.0
    deadline_s: float = 30.0
    canary: int = 1
    canary_weight: float = 0.2
    eval_nodes: int = 128
    eval_seeds: int = 4
    rate: float = 5.0
    """Pod arrivals per second per region (while fewer than MAX_PENDING wait)."""
    life: float = 6.0
    """Mean pod lifetime, seconds (exponential)."""
    seed: int = 0
    traces: str | None = None
    transport: str = "files"
    """``files``: the loop copies models into agents' directories and trainers read agents' logs in place (one machine);
    ``network``: models reach agents signed over their link from the plane's models directory and agents ship their
    experience over it to the plane's inbox, which the trainers read (:mod:`controlplane.learninglink`)."""


def mix(pod: Pod) -> int:
    """Which of :data:`MIXES` a pod belongs to."""
    if pod.gpu.is_sharing:
        return 0
    if pod.gpu.count == 1:
        return 1
    return 2


class Trainers(Protocol):
    """Where the regional trainers run and how they reach their region's experience (None on a fleet: SuperNodes on
    this host reading the directories :meth:`LoopFleet.region_dirs` names)."""

    def node_config(self, region: int) -> dict[str, str | int | float]:
        """The region's SuperNode's node config beyond ``partition-id`` (and a fault)."""
        ...

    def wrap(self, region: int) -> list[str]:
        """The command prefix that runs the region's SuperNode on its host."""
        ...


@dataclass(slots=True)
class _Agent:
    info: loopconfig.Agent
    process: subprocess.Popen[bytes]


@dataclass(slots=True)
class LoopFleet:
    """The regions: twin clusters, their harnesses, agent processes and traffic."""

    settings: LoopSettings
    workdir: Path
    clusters: list[InMemoryCluster] = field(default_factory=list)
    harnesses: list[TwinHarness] = field(default_factory=list)
    agents: list[_Agent] = field(default_factory=list)
    killed: set[str] = field(default_factory=set)
    inbox: ExperienceInbox | None = None
    auth: Authenticator | None = None
    """Network transport: the agents' credentials, checked on every call of their link as the plane checks them."""
    hosts: Hosts = field(default_factory=Loopback)
    """Where each agent runs (:mod:`fedplane.lab.drills.netns`: a host of its own) and the address it answers on."""
    plane_host: str = "127.0.0.1"
    """The address the plane (the regions' twin link, the SuperLink) listens on, reachable from every other host."""
    trainers: Trainers | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)

    async def start(self) -> None:
        s = self.settings
        pods = openb.load_pods(locate.trace_file(None, locate.OPENB_PODS, s.traces))
        traffic = [[p for p in splits.openb_train_pods(pods) if mix(p) == k % len(MIXES)] for k in range(s.regions)]
        n = s.regions * s.agents_per_region
        ports = free_ports(2 * n)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        configs: list[tuple[Path, loopconfig.Agent]] = []
        network = s.transport == "network"
        shelf = ModelShelf(self.shelf_dir) if network else None
        self.inbox = ExperienceInbox(self.workdir / "plane" / "experience", 64 << 20) if network else None
        self.auth = Authenticator(SqliteStore(self.workdir / "plane" / "credentials.db")) if network else None
        for r in range(s.regions):
            nodes = [Node(f"r{r}-edge-{i}", *NODE_SHAPE[:2], gpus=NODE_SHAPE[2], gpu_model=NODE_SHAPE[3],
                          cluster=f"region-{r}", region=f"region-{r}")
                     for i in range(s.agents_per_region)]
            cluster = InMemoryCluster(nodes)
            harness = TwinHarness(cluster, name=f"region-{r}", bind=f"{self.plane_host}:0", shelf=shelf, inbox=self.inbox, gate=self.auth)
            address = await harness.start()
            self.clusters.append(cluster)
            self.harnesses.append(harness)
            gossip = ports[r * s.agents_per_region:(r + 1) * s.agents_per_region]
            for i, node in enumerate(nodes):
                data = self.workdir / "agents" / node.name
                (data / "models").mkdir(parents=True)
                http = ports[n + r * s.agents_per_region + i]
                # over the network the trainers read what the agent shipped, held by the plane
                held = self.workdir / "plane" / "experience" / f"region-{r}" / node.name if network else data
                info = loopconfig.Agent(node.name, f"region-{r}", str(data / "models"), str(held), http,
                                        self.hosts.control_address(node.name))
                peers = [f"{self.hosts.address(n.name)}:{gossip[k]}" for k, n in enumerate(nodes) if n is not node]
                config = _agent_config(info, data, f"{self.hosts.address(node.name)}:{gossip[i]}", peers, address)
                if self.auth is not None:  # each agent acts for its own cluster and node only
                    token = self.auth.issue("agent", info.region, node.name)
                    credentials.write(data / "agent.cred", credentials.Credential(token, "agent", info.region, node.name, address))
                    config["backend"]["credentials"] = str(data / "agent.cred")
                (data / "agent.yaml").write_text(json.dumps(config))
                configs.append((data / "agent.yaml", info))
        first = configs[0][1].name  # checked on its own host: --check tries the addresses it will bind
        await asyncio.to_thread(precompile, configs[0][0], env, functools.partial(self.hosts.wrap, first))
        for path, info in configs:
            self.agents.append(_Agent(info, _launch(self.hosts.wrap(info.name, dies_with_starter(agent_argv(path))), path.parent, env)))
        rng = random.Random(s.seed)
        for r, cluster in enumerate(self.clusters):
            self._follow_lifetimes(cluster, rng)
            self._tasks.append(asyncio.get_running_loop().create_task(self._traffic(cluster, traffic[r], rng)))

    @property
    def shelf_dir(self) -> Path:
        """The plane's models directory (network transport)."""
        return self.workdir / "plane" / "models"

    def experience_kib(self) -> float:
        """KiB of experience the plane received over the link (compressed; network transport)."""
        return self.inbox.received_bytes / 1024 if self.inbox is not None else 0.0

    @property
    def infos(self) -> list[loopconfig.Agent]:
        return [a.info for a in self.agents]

    def region_dirs(self, region: int) -> list[str]:
        return [a.info.data for a in self.agents if a.info.region == f"region-{region}"]

    def kill_agent(self, name: str) -> None:
        """SIGKILL one agent (a crash mid-round); the loop must carry on without it."""
        agent = next(a for a in self.agents if a.info.name == name)
        agent.process.send_signal(signal.SIGKILL)
        self.killed.add(name)

    def placed(self) -> int:
        return sum(len(c.evidence.decisions) for c in self.clusters)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for timer in self._timers.values():
            timer.cancel()
        for agent in self.agents:
            if agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for agent in self.agents:
            try:
                await asyncio.to_thread(agent.process.wait, 10)
            except subprocess.TimeoutExpired:
                agent.process.kill()
                agent.process.wait()
        for harness in self.harnesses:
            await harness.stop()
        if self.inbox is not None:
            self.inbox.close()
        if self.auth is not None:
            self.auth.store.close()

    async def _traffic(self, cluster: InMemoryCluster, pods: list[Pod], rng: random.Random) -> None:
        """Submit the region's pods (cycling, each copy a new uid) at ``rate`` while few are pending."""
        n = 0
        while True:
            await asyncio.sleep(1.0 / self.settings.rate)
            if sum(p.phase is Phase.PENDING for p in cluster.pods.values()) >= MAX_PENDING:
                continue
            base = pods[rng.randrange(len(pods))]
            n += 1
            cluster.submit(dataclasses.replace(base, uid=f"{base.uid}-{n}"))

    def _follow_lifetimes(self, cluster: InMemoryCluster, rng: random.Random) -> None:
        loop = asyncio.get_running_loop()

        def follow(update: PodUpdate) -> None:
            uid = update.pod.uid
            if update.phase is Phase.RUNNING and uid not in self._timers:
                self._timers[uid] = loop.call_later(rng.expovariate(1.0 / self.settings.life), self._finish, cluster, uid)
            elif update.phase is Phase.PENDING and uid in self._timers:
                self._timers.pop(uid).cancel()

        cluster.subscribe(follow)

    def _finish(self, cluster: InMemoryCluster, uid: str) -> None:
        self._timers.pop(uid, None)
        cluster.finish(uid)


def _launch(argv: list[str], data: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start an agent process in its data directory, its output in ``agent.log`` there (a fork: instant)."""
    with open(data / "agent.log", "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=data)


def _agent_config(info: loopconfig.Agent, data: Path, bind: str, seeds: list[str], address: str) -> dict[str, Any]:
    return {
        "node": info.name, "cluster": info.region, "data_dir": str(data), "log_level": "warning", "experience_ship": 1.0,
        "gossip": {"bind": bind, "seeds": seeds},
        "backend": {"kind": "twin", "address": address, "status_interval": 30.0},
        "probe": {"kind": "twin"},
        "models": {"dir": info.models, "poll_interval": 0.5},
        "http": {"bind": f"{info.host}:{info.http}"},
    }


async def run_federation(fleet: LoopFleet, tag: str, overrides: dict[str, str | int | float], faults: dict[int, str],
                         on_line: Callable[[Line], None], on_engine: Callable[[engine.Engine], None] | None = None) -> list[Line]:
    """One loop run on ``fleet``: a fresh SuperLink and one SuperNode per region (``faults``: region -> fault spec),
    the loop app with ``overrides``; ``on_line`` sees each report line as it is written. Returns them all."""
    s = fleet.settings
    workdir = fleet.workdir / tag
    trainers = fleet.trainers
    node_configs: list[dict[str, str | int | float]] = [
        {"partition-id": r, **(trainers.node_config(r) if trainers else {"agents": os.pathsep.join(fleet.region_dirs(r))}),
         **({"fault": faults[r]} if r in faults else {})}
        for r in range(s.regions)]
    wraps = [trainers.wrap(r) for r in range(s.regions)] if trainers else []
    report = workdir / "report.jsonl"
    config = {
        "run-tag": tag, "num-rounds": s.rounds, "round-deadline-s": s.deadline_s, "seed": s.seed, "cold-start": s.cold_start,
        "prox": s.prox, "window": s.window, "warmup-s": s.warmup_s, "min-clients": s.regions, "canary": s.canary,
        "canary-weight": s.canary_weight,
        "eval-nodes": s.eval_nodes, "eval-seeds": s.eval_seeds, "traces": s.traces or "",
        "fleet-file": str(loopconfig.write_fleet(fleet.workdir / "fleet.json", fleet.infos)),
        "registry-dir": str(workdir / "registry"), "report-file": str(report),
        **({"shelf-dir": str(fleet.shelf_dir)} if s.transport == "network" else {}), **overrides,
    }
    # trainers on hosts of their own join over the network: TLS and SuperNode authentication, as the rounds service does
    eng = await asyncio.to_thread(engine.start, workdir, node_configs, {"tag": tag}, 60.0, fleet.plane_host, wraps, trainers is not None)
    if on_engine is not None:
        on_engine(eng)
    lines: list[Line] = []
    follower = asyncio.get_running_loop().create_task(_follow(report, lines, on_line))
    try:
        timeout = int(config["num-rounds"]) * (s.deadline_s + 90) + 600  # type: ignore[call-overload]
        await asyncio.to_thread(eng.run, config, timeout, tag, appdir.LOOP)
    finally:
        await asyncio.to_thread(eng.stop)
        await asyncio.sleep(0.6)
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
    _drain(report, lines, on_line)
    return lines


async def _follow(report: Path, lines: list[Line], on_line: Callable[[Line], None]) -> None:
    while True:
        _drain(report, lines, on_line)
        await asyncio.sleep(0.5)


def _drain(report: Path, lines: list[Line], on_line: Callable[[Line], None]) -> None:
    if not report.is_file():
        return
    text = report.read_text()
    complete = text.splitlines()[: text.count("\n")]
    for raw in complete[len(lines):]:
        lines.append(json.loads(raw))
        on_line(lines[-1])


def supernode_rss_mib(eng: engine.Engine) -> float:
    """Resident memory of one regional SuperNode process (what a SuperNode beside every agent would add)."""
    import psutil

    sizes = []
    for name, pid in eng.groups.items():
        if name.startswith("supernode"):
            try:
                sizes.append(psutil.Process(pid).memory_info().rss)
            except psutil.Error:
                pass
    return round(max(sizes, default=0) / 2**20, 1)


def rounds_of(lines: list[Line]) -> list[Line]:
    """The learning rounds (not the drill), each with ``metric``: its fleet model measured on the report seeds."""
    return [line for line in reported(lines) if not line.get("drill")]


def reported(lines: list[Line]) -> list[Line]:
    """Every round line with ``metric`` (the fleet model after the round) and, for a drill round,
    ``report_canary_metric`` taken from the ``measured`` line: report seeds, not the judging ones."""
    measured = event(lines, "measured")
    out = []
    for line in (line for line in lines if "round" in line):
        extra = {"metric": measured["metrics"][line["round"]]}
        if str(line["round"]) in measured["drill_canary_metric"]:
            extra["report_canary_metric"] = measured["drill_canary_metric"][str(line["round"])]
        out.append({**line, **extra})
    return out


def event(lines: list[Line], name: str) -> Line:
    found = [line for line in lines if line.get("event") == name]
    if not found:
        raise RuntimeError(f"the loop's report has no {name!r} line: the run did not finish; see its logs")
    return found[-1]


async def bench(settings: LoopSettings, workdir: Path, png: Path | None, poison: str, robust: str,
                on_line: Callable[[str, Line], None]) -> dict[str, Any]:
    """``fedplane bench loop``: the clean loop (with the heuristics, central training and the rollback drill as one
    extra round), then the same loop from the same cold start with one region poisoned, aggregated robustly."""
    started = time.monotonic()
    fleet = LoopFleet(settings, workdir)
    supernode: list[float] = []
    try:
        await fleet.start()
        clean = await run_federation(
            fleet, "clean", {"baselines": 1, "num-rounds": settings.rounds + 1, "drill-round": settings.rounds + 1}, {},
            lambda line: on_line("clean", line), lambda eng: measure_supernode_later(eng, supernode))
        poisoned = await run_federation(
            fleet, "poisoned", {"strategy": robust, "clip-median-factor": 1.0}, {settings.regions - 1: poison},
            lambda line: on_line("poisoned", line))
        placed = fleet.placed()
    finally:
        await fleet.stop()
    result = summarise(settings, fleet, clean, max(supernode, default=0.0), placed, started)
    result["poisoned"] = {
        "final_metric": rounds_of(poisoned)[-1]["metric"], "fault": f"region {settings.regions - 1}: {poison}",
        "strategy": f"{robust} + update norm <= 1 x median", "first_metric": event(poisoned, "measured")["metrics"][0],
        "metrics": [line["metric"] for line in rounds_of(poisoned)], "canary": [line["canary"] for line in rounds_of(poisoned)]}
    result["detail"]["report_measure_s"]["poisoned"] = event(poisoned, "measured")["measure_s"]
    if settings.transport == "network":
        result.update(network_figures(fleet, clean + poisoned))
    if png is not None:
        result["curve_png"] = str(plot(result, png))
    return result


def summarise(settings: LoopSettings, fleet: LoopFleet, clean: list[Line], supernode_mib: float, placed: int,
              started: float) -> dict[str, Any]:
    """The clean run's figures: the curve against the best heuristic and central training, and the rollback drill."""
    start, heuristics, central = event(clean, "start"), event(clean, "heuristics"), event(clean, "central")
    learning = rounds_of(clean)
    drill = next(line for line in reported(clean) if line.get("drill"))
    best = max((k for k in heuristics if k != "event"), key=lambda k: heuristics[k])
    before = learning[-1]["metric"]
    result: dict[str, Any] = {
        "metric": start["metric"], "higher_is_better": start["higher_is_better"], "cold_start": start["cold_start"],
        "judge_seeds": start["judge_seeds"], "report_seeds": start["report_seeds"],
        "rounds": [{k: line.get(k) for k in ("round", "metric", "model_version", "canary", "round_wall_s", "bytes_up", "bytes_down",
                                             "judge_metric", "candidate", "canary_metric", "candidate_metric", "answered",
                                             "examples", "agents_on_version", "phases_s")}
                   for line in learning],
        "first_metric": event(clean, "measured")["metrics"][0],
        "final_metric": learning[-1]["metric"],
        "best_heuristic_metric": heuristics[best],
        "central_metric": central["central_metric"],
        "rollback_drill": {
            "rounds_to_rollback": 1 if drill["canary"] == "rolled_back" else None,
            "metric_drop_rel": max(0.0, (before - drill["report_canary_metric"]) / before) if "report_canary_metric" in drill else None,
            "candidate": drill.get("candidate"), "canary_metric": drill.get("report_canary_metric"), "fleet_metric_before": before,
            "judge_canary_metric": drill.get("canary_metric"),
            "agents_back_on_previous": drill.get("agents_on_version"), "round_wall_s": drill["round_wall_s"],
        },
        "detail": {
            "metric": start["metric_detail"], "best_heuristic": best, "heuristics": {k: v for k, v in heuristics.items() if k != "event"},
            "central": central, "agents": len(fleet.agents), "regions": {f"region-{r}": MIXES[r % len(MIXES)] for r in range(settings.regions)},
            "engine": "flower deployment engine: 1 SuperLink + 1 SuperNode per region (real processes, loopback)",
            "supernode_rss_mib": supernode_mib, "pods_placed_by_agents": placed,
            "learner": f"proximal least squares on the linear part (prox {settings.prox}), newest {settings.window} rows per agent; "
                       "clean run: pooled (the regions' normal equations summed)",
            "canary": f"{settings.canary} agent(s) of {len(fleet.agents)} scoring {settings.canary_weight:.0%} of their decisions "
                      "(by pod uid) with the candidate; promoted when, on the judge seeds, the fleet during the canary stays within 0.5% of the current "
                      "fleet metric and the fleet with the candidate everywhere does not drop below it",
            "round_wall": "time between consecutive verdicts: round r+1's regional training runs while round r's candidate is judged",
            "seeds": "canary and promotion judged on judge_seeds; every reported figure (each round's metric, first, final, heuristics, "
                     "central, drill, poisoned) measured after the loop on report_seeds, disjoint, same held-out pods and nodes",
            "report_measure_s": {"clean": event(clean, "measured")["measure_s"]},
            "wall_s": round(time.monotonic() - started, 1),
        },
    }
    return result


def network_figures(fleet: LoopFleet, lines: list[Line]) -> dict[str, Any]:
    """What the network transport cost: experience per agent per round (compressed, as the plane received it) and, for
    each promotion, the seconds until every agent ran it (the loop's fleet confirmation, by the agents' /metrics)."""
    rounds = [line for line in lines if "round" in line]
    rollouts = sorted(line["phases_s"]["fleet_confirm"] for line in rounds if line.get("canary") == "promoted")
    return {
        "transport": "network", "authenticated": fleet.auth is not None,
        "experience_kib_per_agent_round": round(fleet.experience_kib() / max(1, len(fleet.agents) * len(rounds)), 2),
        "model_rollout_s_p99": rollouts[min(len(rollouts) - 1, int(0.99 * len(rollouts)))] if rollouts else None,
        "promotions": len(rollouts),
    }


def measure_supernode_later(eng: engine.Engine, into: list[float]) -> None:
    """Sample a SuperNode's RSS once it has settled (a few seconds after start), off the event loop."""
    def sample() -> None:
        time.sleep(5.0)
        into.append(supernode_rss_mib(eng))

    asyncio.get_running_loop().run_in_executor(None, sample)


def plot(result: dict[str, Any], png: Path) -> Path:
    from fedcore.reporting import plot_series

    rounds = result["rounds"]
    x = [0, *[r["round"] for r in rounds]]
    n = len(x)
    series = {"federated (clean)": [result["first_metric"], *[r["metric"] for r in rounds]]}
    if "poisoned" in result:
        series["poisoned region, robust"] = [result["poisoned"]["first_metric"], *result["poisoned"]["metrics"]][:n]
    series[f"best heuristic ({result['detail']['best_heuristic']})"] = [result["best_heuristic_metric"]] * n
    series["central (pooled experience)"] = [result["central_metric"]] * n
    series = {k: v + [v[-1]] * (n - len(v)) for k, v in series.items()}
    return plot_series(png, f"learning loop: {result['metric']} per round (cold start: {result['cold_start'].split(':')[0]})",
                       x, series, "round (0 = cold start)")
