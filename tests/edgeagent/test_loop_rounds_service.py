"""The rounds service end to end (opt-in: FEDPLANE_LOOP_SLOW=1, minutes): ``fedplane federated rounds start`` beside
real agents on the network transport, the regions' trainers joining its SuperLink as their own processes, rounds
deciding through the plane's models directory, a second run going on from the first's model, ``status`` following
them and ``stop`` ending the service."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FEDPLANE_LOOP_SLOW") != "1", reason="opt-in: set FEDPLANE_LOOP_SLOW=1 (minutes of real processes)"),
]


def test_the_rounds_service_runs_rounds_for_the_plane_and_stops(traces: Path, tmp_path: Path) -> None:
    from federated.flower import loopconfig, supervisor
    from federated.flower.roundcommands import rounds
    from federated.flower.shelf import ModelShelf
    from fedplane.lab.loop.learning import LoopFleet, LoopSettings

    service = tmp_path / "rounds"
    runner = CliRunner()

    async def scenario() -> dict[str, object]:
        fleet = LoopFleet(LoopSettings(regions=2, agents_per_region=2, traces=str(traces), transport="network"), tmp_path / "fleet")
        await fleet.start()
        trainers: list[int] = []
        try:
            fleet_file = loopconfig.write_fleet(tmp_path / "fleet.json", fleet.infos)
            started = runner.invoke(rounds, ["start", "--dir", str(service), "--models", str(fleet.shelf_dir), "--fleet", str(fleet_file),
                                             "--traces", str(traces), "--rounds", "2", "--every", "5", "--warmup", "12",
                                             "--min-clients", "2", "--json"])
            assert started.exit_code == 0, started.output
            joined = json.loads(started.output)
            superlink = joined["superlink"]
            assert joined["tls"] is True and sorted(joined["trainer_keys"]) == ["region-0", "region-1"], "secure by default"
            for r in range(2):  # each region's trainer: its own process, joining the service's SuperLink over TLS with its key
                secure = ["--root-certificates", joined["root_certificates"], "--auth-supernode-private-key", joined["trainer_keys"][f"region-{r}"]]
                command = supervisor.supernode_command(superlink, supervisor.free_port(),
                                                       {"partition-id": r, "agents": os.pathsep.join(fleet.region_dirs(r))}, secure)
                trainers.append(supervisor.spawn(command, supervisor.flower_env(tmp_path / f"trainer-{r}"), tmp_path / f"trainer-{r}.log").pid)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                status = json.loads(runner.invoke(rounds, ["status", "--dir", str(service), "--json"]).output)
                if status["phase"] == "idle" and status["run"] == 2:  # the second run went on from the first's model
                    break
                await asyncio.sleep(2)
            stopped = runner.invoke(rounds, ["stop", "--dir", str(service)])
            assert stopped.exit_code == 0, stopped.output
            return {"status": status, "shelf": ModelShelf(fleet.shelf_dir).assignment.current, "models": str(fleet.shelf_dir)}
        finally:
            supervisor.stop_groups(trainers)
            await fleet.stop()

    got = asyncio.run(scenario())
    status = got["status"]
    assert isinstance(status, dict) and status["phase"] == "idle" and status["last_run"] == "finished", status
    assert [r["round"] for r in status["recent_rounds"]] == [1, 2, 1, 2], status
    starts = [json.loads(line) for line in (service / "report.jsonl").read_text().splitlines() if '"event": "start"' in line]
    first_run_version = status["recent_rounds"][1]["model_version"]
    assert starts[0]["cold_start"].startswith("random") and starts[1]["cold_start"] == f"resumed from {first_run_version}", starts
    assert all(r["canary"] in ("promoted", "rolled_back") and r["answered"] >= 1 for r in status["recent_rounds"]), status
    assert max(r["answered"] for r in status["recent_rounds"]) == 2, ("both regions' trainers took part", status)
    assert got["shelf"] == status["recent_rounds"][-1]["model_version"], "the plane's models directory holds the fleet's version"
    after = json.loads(runner.invoke(rounds, ["status", "--dir", str(service), "--json"]).output)
    assert after["alive"] is False and after["phase"] == "stopped"
    events = [json.loads(line)["kind"] for line in (Path(str(got["models"])) / "events.jsonl").read_text().splitlines()]
    assert events[0] == "rounds-start" and events[-1] == "rounds-stop" and events[1:3] == ["rounds-run"] * 2, events
