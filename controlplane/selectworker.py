"""The shell that runs a cluster's lookahead selection off the reconcile tick: one child process at lowest priority.

The selection replays the workload in the twin (``federated.runtime.lookahead.choose``): CPU-bound
Python, so a thread would hold the GIL against the API and the tick. Each selection runs in a fresh
``python -m controlplane.selectworker`` child (at most one at a time: :class:`controlplane.selecting.Selector`)
that lowers itself to ``nice 19``, reads the job from stdin and writes the choice as JSON to stdout. A
fresh process can be killed on a timeout, returns the twin's memory to the system when done, and keeps
federated's modules out of the plane. Failures of any kind come back as an :class:`Outcome` with an
error: the caller keeps the previous choice.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import time
from typing import Any

from controlplane.selecting import Job, Outcome

ERROR_CHARS = 300
"""A failed child's stderr kept in the outcome (its last line is the reason; the rest is a traceback)."""


async def run(job: Job, timeout_s: float) -> Outcome:
    """Select for ``job`` in a child process; never raises (a failure or a timeout is an outcome with an error)."""
    started = time.monotonic()
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "controlplane.selectworker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        return Outcome(job.cluster, job.key, error=f"cannot start the selection worker: {exc}")
    try:
        out, err = await asyncio.wait_for(child.communicate(pickle.dumps((job.workload, job.fleet))), timeout_s)
    except (TimeoutError, asyncio.CancelledError) as exc:
        child.kill()
        await child.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Outcome(job.cluster, job.key, wall_s=time.monotonic() - started, error=f"timed out after {timeout_s:g} s")
    wall = time.monotonic() - started
    if child.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines() or [f"exit status {child.returncode}"]
        return Outcome(job.cluster, job.key, wall_s=wall, error=lines[-1][:ERROR_CHARS])
    try:
        answer = json.loads(out)
        return Outcome(job.cluster, job.key, str(answer["profile"]), {str(k): float(v) for k, v in answer["means"].items()},
                       wall, float(answer["cpu_s"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return Outcome(job.cluster, job.key, wall_s=wall, error=f"unreadable answer from the selection worker: {exc!r:.200}")


def main() -> None:
    """The child: lowest priority, the job from stdin (pickled by its parent, the plane), the choice to stdout."""
    os.nice(19)
    workload, fleet = pickle.load(sys.stdin.buffer)  # noqa: S301 (our own parent wrote it)
    from federated.runtime.lookahead import choose

    choice = choose(workload, fleet)
    answer: dict[str, Any] = {"profile": choice.profile, "means": dict(choice.means), "seeds": list(choice.seeds),
                              "wall_s": choice.wall_s, "cpu_s": time.process_time()}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
