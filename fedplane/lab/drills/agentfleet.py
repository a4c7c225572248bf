"""Real edge agents for drills and the demo: ``fedplane agent`` processes, one per twin node.

The :class:`~fedplane.lab.drills.failoverdrill.EvidenceSource` drills and the demo run: the pods are
placed by the real agents (gossip, claims CRDT, fenced binds over the TwinCluster API served by
the control plane under test), and the evidence is theirs: each agent reports itself
(``ReportAgent`` over the twin link) with its gossip view. Each cluster's agents gossip only
among themselves, sealed with that cluster's own gossip key, joining through the cluster's first
two agents; every agent also joins one federation-wide pool (``wan``, its own key), so agents
of other clusters vouch for a cluster that is cut off from the control plane.

Faults: ``kill_agents`` SIGKILLs a cluster's agent processes; ``cut_off`` is the twin's
partition (which refuses the cluster's agents' reports, as their path to the control plane is
the twin link), so nothing is needed here; ``heal`` restarts killed agents on their data
directories (journal replay, as after a reboot). A :class:`Hosts` layer decides where each
agent runs and how faults reach it (:mod:`fedplane.lab.drills.netns` puts each in its own network
namespace); the default runs them all on loopback.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from fedcore.agentcmd import LOSS_ENV, agent_argv, dies_with_starter, precompile
from fedcore.loopback import free_ports

STOP_GRACE_S = 3.0
CONVERGE_TIMEOUT_S = 60.0
AGENT_SETTINGS: dict[str, Any] = {
    "log_level": "info",
    "gossip": {},
    "backend": {},
    "probe": {"kind": "twin"},
}
"""What every agent's YAML carries beyond its identity, addresses and data directory: no timing of its own, so
drills run the shipped gossip, back-end and placement timings (the twin probe stands in for the machine's)."""
TIMINGS = "defaults"
"""What the drills' JSON says of the agents' timings."""
EVIDENCE = "real fedplane agent processes (one per twin node), each reporting itself with its gossip views"


class Hosts(Protocol):
    """Where a fleet's agents run and how a cut reaches them (loopback here; :mod:`fedplane.lab.drills.netns`)."""

    def address(self, node: str) -> str:
        """The address the node's agent gossips on (its cluster's pool and the federation pool)."""
        ...

    def control_address(self, node: str) -> str:
        """The address the node's agent serves HTTP on, reachable from the control plane's host."""
        ...

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        """The command that runs ``argv`` on the node's host."""
        ...

    def cut_off(self, nodes: Sequence[str]) -> None:
        """Cut these nodes' hosts off from the control plane (their agents keep gossiping)."""
        ...

    def isolate(self, nodes: Sequence[str]) -> None:
        """Cut every link of these nodes' hosts: control plane, agent link and gossip mesh (a whole-host cut)."""
        ...

    def heal(self, nodes: Sequence[str]) -> None: ...


class Loopback:
    """Every agent on this host's loopback interface: a cut is the twin's partition only."""

    def address(self, node: str) -> str:
        return "127.0.0.1"

    def control_address(self, node: str) -> str:
        return "127.0.0.1"

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        return argv

    def cut_off(self, nodes: Sequence[str]) -> None:
        pass

    def isolate(self, nodes: Sequence[str]) -> None:
        raise NotImplementedError("a whole-host cut needs hosts of their own (network namespaces)")

    def heal(self, nodes: Sequence[str]) -> None:
        pass


@dataclass(slots=True)
class _Agent:
    cluster: str
    node: str
    config: Path
    http_port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    killed: bool = False

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


async def http_get(port: int, path: str, timeout: float = 0.5, host: str = "127.0.0.1") -> tuple[int, bytes] | None:
    """(status, body) of a GET on host:port, or None when nothing answers in time."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
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

    def __init__(self, nodes: Mapping[str, Sequence[str]], clock: Callable[[], float], hosts: Hosts | None = None,
                 loss: float = 0.0, credentials: Mapping[str, Path] | None = None) -> None:
        """``loss``: the share of gossip datagrams each agent drops (user-space fault injection, :data:`LOSS_ENV`);
        ``credentials``: per cluster, the agent credential file its agents show a plane that checks credentials."""
        self.clock, self.loss = clock, loss
        self.credentials = dict(credentials or {})
        self.hosts = hosts or Loopback()
        self.nodes = {c: list(ns) for c, ns in nodes.items()}
        self.workdir = Path(tempfile.mkdtemp(prefix="fedplane-agents-"))
        self.agents: list[_Agent] = []
        self.spawned = 0
        self.final = Histogram()  # the live agents' decision latencies, read as the fleet stops
        atexit.register(self._terminate)  # backstop: no agent outlives its parent, even on a crash

    async def start(self, target: str, link: str) -> None:
        """Write keyrings and configs, start every agent, wait until each sees all its cluster's peers.

        Agents bind through the twin link (``link``) and report themselves over it; ``target`` (the
        control plane's gRPC address) is not theirs to use.
        """
        everyone = [n for ns in self.nodes.values() for n in ns]
        ports = iter(free_ports(3 * len(everyone)))  # one call: no port handed out twice
        wan = {n: f"{self.hosts.address(n)}:{next(ports)}" for n in everyone}
        wan_key = self._key("federation")
        for cluster, names in self.nodes.items():
            key = self._key(cluster)
            gossip = {n: f"{self.hosts.address(n)}:{next(ports)}" for n in names}
            for node in names:
                data = self.workdir / node
                data.mkdir()
                http = next(ports)
                raw = {
                    **AGENT_SETTINGS, "node": node, "cluster": cluster, "data_dir": str(data),
                    "gossip": {**AGENT_SETTINGS["gossip"], "bind": gossip[node], "key_file": str(key),
                               "seeds": [gossip[n] for n in names[:2] if n != node]},
                    "wan": {"bind": wan[node], "seeds": [wan[n] for n in everyone[:2] if n != node], "key_file": str(wan_key)},
                    "backend": {**AGENT_SETTINGS["backend"], "kind": "twin", "address": link,
                                **({"credentials": str(self.credentials[cluster])} if cluster in self.credentials else {})},
                    "http": {"bind": f"{self.hosts.control_address(node)}:{http}"},
                }
                config = data / "agent.yaml"
                config.write_text(json.dumps(raw, indent=1))  # JSON is YAML
                self.agents.append(_Agent(cluster, node, config, http, self.hosts.control_address(node)))
        first = self.agents[0]  # checked on its own host: --check tries the addresses it will bind
        await asyncio.to_thread(precompile, first.config, None, functools.partial(self.hosts.wrap, first.node))
        for agent in self.agents:
            self._spawn(agent)
        await self._converge()

    async def stop(self) -> None:
        self.final = await self.decisions()
        await asyncio.to_thread(self._terminate)

    def kill_agents(self, cluster: str) -> None:
        for agent in self._of(cluster):
            self.kill_agent(agent.node)

    def kill_agent(self, node: str) -> None:
        """SIGKILL the node's agent (its process group); :meth:`restart_agent` or :meth:`heal` starts it again."""
        agent = self._agent(node)
        if agent.process is not None and agent.alive:
            os.killpg(agent.process.pid, signal.SIGKILL)
            agent.process.wait()
        agent.killed = True

    def restart_agent(self, node: str) -> None:
        """Start a killed agent again on its data directory (journal replay, as after a reboot)."""
        agent = self._agent(node)
        if agent.killed:
            agent.killed = False
            self._spawn(agent)

    def isolate(self, nodes: Sequence[str]) -> None:
        """Whole-host cut of ``nodes`` (every link; see :meth:`Hosts.isolate`)."""
        self.hosts.isolate(nodes)

    def heal_hosts(self, nodes: Sequence[str]) -> None:
        self.hosts.heal(nodes)

    def endpoint(self, node: str) -> tuple[str, int]:
        """Where the node's agent serves HTTP (/pods, /healthz, /metrics)."""
        agent = self._agent(node)
        return agent.host, agent.http_port

    def cut_off(self, cluster: str) -> None:
        self.hosts.cut_off(self.nodes[cluster])

    def heal(self, cluster: str) -> None:
        self.hosts.heal(self.nodes[cluster])
        for agent in self._of(cluster):
            if agent.killed:
                agent.killed = False
                self._spawn(agent)

    async def decisions(self) -> Histogram:
        """The live agents' decision latencies (pending seen -> bound here), merged."""
        merged = Histogram()
        replies = await asyncio.gather(*(http_get(a.http_port, "/metrics", 2.0, a.host) for a in self.agents if a.alive))
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
    def _key(self, name: str) -> Path:
        key = self.workdir / f"{name}.key"
        key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
        key.chmod(0o600)
        return key

    def _of(self, cluster: str) -> list[_Agent]:
        return [a for a in self.agents if a.cluster == cluster]

    def _agent(self, node: str) -> _Agent:
        return next(a for a in self.agents if a.node == node)

    def _spawn(self, agent: _Agent) -> None:
        if agent.log is None:
            agent.log = open(agent.config.parent / "agent.log", "ab")  # noqa: SIM115 - closed in _terminate
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the agent pins its own BLAS threads and telemetry (edgeagent.entry)
        if self.loss:
            env[LOSS_ENV] = str(self.loss)
        agent.process = subprocess.Popen(
            self.hosts.wrap(agent.node, dies_with_starter(agent_argv(agent.config))),
            stdout=agent.log, stderr=subprocess.STDOUT, env=env, cwd=agent.config.parent, start_new_session=True,
        )
        self.spawned += 1

    async def _converge(self) -> None:
        deadline = self.clock() + CONVERGE_TIMEOUT_S
        while True:
            for a in self.agents:
                if not a.alive:
                    tail = (a.config.parent / "agent.log").read_text(errors="replace")[-600:]
                    raise RuntimeError(f"agent {a.node} exited early:\n{tail}")
            seen = await asyncio.gather(*(http_get(a.http_port, "/metrics", 1.0, a.host) for a in self.agents))
            ok = sum(1 for a, s in zip(self.agents, seen) if s is not None and _peers_alive(s[1]) >= len(self.nodes[a.cluster]) - 1)
            if ok == len(self.agents):
                return
            if self.clock() > deadline:
                raise RuntimeError(f"agents did not converge within {CONVERGE_TIMEOUT_S:.0f}s ({ok}/{len(self.agents)} see all peers)")
            await asyncio.sleep(0.2)

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
