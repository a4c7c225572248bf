"""Agents report themselves: real agent daemons send ReportAgent over the control plane's twin link, the
control plane lists each cluster's nodes and agents with their state, and a cut-off cluster's agents
read silent there and unhealthy on their own /healthz."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from controlplane import server
from controlplane.auth import INSECURE
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.verdicts import Timings
from edgeagent import config
from edgeagent.daemon import Agent
from fedapi import controlplane_pb2 as cp
from fedcore.backends.twin import Binder
from fedcore.loopback import free_ports
from fedplane.cli import main

from cp_agentfleet import served_with_agents

pytestmark = pytest.mark.integration
FAST = Timings(probe_interval_s=0.1, report_interval_s=0.2, fresh_s=1.0, probe_failures=3)


def healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_agents_report_themselves_and_the_control_plane_lists_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_with_agents(tmp_path, ClusterSpec("c0", "r0", twin_nodes=3), FAST) as fleet:
            plane, names, stub = fleet.plane, fleet.names, fleet.stub

            async def listing() -> cp.ClusterAgents:
                found = await stub.ListAgents(cp.ListAgentsRequest(cluster="c0"))
                return found.clusters[0]

            async def all_reporting() -> bool:
                c = await listing()
                return len(c.agents) == 3 and all(a.state == "reporting" and a.peers_alive == 2 for a in c.agents)

            await until(all_reporting, 20, "three agents reporting with both peers alive")
            c = await listing()
            assert [n.name for n in c.nodes] == names and all(n.ready and n.agent_id for n in c.nodes)
            assert {a.model_version for a in c.agents} == {"heuristic"} and all(a.healthy for a in c.agents)
            assert c.health == cp.HEALTH_HEALTHY

            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "agents", "--target", fleet.target, "--json"])
            assert out.exit_code == 0, out.output
            assert sorted(a["node"] for a in json.loads(out.stdout)["clusters"][0]["agents"]) == names
            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "agents", "--target", fleet.target, "--nodes"])
            assert out.exit_code == 0 and all(n in out.output for n in names)
            out = await asyncio.to_thread(CliRunner().invoke, main, ["controlplane", "agents", "--target", fleet.target, "--cluster", "nope"])
            assert out.exit_code != 0 and "nope" in out.output and "Traceback" not in out.output

            plane.backends.twins()["c0"].partition()  # its agents' path to us is cut: reports refused, watch down

            async def silent() -> bool:
                return all(a.state == "silent" for a in (await listing()).agents)

            await until(silent, 10, "the cut-off agents to read silent")
            health = [await asyncio.to_thread(healthz, a.http_port) for a in fleet.agents]
            assert all(code == 503 and "cut off from the back end" in body for code, body in health), health

            plane.backends.twins()["c0"].heal()
            await until(all_reporting, 20, "the agents to report again after the heal")
            health = [await asyncio.to_thread(healthz, a.http_port) for a in fleet.agents]
            assert all(code == 200 for code, _ in health), health

    asyncio.run(scenario())


def test_with_mtls_on_agents_report_over_tls_and_an_agent_without_a_certificate_is_refused(tmp_path: Path) -> None:
    from cp_certs import make_pki

    from fedapi.tls import TlsFiles

    pki = make_pki(tmp_path)
    (port,) = free_ports(1)

    async def scenario() -> None:
        plane = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic, 0.1, Binder.EXTERNAL), time.monotonic, FAST)
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=1))
        running = await server.start(plane, tls=TlsFiles(pki["server_cert"], pki["server_key"], pki["ca"]), auth=INSECURE)

        def settings(tls: dict[str, str]) -> config.AgentConfig:
            return config.parse({
                "node": "c0-n0", "cluster": "c0", "data_dir": str(tmp_path / "a"), "log_level": "warning",
                "gossip": {"bind": f"127.0.0.1:{port}"}, "backend": {"kind": "twin", "timeout": 1.0,
                                                                    "address": f"127.0.0.1:{running.link_port}"},
                "probe": {"kind": "twin"}, "http": {"bind": "127.0.0.1:0"}, "report": {"interval": 0.2}, "tls": tls,
            })

        plain = Agent(settings({}), handle_signals=False)
        task = asyncio.create_task(plain.run())
        await asyncio.sleep(2.0)
        assert plain.placer is None and not plane.evidence.reports, "no certificate: not even its node description"
        plain.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

        good = Agent(settings({"cert": str(pki["client_cert"]), "key": str(pki["client_key"]), "ca": str(pki["ca"])}),
                     handle_signals=False)
        task = asyncio.create_task(good.run())
        try:
            async def reported() -> bool:
                return bool(plane.evidence.agents("c0", time.monotonic()))

            await until(reported, 15, "a report over mutual TLS")
            assert plane.evidence.agents("c0", time.monotonic())[0].report.agent_id == good.agent_id
        finally:
            good.stop()
            await asyncio.gather(task, return_exceptions=True)
            await running.stop(0)
            plane.close()

    asyncio.run(scenario())


def test_check_names_an_unusable_tls_file(tmp_path: Path) -> None:
    from edgeagent import preflight

    settings = config.parse({"node": "n", "data_dir": str(tmp_path / "d"),
                             "tls": {"cert": str(tmp_path / "missing.crt"), "key": str(tmp_path / "k"), "ca": str(tmp_path / "ca")}})
    problems = preflight.local_problems(settings, ports=False)
    assert any(p.startswith("tls: ") and "missing.crt" in p for p in problems), problems
    with pytest.raises(config.ConfigError, match="tls.key"):
        config.parse({"tls": {"cert": "a.crt"}})
