"""A served control plane with real agent daemons of one twin cluster: the path a user runs, set up and torn down once.

Tests that need agents reporting over the twin link (``ReportAgent``) start them here rather than each
wiring gossip ports, agent settings, the API channel and the teardown order again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane import server
from controlplane.auth import INSECURE
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.verdicts import Timings
from edgeagent import config
from edgeagent.daemon import Agent
from fedapi import client, controlplane_pb2_grpc
from fedcore.backends.twin import Binder
from fedcore.loopback import free_ports


@dataclass
class AgentFleet:
    plane: ControlPlane
    running: Any
    """The served plane (``controlplane.server.start``'s handle: ``port``, ``link_port``)."""
    stub: controlplane_pb2_grpc.ControlPlaneStub
    names: list[str]
    settings: dict[str, Any]
    tmp_path: Path
    gossip: dict[str, int] = field(default_factory=dict)
    agents: list[Agent] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def target(self) -> str:
        """The API address, for the CLI's ``--target``."""
        return f"127.0.0.1:{self.running.port}"

    def agent(self, name: str) -> Agent:
        """A new agent daemon for node ``name`` (its data directory survives a restart)."""
        return Agent(config.parse({
            "node": name, "cluster": "c0", "data_dir": str(self.tmp_path / name), "log_level": "warning",
            "gossip": {"bind": f"127.0.0.1:{self.gossip[name]}",
                       "seeds": [f"127.0.0.1:{self.gossip[m]}" for m in self.names if m != name], "probe_interval": 0.2},
            "backend": {"kind": "twin", "address": f"127.0.0.1:{self.running.link_port}", "timeout": 1.0},
            "probe": {"kind": "twin"}, "http": {"bind": "127.0.0.1:0"}, "report": {"interval": 0.2}, **self.settings,
        }), handle_signals=False)

    async def restart(self, index: int) -> None:
        """Stop agent ``index`` and start a new daemon on its node and data directory."""
        self.agents[index].stop()
        await self.tasks[index]
        self.agents[index] = self.agent(self.names[index])
        self.tasks[index] = asyncio.create_task(self.agents[index].run())


@asynccontextmanager
async def served_with_agents(tmp_path: Path, spec: ClusterSpec, timings: Timings, settings: dict[str, Any] | None = None,
                             ) -> AsyncIterator[AgentFleet]:
    """Serve a control plane with cluster ``spec`` (named ``c0``) and run one agent per twin node (``c0-n<i>``);
    ``settings`` adds agent configuration keys. Everything is stopped on exit, agents first."""
    plane = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic, 0.1, Binder.EXTERNAL), time.monotonic, timings)
    plane.register_cluster(spec)
    running = await server.start(plane, auth=INSECURE)  # credentials on this path: test_cp_auth
    channel = client.connect_aio(f"127.0.0.1:{running.port}")
    names = [f"c0-n{i}" for i in range(spec.twin_nodes)]
    fleet = AgentFleet(plane, running, controlplane_pb2_grpc.ControlPlaneStub(channel),  # type: ignore[no-untyped-call]
                       names, settings or {}, tmp_path, dict(zip(names, free_ports(len(names)), strict=True)))
    fleet.agents = [fleet.agent(n) for n in names]
    fleet.tasks = [asyncio.create_task(a.run()) for a in fleet.agents]
    try:
        yield fleet
    finally:
        for a in fleet.agents:
            a.stop()
        await asyncio.gather(*fleet.tasks)
        await channel.close()
        await running.stop(0)
        plane.close()
