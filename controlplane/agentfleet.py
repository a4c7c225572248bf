"""Real edge agents for drills and the demo: ``fedplane agent`` processes, one per twin node.

An :class:`~controlplane.feeder.EvidenceSource` like the in-process feeder, but the pods are
placed by the real agents (gossip, claims CRDT, fenced binds over the TwinCluster API served by
the control plane under test). Each cluster's agents gossip only among themselves, sealed with
that cluster's own gossip key, joining through the cluster's first two agents.

The agent has no control-plane client yet (it never calls ``ControlPlane.ReportAgent``), so the
fleet relays for it: every ``interval_s`` it asks each agent's ``/healthz`` and reports the agents
that answer, on their behalf, as alive (ready = the agent says it is healthy). This is the
liveness evidence an agent would send itself; peer views (its gossip membership) are not exposed
by the agent, so none are relayed. Faults: ``kill_agents`` SIGKILLs a cluster's agent processes;
``cut_off`` stops relaying for the cluster (its agents keep running and gossiping: only their path
to the control plane is cut); ``heal`` resumes relaying and restarts killed agents on their data
directories (journal replay, as after a reboot).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc

from fedapi import client, controlplane_pb2 as cp, controlplane_pb2_grpc
from fedcore.agentcmd import agent_argv, precompile
from fedcore.loopback import free_ports

STOP_GRACE_S = 3.0
CONVERGE_TIMEOUT_S = 60.0
AGENT_SETTINGS: dict[str, Any] = {
    "log_level": "warning",
    "gossip": {"probe_interval": 0.5, "reap_after": 30.0},
    "backend": {"timeout": 2.0, "status_interval": 10.0},
    "probe": {"kind": "twin"},
}
"""What every agent's YAML carries beyond its identity, addresses and data directory."""
EVIDENCE = "real fedplane agent processes (one per twin node); liveness relayed from each agent's /healthz"


@dataclass(slots=True)
class _Agent:
    cluster: str
    node: str
    config: Path
    http_port: int
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    killed: bool = False
    agent_id: str = ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass(slots=True)
class Histogram:
    """Merged cumulative buckets of the agents' ``fedplane_agent_decision_seconds``."""

    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count
    total: float = 0.0
    count: float = 0.0

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding the q-quantile (bucket resolution); nan without samples."""
        if not self.count:
            return float("nan")
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= q * self.count:
                return bound
        return float("inf")


async def http_get(port: int, path: str, timeout: float = 0.5) -> tuple[int, bytes] | None:
    """(status, body) of a GET on 127.0.0.1:port, or None when nothing answers in time."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        raw = await asyncio.wait_for(reader.read(), timeout)
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body
    except (OSError, asyncio.TimeoutError, ValueError, IndexError):
        return None
    finally:
        writer.close()


class AgentFleet:
    """``fedplane agent`` processes for twin clusters' nodes; an EvidenceSource (see the module docstring)."""

    def __init__(self, nodes: Mapping[str, Sequence[str]], clock: Callable[[], float], interval_s: float = 0.2) -> None:
        self.clock, self.interval_s = clock, interval_s
        self.nodes = {c: list(ns) for c, ns in nodes.items()}
        self.workdir = Path(tempfile.mkdtemp(prefix="fedplane-agents-"))
        self.agents: list[_Agent] = []
        self.cut: set[str] = set()
        self.sequence = itertools.count(1)
        self.spawned = 0
        self.final = Histogram()  # the live agents' decision latencies, read as the fleet stops
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        atexit.register(self._terminate)  # backstop: no agent outlives its parent, even on a crash

    async def start(self, target: str, link: str) -> None:
        """Write keyrings and configs, start every agent, wait until each sees all its cluster's peers.

        Agents bind through the twin link (``link``); their evidence is relayed to ``target``.
        """
        ports = iter(free_ports(2 * sum(len(ns) for ns in self.nodes.values())))  # one call: no port handed out twice
        for cluster, names in self.nodes.items():
            key = self.workdir / f"{cluster}.key"
            key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
            key.chmod(0o600)
            gossip, http = [next(ports) for _ in names], [next(ports) for _ in names]
            for i, node in enumerate(names):
                data = self.workdir / node
                data.mkdir()
                seeds = [f"127.0.0.1:{p}" for p in gossip[:2] if p != gossip[i]]
                raw = {
                    **AGENT_SETTINGS, "node": node, "cluster": cluster, "data_dir": str(data),
                    "gossip": {**AGENT_SETTINGS["gossip"], "bind": f"127.0.0.1:{gossip[i]}", "seeds": seeds, "key_file": str(key)},
                    "backend": {**AGENT_SETTINGS["backend"], "kind": "twin", "address": link},
                    "http": {"bind": f"127.0.0.1:{http[i]}"},
                }
                config = data / "agent.yaml"
                config.write_text(json.dumps(raw, indent=1))  # JSON is YAML
                self.agents.append(_Agent(cluster, node, config, http[i]))
        await asyncio.to_thread(precompile, self.agents[0].config)
        for agent in self.agents:
            self._spawn(agent)
        await self._converge()
        self._channel = client.connect_aio(target)
        stub = controlplane_pb2_grpc.ControlPlaneStub(self._channel)  # type: ignore[no-untyped-call]
        self._task = asyncio.create_task(self._relay(stub))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
        self.final = await self.decisions()
        await asyncio.to_thread(self._terminate)

    def kill_agents(self, cluster: str) -> None:
        for agent in self._of(cluster):
            if agent.process is not None and agent.alive:
                os.killpg(agent.process.pid, signal.SIGKILL)
                agent.process.wait()
            agent.killed = True

    def cut_off(self, cluster: str) -> None:
        self.cut.add(cluster)

    def heal(self, cluster: str) -> None:
        self.cut.discard(cluster)
        for agent in self._of(cluster):
            if agent.killed:
                agent.killed = False
                self._spawn(agent)

    async def decisions(self) -> Histogram:
        """The live agents' decision latencies (pending seen -> bound here), merged."""
        merged = Histogram()
        replies = await asyncio.gather(*(http_get(a.http_port, "/metrics", 2.0) for a in self.agents if a.alive))
        for reply in replies:
            if reply is None or reply[0] != 200:
                continue
            for line in reply[1].decode().splitlines():
                name, _, value = line.rpartition(" ")
                if name.startswith('fedplane_agent_decision_seconds_bucket{le="'):
                    bound = float(name.split('"')[1])
                    merged.buckets[bound] = merged.buckets.get(bound, 0.0) + float(value)
                elif name == "fedplane_agent_decision_seconds_sum":
                    merged.total += float(value)
                elif name == "fedplane_agent_decision_seconds_count":
                    merged.count += float(value)
        return merged

    def pids(self) -> list[int]:
        """Process ids of the agents running now (tests check none is left behind)."""
        return [a.process.pid for a in self.agents if a.process is not None and a.alive]

    # -- internals -----------------------------------------------------------------------------------
    def _of(self, cluster: str) -> list[_Agent]:
        return [a for a in self.agents if a.cluster == cluster]

    def _spawn(self, agent: _Agent) -> None:
        if agent.log is None:
            agent.log = open(agent.config.parent / "agent.log", "ab")  # noqa: SIM115 - closed in _terminate
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the agent pins its own BLAS threads and telemetry (edgeagent.entry)
        agent.process = subprocess.Popen(
            agent_argv(agent.config),
            stdout=agent.log, stderr=subprocess.STDOUT, env=env, cwd=agent.config.parent, start_new_session=True,
        )
        self.spawned += 1
        agent.agent_id = f"{agent.node}-{agent.process.pid}-{self.spawned}"  # a restart is a new agent

    async def _converge(self) -> None:
        deadline = self.clock() + CONVERGE_TIMEOUT_S
        while True:
            for a in self.agents:
                if not a.alive:
                    tail = (a.config.parent / "agent.log").read_text(errors="replace")[-600:]
                    raise RuntimeError(f"agent {a.node} exited early:\n{tail}")
            seen = await asyncio.gather(*(http_get(a.http_port, "/metrics", 1.0) for a in self.agents))
            ok = sum(1 for a, s in zip(self.agents, seen) if s is not None and _peers_alive(s[1]) >= len(self.nodes[a.cluster]) - 1)
            if ok == len(self.agents):
                return
            if self.clock() > deadline:
                raise RuntimeError(f"agents did not converge within {CONVERGE_TIMEOUT_S:.0f}s ({ok}/{len(self.agents)} see all peers)")
            await asyncio.sleep(0.2)

    async def _relay(self, stub: controlplane_pb2_grpc.ControlPlaneStub) -> None:
        while True:
            live = [a for a in self.agents if a.cluster not in self.cut and not a.killed]
            answers = await asyncio.gather(*(http_get(a.http_port, "/healthz") for a in live))
            reports = [
                cp.AgentReport(cluster=a.cluster, node=a.node, agent_id=a.agent_id, sequence=next(self.sequence),
                               summary=cp.NodeSummary(node=a.node, ready=answer[0] == 200))
                for a, answer in zip(live, answers) if answer is not None
            ]
            # A report that fails (control plane down or restarting) is lost, as the agent's own would be.
            await asyncio.gather(*(stub.ReportAgent(r, timeout=1.0) for r in reports), return_exceptions=True)
            await asyncio.sleep(self.interval_s)

    def _terminate(self) -> None:
        """SIGTERM every agent's process group, SIGKILL what is left after the grace, remove the work dir."""
        running = [a for a in self.agents if a.process is not None and a.alive]
        for a in running:
            assert a.process is not None
            _signal_group(a.process.pid, signal.SIGTERM)
        for a in running:
            assert a.process is not None
            try:
                a.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(a.process.pid, signal.SIGKILL)
                a.process.wait()
        for a in self.agents:
            if a.log is not None:
                a.log.close()
                a.log = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self._terminate)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _peers_alive(metrics: bytes) -> float:
    for line in metrics.decode().splitlines():
        if line.startswith("fedplane_agent_peers_alive "):
            return float(line.split()[1])
    return -1.0
