"""The learning loop as a service of the plane: the companion process ``fedplane federated rounds start`` launches.

It runs on the plane's host beside ``controlplane serve --models DIR``: a Flower SuperLink that the regions' trainers
join (SuperNodes deployed beside each region, on hosts of their own, pulling their region's experience from the plane's
feed: :mod:`federated.flower.loopclient`), and the loop's rounds (:mod:`federated.flower.loopserver`) on a schedule
(a run of ``rounds`` rounds every ``every_s`` seconds) or once, on demand. Every decision goes through the plane's
models directory: the plane signs what is promoted or canaried, agents fetch it over their link, and the plane logs
each change as a decision (``controlplane decisions``: model-promote, model-canary, model-canary-end), and the
service's own start, each run's end and its stop too (rounds-start, rounds-run, rounds-stop: :func:`shelf.note`). Each run goes
on from the model the registry last promoted (the cold start only the first time).

The SuperLink is secure by default (:mod:`federated.flower.linktls`): TLS with a CA of the service's own, and only the
regions' trainers it knows may join (one key per region of the fleet, registered at each start); ``--insecure`` is the
explicit opt-out.

In the service's directory: ``rounds.json`` (pid, SuperLink address, phase, run, next run), ``report.jsonl`` (the
loop's lines, one per round), ``registry/`` and ``engine/`` (the SuperLink's state and logs; ``engine/tls/``: the CA a
trainer verifies the SuperLink with and each region's trainer key). SIGTERM ends it: the run under way stops and the
SuperLink with it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from federated.flower import appdir, engine, shelf

STATE = "rounds.json"
REPORT = "report.jsonl"
MARK = "federated rounds serve"
"""What the companion's command line holds (``stop`` signals only a process that is one)."""


def read_state(directory: Path) -> dict[str, Any] | None:
    """The service's state as it last wrote it (None: never started here)."""
    try:
        return dict(json.loads((directory / STATE).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise engine.EngineError(f"{directory / STATE}: unreadable ({exc})") from None


def alive(state: Mapping[str, Any]) -> bool:
    """Whether the process ``state`` names still runs and is the rounds service (a recycled pid is not)."""
    try:
        cmdline = Path(f"/proc/{int(state['pid'])}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return MARK in cmdline


def last_rounds(directory: Path, n: int) -> list[dict[str, Any]]:
    """The newest ``n`` round lines of the report (a torn last line is skipped)."""
    try:
        lines = (directory / REPORT).read_text().splitlines()
    except OSError:
        return []
    out = []
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if "round" in line:
            out.append(line)
    return out[-n:]


class Service:
    """The companion's loop; :meth:`serve` returns after one run without ``every_s``, else runs until SIGTERM."""

    def __init__(self, directory: Path, overrides: Mapping[str, str | int | float], rounds: int, every_s: float,
                 host: str, timeout_s: float, warmup_s: float = 0.0, trainers: Sequence[str] = (), secure: bool = True) -> None:
        self.directory, self.overrides, self.rounds, self.every_s = directory, dict(overrides), rounds, every_s
        self.host, self.timeout_s, self.warmup_s = host, timeout_s, warmup_s
        self.trainers, self.secure = list(trainers), secure
        self.state: dict[str, Any] = {"pid": os.getpid(), "started_at": time.time(), "phase": "starting", "run": 0,
                                      "rounds_per_run": rounds, "every_s": every_s}

    def write(self, **changes: Any) -> None:
        self.state.update(changes)
        tmp = self.directory / f".{STATE}.tmp"
        tmp.write_text(json.dumps(self.state, indent=1) + "\n")
        os.replace(tmp, self.directory / STATE)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, _raise_exit)
        eng = engine.start(self.directory / "engine", [], {"service": "rounds"}, host=self.host, secure=self.secure)
        try:
            for name in self.trainers if eng.security else ():
                eng.register(name)
            self.write(phase="waiting", superlink=eng.address, **self.channel(eng))
            self.note("rounds-start", eng.address, f"SuperLink at {eng.address} "
                      f"({'TLS, trainers ' + ', '.join(self.trainers) if eng.security else 'WITHOUT TLS, any trainer'}); "
                      f"{self.rounds} rounds a run, " + (f"every {self.every_s:g} s" if self.every_s > 0 else "one run"))
            while True:
                run = int(self.state["run"]) + 1
                self.write(phase="running", run=run, run_started_at=time.time())
                outcome = self.run_once(eng, run)
                self.note("rounds-run", f"run-{run}", run_summary(run, outcome, last_rounds(self.directory, self.rounds)))
                if self.every_s <= 0:
                    self.write(phase="done", last_run=outcome)
                    return
                self.write(phase="idle", last_run=outcome, next_run_at=time.time() + self.every_s)
                time.sleep(self.every_s)
        finally:
            eng.stop()
            if self.state.get("phase") != "done":
                self.write(phase="stopped", stopped_at=time.time())
            self.note("rounds-stop", eng.address, f"after {self.state['run']} run(s): {self.state['phase']}")

    def note(self, kind: str, subject: str, why: str) -> None:
        """An event of the service, for the plane to log as a decision (through its models directory)."""
        try:
            shelf.note(Path(str(self.overrides["shelf-dir"])), kind, subject, why)
        except OSError as exc:  # the rounds go on; the plane's log misses one line
            print(f"cannot note {kind} in the models directory: {exc}", flush=True)

    def channel(self, eng: engine.Engine) -> dict[str, Any]:
        """What a trainer needs to join: the CA that verifies the SuperLink and its region's key (none: insecure)."""
        if eng.security is None:
            return {"tls": False}
        return {"tls": True, "root_certificates": str(eng.security.ca),
                "trainer_keys": {name: str(eng.security.node_key(name)) for name in self.trainers}}

    def run_once(self, eng: engine.Engine, run: int) -> str:
        registry = self.directory / "registry"
        first = not (registry / "history.jsonl").is_file()  # the cold start: the fleet places with it a while first
        config = {**self.overrides, "run-tag": f"run-{run}", "num-rounds": self.rounds, "resume": 1, "warmup-s": self.warmup_s if first else 0.0,
                  "registry-dir": str(registry), "report-file": str(self.directory / REPORT)}
        try:
            eng.run(config, self.timeout_s, f"run-{run}", appdir.LOOP)
        except engine.EngineError as exc:
            return f"failed: {exc}"
        return "finished"


def run_summary(run: int, outcome: str, rounds: list[dict[str, Any]]) -> str:
    """One line for a run's end: its outcome, its rounds' verdicts and the model the fleet is on after it."""
    verdicts = ", ".join(f"round {line['round']} {line.get('canary') or '-'}" for line in rounds) or "no round reported"
    fleet = rounds[-1].get("model_version") if rounds else None
    return f"run {run} {outcome}: {verdicts}; fleet on {fleet or '-'}"


def _raise_exit(signum: int, frame: object) -> None:
    """SIGTERM unwinds the service like Ctrl-C: the run under way is ended and the SuperLink stopped (``finally``)."""
    raise SystemExit(0)
