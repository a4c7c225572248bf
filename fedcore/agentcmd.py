"""How an edge agent process is started: one command line for the bench, the demo's fleets and tests.

The deploy files run the agent the same way (``PYTHONOPTIMIZE=2`` and compiled
``.opt-2.pyc`` files), so what the bench measures is what a board runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

LOSS_ENV = "FEDPLANE_GOSSIP_LOSS"
"""Fault injection for drills and tests: the agent drops this share of its outgoing gossip datagrams
(:mod:`gossip.lossy`; this kernel has no netem). Unset in production."""

PYTHON_FLAGS = ("-OO",)
"""Docstrings (and asserts, which the agent only uses to narrow types) stripped at compile
time: ~2.6 MiB of a running agent's RSS, measured on ``fedplane bench agent`` (idle 70.6 ->
68.0 MiB). Needs the ``.opt-2.pyc`` files in place (:func:`precompile`; the container
image and the systemd install compile them), else every start compiles from source and
keeps the compiler's garbage instead."""


LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)  # the starter died before we asked\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def dies_with_starter(argv: list[str]) -> list[str]:
    """``argv`` behind a launcher that asks the kernel for SIGTERM when this process dies, then execs ``argv``.

    For agents a fleet starts (demo, drills, benches): atexit and the SIGTERM handler stop them on a
    normal exit, Ctrl-C or ``timeout``; this covers SIGKILL (an OOM kill, ``kill -9``), where the
    agents, in sessions of their own, would run on. The request outlives exec, so the agent itself
    imports nothing for it; not a ``preexec_fn``, which forces a plain fork, and gRPC's fork handlers
    in a starter that runs gRPC broke its agents' event engine. Linux only (prctl); elsewhere ``argv``.
    ``ip netns exec`` execs without forking, so it may wrap the result.
    """
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-S", "-c", LAUNCHER, str(os.getpid()), *argv]


def agent_argv(config: Path, check: bool = False) -> list[str]:
    """The command line of one ``fedplane agent`` process with this interpreter."""
    return [sys.executable, *PYTHON_FLAGS, "-m", "fedplane", "agent", "--config", str(config),
            *(["--check"] if check else [])]


def precompile(config: Path, env: Mapping[str, str] | None = None, wrap: Callable[[list[str]], list[str]] = list) -> None:
    """Run ``--check`` once before starting agents, as an install does: it loads everything the agent
    loads, which writes the ``.opt-2.pyc`` files where the install is writable. Raises RuntimeError.

    ``PYTHONDONTWRITEBYTECODE`` is dropped for this one run: writing them is its whole point (an
    install's ``compileall`` ignores that variable too), and without them every agent would
    compile all it imports at each start and keep the compiler's garbage (~0.5 MiB measured)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(wrap(agent_argv(config, check=True)), check=False, env=env, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"agent --check failed: {done.stdout.decode()}{done.stderr.decode()}")
