"""The plane process of ``bench scale``: ``fedplane controlplane serve`` itself, with the lab's fault switch beside it.

A serving plane runs no drills and takes no faults over its API, so the bench starts the serve command through
this module (``python -m fedplane.lab.benches.scaleplane <serve options>``): the same command, options and code
path, plus one thread that waits for the bench's fault file (:data:`FAULT_ENV`). When it appears, every twin cluster
it names has an outage (:meth:`fedcore.backends.twin.TwinCluster.outage`, as the failover drill's
``cluster-outage`` does: API unreachable, every pod stops), and the time it happened (``time.monotonic``, the same
clock in every process on the host) is written beside it (``<fault file>.done``). With :data:`PROFILE_ENV` set, every
tick runs under ``cProfile`` and the stats are written to that file when the process exits (where a tick's time goes),
the event loop's thread (ingest, binds, watches) to ``<that file>.loop``.
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

from controlplane import runtime
from fedcore.backends.twin import TwinCluster

FAULT_ENV = "FEDPLANE_SCALE_FAULT_FILE"
PROFILE_ENV = "FEDPLANE_SCALE_TICK_PROFILE"
POLL_S = 0.01
_made: list[runtime.Backends] = []


class _RecordingBackends(runtime.Backends):
    """The serve command's back ends, remembered so the fault switch can reach its twins."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        _made.append(self)


def _twins() -> dict[str, TwinCluster]:
    return {name: twin for backends in _made for name, twin in backends.twins().items()}


def _switch(fault: Path) -> None:
    while not fault.exists():
        time.sleep(POLL_S)
    time.sleep(POLL_S)  # the bench writes it whole, then renames: this is only a margin
    names = json.loads(fault.read_text())["outage"]
    twins = _twins()
    for name in names:
        twins[name].outage()
    at = time.monotonic()
    written = fault.with_suffix(".done.tmp")
    written.write_text(json.dumps({"at": at, "clusters": names}))
    written.rename(fault.with_suffix(".done"))  # whole when the bench sees it


def _profile_ticks(out: str) -> None:
    profile = cProfile.Profile()
    tick = runtime.ControlPlane.tick

    def profiled(plane: runtime.ControlPlane, now: float) -> None:
        profile.runcall(tick, plane, now)

    runtime.ControlPlane.tick = profiled  # type: ignore[method-assign]
    atexit.register(profile.dump_stats, out)


def main() -> None:
    from controlplane.commands import controlplane

    fault = os.environ.get(FAULT_ENV)
    if fault:
        threading.Thread(target=_switch, args=(Path(fault),), daemon=True, name="fault-switch").start()
    runtime.Backends = _RecordingBackends  # type: ignore[misc]
    serve = functools.partial(controlplane.main, args=["serve", *sys.argv[1:]], prog_name="fedplane controlplane")
    out = os.environ.get(PROFILE_ENV)
    if not out:
        serve()
        return
    _profile_ticks(out)
    loop = cProfile.Profile()  # the event loop's thread: ingest, binds, watches
    try:
        loop.runcall(serve)
    finally:
        loop.dump_stats(out + ".loop")


if __name__ == "__main__":
    main()
