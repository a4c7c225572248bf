"""The edge agent's SuperNode supervisor: no torch or flwr on import, restarts with backoff, clean stop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from federated.flower import supervisor
from federated.flower.supervisor import SuperNodeSpec


def test_supervisor_imports_neither_torch_nor_flwr() -> None:
    code = "import sys, federated.flower.supervisor; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flwr')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


@pytest.mark.parametrize(("failures", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (30, 60.0)])
def test_backoff_doubles_up_to_the_cap(failures: int, delay: float) -> None:
    assert supervisor.backoff_s(failures, 1.0, 60.0) == delay


def test_supernode_command_is_offline_and_quoted(tmp_path: Path) -> None:
    spec = SuperNodeSpec("127.0.0.1:9092", tmp_path / "exp dir", tmp_path, partition_id=2, port=9999)
    command = spec.command()
    assert command[0].endswith("flower-supernode") and "--insecure" in command
    assert command[command.index("--node-config") + 1] == f"partition-id=2 agents='{tmp_path / 'exp dir'}'"
    with pytest.raises(ValueError, match="quotes"):
        supervisor.node_config_arg({"data-path": "it's"})
    env = supervisor.flower_env(tmp_path, {"PATH": "/usr/bin"})
    assert env["FLWR_TELEMETRY_ENABLED"] == "0" and env["FLWR_DISABLE_UPDATE_CHECK"] == "1" and env["FLWR_HOME"] == str(tmp_path)


@dataclass(frozen=True)
class ScriptSpec(SuperNodeSpec):
    """A spec whose 'SuperNode' is a small Python script: the supervision is what is under test."""

    script: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


def spec_running(script: str, tmp_path: Path) -> ScriptSpec:
    return ScriptSpec("127.0.0.1:1", tmp_path, tmp_path, backoff_base_s=0.05, backoff_cap_s=0.2, script=script)


def test_a_crashing_supernode_is_restarted_with_backoff(tmp_path: Path) -> None:
    starts = tmp_path / "starts"

    async def scenario() -> int:
        stop = asyncio.Event()
        spec = spec_running(f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)", tmp_path)
        task = asyncio.create_task(supervisor.supervise_supernode(spec, stop))
        while not starts.exists() or len(starts.read_text()) < 4:
            await asyncio.sleep(0.02)
        stop.set()
        return await asyncio.wait_for(task, 10)

    assert asyncio.run(scenario()) >= 3


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = "import subprocess, sys, time, os; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    child += f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); time.sleep(600)"

    async def scenario() -> list[int]:
        stop = asyncio.Event()
        task = asyncio.create_task(supervisor.supervise_supernode(spec_running(child, tmp_path), stop))
        while not pids.exists() or " " not in pids.read_text():
            await asyncio.sleep(0.02)
        stop.set()
        assert await asyncio.wait_for(task, 15) == 0
        return [int(p) for p in pids.read_text().split()]

    leader, grandchild = asyncio.run(scenario())
    assert not supervisor.group_alive(leader)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]
