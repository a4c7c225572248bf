"""The learning loop through the paths a user runs, with real agents, a real SuperLink and SuperNodes (opt-in: minutes).

Set ``FEDPLANE_LOOP_SLOW=1`` to run: ``fedplane federated loop`` end to end, and a loop that loses a SuperNode and
an agent (SIGKILL) in the middle of a round and carries on: later rounds aggregate what the live regions send,
verdicts keep coming, and every live agent confirms the version it runs. Each runs with models and experience copied
on the machine (``files``) and over the agents' link (``network``: signed models fetched, experience shipped to the
plane's inbox the trainers read).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FEDPLANE_LOOP_SLOW") != "1", reason="opt-in: set FEDPLANE_LOOP_SLOW=1 (minutes of real processes)"),
]


TRANSPORTS = pytest.mark.parametrize("transport", ["files", "network"])


@TRANSPORTS
def test_cli_loop_runs_rounds_and_rolls_out(traces: Path, tmp_path: Path, transport: str) -> None:
    from fedplane.cli import main

    result = CliRunner().invoke(main, ["federated", "loop", "--regions", "2", "--agents-per-region", "2", "--rounds", "2",
                                       "--traces", str(traces), "--workdir", str(tmp_path / "w"), "--transport", transport, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["cold_start"].startswith("random") and len(summary["rounds"]) == 2
    assert all(r["canary"] in ("promoted", "rolled_back") for r in summary["rounds"])
    assert all(r["agents_on_version"] == 4 for r in summary["rounds"]), "every agent's /metrics names the fleet's version"
    assert (tmp_path / "w" / "loop" / "registry" / "history.jsonl").is_file()
    if transport == "network":  # what the trainers trained on arrived over the link; every agent pinned the plane's key
        held = sorted((tmp_path / "w" / "plane" / "experience").glob("region-*/*/experience.log"))
        assert len(held) == 4 and all(p.stat().st_size > 0 for p in held)
        assert all((p / "models" / "signer").is_file() for p in (tmp_path / "w" / "agents").iterdir())


@TRANSPORTS
def test_loop_survives_a_supernode_and_an_agent_killed_mid_round(traces: Path, tmp_path: Path, transport: str) -> None:
    from fedplane.lab.loop.learning import LoopFleet, LoopSettings, rounds_of, run_federation
    from federated.flower import engine

    settings = LoopSettings(regions=3, agents_per_region=2, rounds=4, traces=str(traces), deadline_s=25.0, transport=transport)
    engines: list[engine.Engine] = []

    async def scenario() -> list[dict[str, Any]]:
        fleet = LoopFleet(settings, tmp_path)
        await fleet.start()

        def on_line(line: dict[str, Any]) -> None:
            if line.get("round") == 1:  # round 2 is training already: kill region 2's trainer and one agent of region 0
                os.killpg(engines[0].groups["supernode-2"], signal.SIGKILL)
                fleet.kill_agent("r0-edge-1")

        try:
            return await run_federation(fleet, "survive", {"min-clients": 2}, {}, on_line, engines.append)
        finally:
            await fleet.stop()

    lines = asyncio.run(scenario())
    done = rounds_of(lines)
    assert [r["round"] for r in done] == [1, 2, 3, 4], lines
    assert all(1 <= r["answered"] <= 2 for r in done[2:]), ("the live regions carry the rounds after the kill", done)
    assert all(r["canary"] in ("promoted", "rolled_back") for r in done), done
    assert done[-1]["agents_on_version"] == 5, ("the five live agents run the fleet's version", done)
