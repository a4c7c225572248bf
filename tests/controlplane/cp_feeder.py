"""TEST FIXTURE — the evidence feeder: stand-in edge agents that report heartbeats and gossip views
over the real gRPC API (``ControlPlane.ReportAgent``) at LAN gossip timings.

Drills run real ``fedplane agent`` processes (:mod:`fedplane.lab.drills.agentfleet`), which report
themselves; this stand-in implements the same :class:`fedplane.lab.drills.failoverdrill.EvidenceSource` so the
control plane's verdicts, planning and migrations can be tested fast, with the twin binding the
pods (``DrillConfig(agents_bind=False)``). Its gossip model is deliberately simple and stated here:
a node whose agent dies is seen ALIVE by its peers for ``suspect_after_s``, then SUSPECT, then
DEAD after ``dead_after_s`` (SWIM with Lifeguard at 200 ms probes is in this range); a cluster
cut off from the control plane keeps gossiping with every other cluster (agents mesh over their
own links), so its peers keep seeing it ALIVE while its own reports no longer arrive. Every view says how long ago its
agent heard from the peer (``heard_ms``, as agents with a federation pool send it): a live peer within the last
report interval, a dead one not since it died.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import grpc

from fedapi import client, controlplane_pb2 as cp, controlplane_pb2_grpc, credentials as creds


EVIDENCE = "in-process feeder (stand-in agents over gRPC; a test fixture)"


class EvidenceFeeder:
    """In-process stand-in agents: one per node, each reporting every ``interval_s``."""

    def __init__(
        self, nodes: Mapping[str, Sequence[str]], clock: Callable[[], float], interval_s: float = 0.2,
        suspect_after_s: float = 0.6, dead_after_s: float = 1.6, credentials: Mapping[str, Path] | None = None,
    ) -> None:
        """``credentials``: per cluster, the agent credential its stand-ins report with (none: a plane that checks none)."""
        self.nodes = {c: list(ns) for c, ns in nodes.items()}
        self.clock, self.interval_s = clock, interval_s
        self.suspect_after_s, self.dead_after_s = suspect_after_s, dead_after_s
        self.died: dict[str, float] = {}
        self.cut: set[str] = set()
        self.ids = {n: uuid.uuid4().hex[:8] for ns in self.nodes.values() for n in ns}
        self.sequence = itertools.count(1)
        self.credentials = dict(credentials or {})
        self._task: asyncio.Task[None] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def start(self, target: str, link: str) -> None:
        for cluster in self.nodes:  # one channel per cluster: each reports with its own cluster's agent credential
            token = creds.token_in(str(self.credentials[cluster])) if cluster in self.credentials else ""
            self._channels[cluster] = client.connect_aio(target, token=token)
        stubs = {c: controlplane_pb2_grpc.ControlPlaneStub(ch) for c, ch in self._channels.items()}  # type: ignore[no-untyped-call]
        self._task = asyncio.create_task(self._run(stubs))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for channel in self._channels.values():
            await channel.close()

    def kill_agents(self, cluster: str) -> None:
        now = self.clock()
        for n in self.nodes[cluster]:
            self.died.setdefault(n, now)

    def cut_off(self, cluster: str) -> None:
        self.cut.add(cluster)

    def heal(self, cluster: str) -> None:
        self.cut.discard(cluster)
        for n in self.nodes[cluster]:
            if self.died.pop(n, None) is not None:
                self.ids[n] = uuid.uuid4().hex[:8]  # a restarted agent is a new process

    def view(self, subject: str, now: float) -> cp.PeerState:
        """How every live agent sees ``subject`` (a PeerState value)."""
        died = self.died.get(subject)
        if died is None or now - died < self.suspect_after_s:
            return cp.PEER_ALIVE
        return cp.PEER_SUSPECT if now - died < self.dead_after_s else cp.PEER_DEAD

    def heard_ms(self, subject: str, now: float) -> int:
        """How long ago every live agent heard from ``subject``: within the last interval, or not since it died."""
        return 1 + round(1000 * (now - self.died.get(subject, now - self.interval_s)))

    def reports(self, now: float) -> list[cp.AgentReport]:
        peers = [
            cp.PeerView(node=n, cluster=c, state=self.view(n, now), incarnation=1, heard_ms=self.heard_ms(n, now))
            for c, ns in self.nodes.items() for n in ns
        ]
        return [
            cp.AgentReport(cluster=c, node=n, agent_id=self.ids[n], sequence=next(self.sequence),
                           summary=cp.NodeSummary(node=n, ready=True), peers=[p for p in peers if p.node != n])
            for c, ns in self.nodes.items() if c not in self.cut for n in ns if n not in self.died
        ]

    async def _run(self, stubs: dict[str, controlplane_pb2_grpc.ControlPlaneStub]) -> None:
        while True:
            batch = self.reports(self.clock())
            # A report that fails (control plane down or restarting) is simply lost, as a real agent's would be.
            await asyncio.gather(*(stubs[r.cluster].ReportAgent(r, timeout=1.0) for r in batch), return_exceptions=True)
            await asyncio.sleep(self.interval_s)
