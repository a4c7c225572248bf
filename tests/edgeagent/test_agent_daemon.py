"""Real daemons in one event loop: gossip over loopback UDP, the twin cluster API over the twin link, a restart."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fedapi import agentlink
from fedcore.loopback import free_ports
from fedcore.nodes import Node
from fedcore.pods import Pod

from edgeagent import config
from edgeagent import linkcodec
from edgeagent.clusters import Phase
from edgeagent.daemon import Agent
from edgeagent.savedstate import NODE_FILE
from fedcore.framelog import FrameLog
from fedplane.lab.doubles.memcluster import InMemoryCluster
from fedplane.lab.doubles.linkharness import TwinHarness

pytestmark = pytest.mark.integration


async def until(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(("journal_max_mib", "snapshots_fail"), [(4.0, False), (0.0005, False), (0.0005, True)],
                         ids=["journal", "snapshots", "failing-snapshots"])
def test_three_agents_place_restart_and_keep_their_pods(
    tmp_path: Path, journal_max_mib: float, snapshots_fail: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a tiny ``journal_max_mib`` the journal is rewritten as a snapshot at nearly every commit; when that
    rewrite fails (a full disk), the operations are appended as before and nothing is lost."""
    if snapshots_fail:
        def refuse(self: FrameLog, payloads: list[object]) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(FrameLog, "replace", refuse)
    names = ["a0", "a1", "a2"]
    cluster = InMemoryCluster([Node(n, 8000, 16384, gpus=1) for n in names])
    ports = dict(zip(names, free_ports(len(names)), strict=True))  # free for TCP too, outside the ephemeral range

    def settings(name: str, address: str) -> config.AgentConfig:
        return config.parse({
            "node": name, "data_dir": str(tmp_path / name), "log_level": "warning",
            "gossip": {"bind": f"127.0.0.1:{ports[name]}", "seeds": [f"127.0.0.1:{ports[n]}" for n in names if n != name]},
            "backend": {"kind": "twin", "address": address},
            "probe": {"kind": "twin"}, "http": {"bind": "127.0.0.1:0"}, "journal_max_mib": journal_max_mib,
        })

    def running() -> dict[str, str]:
        return {u: cluster.bound_node(u) for u, p in cluster.pods.items() if p.phase is Phase.RUNNING}

    async def scenario() -> None:
        harness = TwinHarness(cluster)
        address = await harness.start()
        agents = {n: Agent(settings(n, address), handle_signals=False) for n in names}
        tasks = {n: asyncio.create_task(a.run()) for n, a in agents.items()}
        await until(lambda: all(a.http_port and len(a.gossip_.members()) == 3 for a in agents.values()), 15, "gossip join")
        for i in range(12):
            cluster.submit(Pod(f"p{i}", 1000, 1024))
        # the cluster binds before the agent reads its answer off the twin link: wait for both
        await until(lambda: len(running()) == 12 and sum(len(a.placer_.running) for a in agents.values()) == 12, 20,
                    "12 pods placed and every bind answered")

        held = dict(agents["a1"].placer_.running)
        agents["a1"].stop()
        await tasks["a1"]
        agents["a1"] = Agent(settings("a1", address), handle_signals=False)
        tasks["a1"] = asyncio.create_task(agents["a1"].run())
        await until(lambda: agents["a1"].placer is not None and agents["a1"].http_port, 15, "restart")
        assert agents["a1"].placer_.running == held, "bindings came back from the journal"

        port = agents["a0"].http_port
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read())
        assert b"fedplane_agent_binds_total" in body and b"process_resident_memory_bytes" in body
        health = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        assert health == b"ok\n"
        pods = await asyncio.to_thread(lambda: json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/pods").read()))
        assert pods == {u: e for u, e in agents["a0"].placer_.running.items()}

        for i in range(12, 18):
            cluster.submit(Pod(f"p{i}", 1000, 1024))
        await until(lambda: len(running()) == 18 and sum(len(a.placer_.running) for a in agents.values()) == 18, 20,
                    "6 more pods placed after the restart and every bind answered")
        for uid, node in running().items():
            assert [n for n, a in agents.items() if uid in a.placer_.running] == [node]
        assert cluster.evidence.capacity_refusals == 0
        for name in names:
            agents[name].stop()
        await asyncio.gather(*tasks.values())
        await harness.stop()

    asyncio.run(scenario())
    journal = tmp_path / "a1" / "claims.journal"
    assert journal.stat().st_size > 0
    first = next(FrameLog(journal).read())
    assert (first[0][0] == "restore") is (journal_max_mib < 1 and not snapshots_fail), "rewritten as a snapshot"
    # heuristic agents record no experience (their scores have no model inputs to learn from)
    assert sorted(p.name for p in (tmp_path / "a0").iterdir()) == ["claims.journal", "node.msgpack"]


def test_offline_start_uses_the_saved_node_description_and_refuses_a_corrupt_one(tmp_path: Path) -> None:
    """The cluster is unreachable: a readable node.msgpack lets the agent start offline; garbage is logged, not trusted."""
    dead, gossip_port = free_ports(2)  # nothing listens on dead

    def settings(data: Path) -> config.AgentConfig:
        return config.parse({
            "node": "a0", "data_dir": str(data), "log_level": "warning",
            "gossip": {"bind": f"127.0.0.1:{gossip_port}"}, "backend": {"kind": "twin", "address": f"127.0.0.1:{dead}"},
            "probe": {"kind": "twin"}, "http": {"bind": "127.0.0.1:0"},
        })

    health: list[tuple[int, bytes]] = []

    def healthz(port: int) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    async def scenario(data: Path, saved: bytes) -> tuple[Agent, bool]:
        data.mkdir()
        (data / NODE_FILE).write_bytes(saved)
        agent = Agent(settings(data), handle_signals=False)
        task = asyncio.create_task(agent.run())
        await asyncio.sleep(1.5)
        alive = not task.done()  # a crash would end the task: the agent must still be up (running or retrying)
        if agent.http_port:
            health.append(await asyncio.to_thread(healthz, agent.http_port))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return agent, alive

    node = Node("a0", 4000, 8192, gpus=2, gpu_model="T4")
    good, alive = asyncio.run(scenario(tmp_path / "good", agentlink.encode(linkcodec.node_to_wire(node))))
    assert alive and good.placer is not None and good.placer.node == node
    (status, body), = health
    assert status == 503 and b"cut off from the back end" in body, "running offline is not healthy"
    corrupt, alive = asyncio.run(scenario(tmp_path / "corrupt", b"\xc1 not msgpack"))
    assert alive and corrupt.placer is None  # still waiting for the cluster, not running on a made-up node
    assert (tmp_path / "corrupt" / NODE_FILE).read_bytes() == b"\xc1 not msgpack"  # nothing overwritten or lost
