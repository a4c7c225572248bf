"""Simulated edge agents for ``bench scale``: many in one process, each on its own link connection to the plane.

Each agent speaks the real agent link (:class:`edgeagent.planeclient.PlaneClient` over :mod:`fedapi.agentlink`:
real sockets, real frames) and reports like a real agent (:func:`edgeagent.reporting.report`'s wire map: its node
summary, its gossip view of every peer of its cluster plus a sample of other clusters' members), at the interval
the plane's ack asks for. What is simulated: the gossip views (a silenced node is seen SUSPECT ``suspect_after_s``
after it went silent and DEAD after ``dead_after_s``: a SWIM failure detector's timings) and the placement: a
cluster's agents share one pending-pod watch (the plane would serve one watch per agent, 10,000 of them polling, as
real agents each filter the same stream) and bind its pending pods round-robin, each agent over its own connection
(BindPod on its own node, the next agent when the node refuses). The same watch keeps the bench's ground truth: every
pod of the cluster as the twin's API streams it (its phase and readiness), counted per workload on request.

Driven over stdin, one JSON line each: first its :class:`FleetSpec`, then commands: ``{"silence": [cluster, ...]}``
(those agents stop reporting and binding: their node went dark), ``{"census": true}``, answered with one JSON line
on stdout (per live cluster whose watch is up: workload -> ready replicas), and ``{"stop": true}``, answered with one
JSON line of counters.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from edgeagent.clustercalls import BACKOFF_MAX
from edgeagent.clusters import ClusterUnavailable
from edgeagent.linkcodec import EVENT_DELETED
from edgeagent.planeclient import PlaneClient
from edgeagent.reporting import PEER_STATES
from fedapi.agentlink import LinkError, Wire
from gossip.members import MemberState

TIMEOUT_S = 10.0
POD_PENDING = 1
"""fedplane.v1.PodPhase POD_PENDING."""
BIND_RETRY_S = 1.0
BIND_CONCURRENCY = 64
"""Binds in flight per process: enough to keep the plane busy, few enough not to time out behind each other."""


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """One worker's share of the fleet (whole clusters: their agents bind round-robin among themselves)."""

    link: str
    clusters: dict[str, list[str]]
    """Cluster -> its nodes (one simulated agent each)."""
    wan: dict[str, list[str]]
    """Node -> the other clusters' members (``cluster/node``) in its federation-pool view."""
    tokens: dict[str, str]
    """Cluster -> its agents' credential."""
    cpu_milli: int
    memory_mib: int
    suspect_after_s: float = 1.0
    dead_after_s: float = 3.0

    @staticmethod
    def from_json(raw: str) -> FleetSpec:
        return FleetSpec(**json.loads(raw))


@dataclass(slots=True)
class Counters:
    reports: int = 0
    report_errors: int = 0
    binds: int = 0
    bind_refused: int = 0
    bind_errors: int = 0
    watch_restarts: int = 0
    intervals_ms: set[int] = field(default_factory=set)


class Fleet:
    """The simulated agents of one worker process."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.counters = Counters()
        self.silent_since: dict[str, float] = {}
        """Cluster -> when it went dark (its agents stop; everyone's view of its nodes decays)."""
        self.binding = asyncio.Semaphore(BIND_CONCURRENCY)
        self.tasks: list[asyncio.Task[None]] = []
        self.clients: dict[str, PlaneClient] = {}
        self.usage: dict[str, int] = {}
        """Node -> pods this fleet bound there (its summary's allocation)."""
        self.views: dict[str, tuple[int, list[Wire]]] = {}
        """Node -> its gossip view as last built (and how many clusters were silent then)."""
        self.pods: dict[str, dict[str, tuple[str, bool]]] = {}
        """Cluster (its watch up) -> pod -> (workload, ready), as the twin streams them."""

    def start(self) -> None:
        for cluster, nodes in self.spec.clusters.items():
            for i, node in enumerate(nodes):
                self.clients[node] = PlaneClient(self.spec.link, cluster, TIMEOUT_S, token=self.spec.tokens[cluster])
                self.tasks.append(asyncio.create_task(self._report(cluster, node, i)))
            self.tasks.append(asyncio.create_task(self._place(cluster, nodes)))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.clients.values()), return_exceptions=True)

    def silence(self, clusters: Sequence[str], at: float) -> None:
        for cluster in clusters:
            self.silent_since.setdefault(cluster, at)

    def _state(self, cluster: str, now: float) -> int:
        """The gossip state of a member of ``cluster`` as a live observer sees it now."""
        since = self.silent_since.get(cluster)
        if since is None or now - since < self.spec.suspect_after_s:
            return PEER_STATES[MemberState.ALIVE]
        return PEER_STATES[MemberState.SUSPECT if now - since < self.spec.dead_after_s else MemberState.DEAD]

    def _peers(self, cluster: str, node: str, now: float) -> list[Wire]:
        """The node's gossip view now; built again only while some view is still changing (a worker's CPU is the
        fleet's: rebuilding 100 peers for every report starved the reports themselves on a busy host)."""
        settled = all(now - since >= self.spec.dead_after_s for since in self.silent_since.values())
        held = self.views.get(node)
        if held is not None and settled and held[0] == len(self.silent_since):
            return held[1]
        peers = [{"node": peer, "cluster": cluster, "state": self._state(cluster, now), "incarnation": 0}
                 for peer in self.spec.clusters[cluster] if peer != node]
        for member in self.spec.wan.get(node, ()):
            peer_cluster, _, peer_node = member.partition("/")
            peers.append({"node": peer_node, "cluster": peer_cluster, "state": self._state(peer_cluster, now), "incarnation": 0})
        self.views[node] = (len(self.silent_since), peers)
        return peers

    def _message(self, cluster: str, node: str, sequence: int, now: float) -> Wire:
        """:func:`edgeagent.reporting.report`'s map for a simulated node."""
        peers = self._peers(cluster, node, now)
        pods = self.usage.get(node, 0)
        capacity = {"cpu_milli": self.spec.cpu_milli, "memory_mib": self.spec.memory_mib, "disk_mib": 0, "gpu_milli": 0}
        allocated = {"cpu_milli": 0, "memory_mib": 0, "disk_mib": 0, "gpu_milli": 0}
        return {"cluster": cluster, "node": node, "agent_id": f"sim-{node}", "sequence": sequence,
                "summary": {"node": node, "arch": "amd64", "ready": True, "pods": pods, "model_version": "", "load": 0.0,
                            "capacity": capacity, "allocated": allocated},
                "peers": peers, "healthy": True, "health_reason": ""}

    async def _report(self, cluster: str, node: str, index: int) -> None:
        channel = self.clients[node].channel
        interval = backoff = 0.2
        await asyncio.sleep(random.uniform(0, 2.0))  # agents do not start in lockstep
        for sequence in itertools.count(1):
            if cluster in self.silent_since:
                return  # the node went dark: a dead agent says nothing
            try:
                ack = await channel.call("ReportAgent", self._message(cluster, node, sequence, time.monotonic()), TIMEOUT_S)
            except LinkError:  # as edgeagent.daemon: back off, doubling up to its ceiling
                self.counters.report_errors += 1
                backoff = min(BACKOFF_MAX, backoff * 2)
                await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
                continue
            self.counters.reports += 1
            asked = ack.get("report_interval_ms")
            if isinstance(asked, int) and asked > 0:
                self.counters.intervals_ms.add(asked)
                interval = min(60.0, max(0.1, asked / 1000))  # as edgeagent.daemon honours it
            backoff = interval
            await asyncio.sleep(interval * random.uniform(0.9, 1.1))

    def census(self) -> dict[str, dict[str, int]]:
        """Per cluster whose watch is up: workload -> ready replicas."""
        out: dict[str, dict[str, int]] = {}
        for cluster, pods in self.pods.items():
            ready = out.setdefault(cluster, {})
            for workload, up in pods.values():
                ready[workload] = ready.get(workload, 0) + up
        return out

    async def _place(self, cluster: str, nodes: list[str]) -> None:
        """The cluster's pending pods, bound round-robin by its agents (each on its own node, over its own link); every
        pod's state kept for the census. The watch is the agents' own call (``WatchPods``), read as its wire maps."""
        watcher = PlaneClient(self.spec.link, cluster, TIMEOUT_S, token=self.spec.tokens[cluster])
        self.clients[f"{cluster}/watch"] = watcher
        turn = itertools.count()
        inflight: set[asyncio.Task[None]] = set()
        while cluster not in self.silent_since:
            pods: dict[str, tuple[str, bool]] = {}
            try:
                async for event in watcher.channel.watch("WatchPods", {"cluster": cluster}):
                    if cluster in self.silent_since:
                        break
                    self.pods[cluster] = pods  # the listing is in: the census may count this cluster
                    pod = event["pod"]
                    if event["type"] == EVENT_DELETED:
                        pods.pop(pod["name"], None)
                        continue
                    pods[pod["name"]] = (pod["workload"], bool(pod["ready"]))
                    if pod["phase"] == POD_PENDING and not pod["node"]:
                        task = asyncio.create_task(self._bind(cluster, nodes, next(turn), pod["name"], pod["epoch"]))
                        inflight.add(task)
                        task.add_done_callback(inflight.discard)
            except LinkError:
                self.counters.watch_restarts += 1
            self.pods.pop(cluster, None)  # no watch, no word on its pods
            if cluster not in self.silent_since:
                await asyncio.sleep(0.5)

    async def _bind(self, cluster: str, nodes: list[str], turn: int, pod: str, epoch: int) -> None:
        async with self.binding:
            k = 0
            while k < len(nodes):
                if cluster in self.silent_since:
                    return
                node = nodes[(turn + k) % len(nodes)]
                try:
                    result = await self.clients[node].bind(pod, node, epoch)
                except ClusterUnavailable:  # no answer in time (a busy plane): the same bind again, as an agent retries
                    self.counters.bind_errors += 1
                    await asyncio.sleep(BIND_RETRY_S)
                    continue
                k += 1
                if result.ok:
                    self.counters.binds += 1
                    self.usage[node] = self.usage.get(node, 0) + 1
                    return
                self.counters.bind_refused += 1
                if result.outcome.name != "REJECTED":
                    return  # bound elsewhere, or a newer epoch: nothing to place


async def _serve() -> None:
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    fleet = Fleet(FleetSpec.from_json((await reader.readline()).decode()))
    fleet.start()
    while line := await reader.readline():
        command: dict[str, Any] = json.loads(line)
        if "silence" in command:
            fleet.silence(command["silence"], float(command.get("at", time.monotonic())))
        if command.get("census"):
            print(json.dumps(fleet.census()), flush=True)
        if command.get("stop"):
            break
    await fleet.stop()
    c = fleet.counters
    print(json.dumps({"reports": c.reports, "report_errors": c.report_errors, "binds": c.binds, "bind_refused": c.bind_refused,
                      "bind_errors": c.bind_errors, "watch_restarts": c.watch_restarts,
                      "intervals_ms": sorted(c.intervals_ms)}), flush=True)


def main() -> None:
    asyncio.run(_serve())


if __name__ == "__main__":
    main()
