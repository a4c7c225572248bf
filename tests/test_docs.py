"""The docs' commands against the real CLI: every ``fedplane`` line parses, and the control-plane journey runs.

A renamed option or command breaks a doc silently; here it breaks a test. Lines are read from the ```bash blocks of
docs/*.md (``sudo`` and ``VAR=value`` prefixes dropped).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import click
import pytest

from fedplane.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def commands(page: Path) -> list[list[str]]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and (words[0] == "sudo" or re.match(r"^[A-Z_]+=", words[0])):
                words.pop(0)
            if words[:1] == ["fedplane"]:
                out.append(words[1:])
    return out


ALL = [(page.name, words) for page in sorted(DOCS.glob("*.md")) for words in commands(page)]


def resolve(args: list[str]) -> click.Command:
    """Walk the command tree as click would, parsing every level's options (nothing is invoked)."""
    command: click.Command = main
    while isinstance(command, click.Group):
        ctx = command.make_context(command.name or "fedplane", list(args), resilient_parsing=True)
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args (9 folds it into args)
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*ctx.protected_args, *ctx.args]
        name, found, args = command.resolve_command(ctx, rest)
        assert found is not None, f"no command {name!r}"
        command = found
    command.make_context(command.name or "", list(args))  # options, choices, ranges and types, as a run parses them
    return command


@pytest.mark.parametrize(("page", "words"), ALL, ids=[f"{p}:{' '.join(w)[:60]}" for p, w in ALL])
def test_every_documented_command_parses(page: str, words: list[str]) -> None:
    assert resolve(words) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_the_single_process_journey_runs(tmp_path: Path) -> None:
    """docs/control-plane.md, first section, as written (ports moved to free ones, files into a temporary dir)."""
    steps = commands(DOCS / "control-plane.md")
    serve = next(w for w in steps if w[:2] == ["controlplane", "serve"] and "--twin-clusters" in w)
    port = free_port()
    env = {**os.environ, "FEDPLANE_CREDENTIALS": str(tmp_path / "admin.cred")}
    proc = subprocess.Popen([sys.executable, "-m", "fedplane", *serve, "--port", str(port), "--agent-port", "0", "--metrics-port", "-1",
                             "--ui-port", "-1"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = ["--target", f"127.0.0.1:{port}"]
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "admin.cred").exists() or subprocess.run(
                [sys.executable, "-m", "fedplane", "controlplane", "clusters", *target], cwd=tmp_path, env=env, capture_output=True).returncode:
            assert proc.poll() is None and time.monotonic() < deadline, "the documented serve did not come up"
            time.sleep(0.5)
        client = [w for w in steps if w[:1] == ["controlplane"] and w[1] in ("clusters", "credentials", "submit", "placements", "decisions")]
        assert len(client) >= 6
        for words in client:
            done = subprocess.run([sys.executable, "-m", "fedplane", *words, *target], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, (words, done.stdout[-500:], done.stderr[-500:])
        assert (tmp_path / "viewer.cred").exists() and (tmp_path / "c0-n0.cred").exists()
    finally:
        proc.terminate()
        proc.wait(15)
