"""Real processes on loopback, encrypted: join, SIGKILL (dead, reaped), SIGSTOP/SIGCONT (refute)."""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


class Proc:
    """One ``gossip.node_main`` process and what it has printed."""

    def __init__(self, args: list[str]) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "gossip.node_main", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines: queue.Queue[dict[str, object]] = queue.Queue()
        self.members: dict[str, str] = {}
        self.events: list[dict[str, object]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.name = str(self.wait_line(lambda line: line["event"] == "started")["name"])

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = json.loads(raw)
            if line["event"] == "members":
                self.members = line["members"]  # type: ignore[assignment]
            elif line["event"] == "member":
                self.events.append(line)
            self.lines.put(line)

    def wait_line(self, match: Callable[[dict[str, object]], bool], timeout: float = 10.0) -> dict[str, object]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if match(line):
                return line
        raise AssertionError(f"{self.name}: no matching line within {timeout}s")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[Proc]]:
    keys = tmp_path / "keys"
    keys.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    common = ["--key-file", str(keys), "--probe-interval", "0.2", "--pushpull-interval", "2", "--reap-after", "3", "--suspicion-mult", "6", "--report-every", "0.2"]
    started: list[Proc] = []
    try:
        started.append(Proc(["--bind", "127.0.0.1:0", *common]))
        for _ in range(4):
            started.append(Proc(["--bind", "127.0.0.1:0", "--seeds", started[0].name, *common]))
        yield started
    finally:
        for proc in started:
            if proc.popen.poll() is None:
                os.kill(proc.popen.pid, signal.SIGCONT)
                proc.popen.kill()
            proc.popen.wait(timeout=5)


def test_five_processes_join_detect_a_kill_and_survive_a_stop(procs: list[Proc]) -> None:
    names = {p.name for p in procs}
    wait_until(lambda: all(set(p.members) == names and set(p.members.values()) == {"ALIVE"} for p in procs), 15, "join")

    killed, rest = procs[4], procs[:4]
    killed.popen.send_signal(signal.SIGKILL)
    wait_until(lambda: all(any(e["name"] == killed.name and e["state"] == "DEAD" for e in p.events) for p in rest), 15, "death")
    wait_until(lambda: all(killed.name not in p.members for p in rest), 10, "reaping")

    stopped, watchers = procs[3], procs[:3]
    stopped.popen.send_signal(signal.SIGSTOP)
    wait_until(lambda: any(p.members.get(stopped.name) == "SUSPECT" for p in watchers), 10, "suspicion")
    stopped.popen.send_signal(signal.SIGCONT)
    wait_until(lambda: all(p.members.get(stopped.name) == "ALIVE" for p in watchers), 10, "refutation")
    refuted = [e for p in watchers for e in p.events if e["name"] == stopped.name and e["state"] == "ALIVE"]
    assert refuted and max(int(e["incarnation"]) for e in refuted) >= 1, "it came back by raising its incarnation"
    assert not any(e["name"] == stopped.name and e["state"] == "DEAD" for p in watchers for e in p.events)

    procs[0].popen.send_signal(signal.SIGTERM)
    procs[0].wait_line(lambda line: line["event"] == "left")
    wait_until(lambda: all(p.members.get(procs[0].name) == "LEFT" for p in procs[1:3]), 10, "graceful leave")
