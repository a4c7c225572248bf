"""What a start would touch is checked first: an unknown node ends the agent with its name, not a retry loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeagent import preflight
from edgeagent.config import parse
from fedplane.lab.doubles.memcluster import InMemoryCluster
from fedplane.lab.doubles.linkharness import TwinHarness
from fedcore.nodes import Node
from tests.test_hostile_commands import fedplane, refused


@pytest.fixture
def twin() -> Iterator[str]:
    """A twin link serving cluster c0 with the one node ``edge-x``, on its own loop in a thread."""
    loop = asyncio.new_event_loop()
    harness = TwinHarness(InMemoryCluster([Node("edge-x", 8000, 16384)]))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    address = asyncio.run_coroutine_threadsafe(harness.start(), loop).result(10)
    yield address
    asyncio.run_coroutine_threadsafe(harness.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _config(tmp_path: Path, node: str, address: str) -> Path:
    path = tmp_path / f"{node}.yaml"
    path.write_text(f"node: {node}\ncluster: c0\ndata_dir: {tmp_path / 'data'}\n"
                    f'gossip: {{bind: "127.0.0.1:0"}}\nhttp: {{bind: ""}}\nbackend: {{address: "{address}"}}\n')
    return path


def test_check_names_a_node_the_back_end_does_not_know(tmp_path: Path, twin: str) -> None:
    refused(fedplane("agent", "--config", str(_config(tmp_path, "n0", twin)), "--check"), "node", "'n0'")


def test_check_says_the_back_end_knows_the_node(tmp_path: Path, twin: str) -> None:
    result = fedplane("agent", "--config", str(_config(tmp_path, "edge-x", twin)), "--check")
    assert result.returncode == 0, result.stderr
    assert "knows node edge-x" in result.stdout


def test_an_agent_whose_node_is_unknown_stops_instead_of_retrying(tmp_path: Path, twin: str) -> None:
    refused(fedplane("agent", "--config", str(_config(tmp_path, "n0", twin)), timeout=60), "'n0'", "c0")


@pytest.mark.parametrize("make, named", [
    (lambda p: p / "file", "exists and is not a directory"),
    (lambda p: p / "file" / "below", "is not a directory"),
])
def test_data_dir_problems_name_the_path(tmp_path: Path, make: object, named: str) -> None:
    (tmp_path / "file").touch()
    path = make(tmp_path)  # type: ignore[operator]
    problem = preflight.data_dir_problem(path)
    assert problem is not None and named in problem and str(path) in problem


def test_a_missing_data_dir_under_a_writable_parent_is_fine(tmp_path: Path) -> None:
    assert preflight.data_dir_problem(tmp_path / "a" / "b") is None


def test_a_taken_gossip_port_is_named(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        config = parse({"data_dir": str(tmp_path), "gossip": {"bind": f"127.0.0.1:{port}"}, "http": {"bind": ""}})
        problems = preflight.port_problems(config)
    assert len(problems) == 1 and problems[0].startswith("gossip.bind:") and "UDP" in problems[0]
