"""Keeping the agent's resident memory its working set: cold start-up code given back, glibc's heap held in.

:func:`tune_malloc` runs once at start (:func:`edgeagent.daemon.run_agent`);
:func:`drop_cold_code` after each policy model loads.

Giving back the policy runtime's start-up code once a model has loaded:

Creating an onnxruntime session runs code that no decision runs again: every CPU kernel
registers itself, the graph is partitioned and optimised. That touches ~12 MiB of the
library's code pages, which then stay in the agent's resident set for months (measured
in one process: RSS 59.0 MiB after a session and 50 decisions; advising the code away
gave 43.9, and 200 more decisions faulted 5.6 MiB of it back: 49.5).

The advice is ``MADV_DONTNEED`` on the library's read-only, executable mappings. For a
private file mapping that was never written it only unmaps the pages: they stay in the
page cache, and the next instruction that needs one faults it back in from there (a minor
fault, no I/O). It is what the kernel itself does to clean code pages under memory
pressure, done at a moment we know most of them are cold. A mapping holding any anonymous
(copied-on-write) page is skipped: dropping that would lose its contents. ``MADV_PAGEOUT``
would be the gentler advice, but it leaves pages that another process also maps (every
other agent on a host maps the same library) where they are.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("edgeagent.residency")

MADV_DONTNEED = 4
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
"""glibc's mallopt parameter numbers."""
MALLOC_THRESHOLD = 128 * 1024
"""glibc's default trim and mmap thresholds, held fixed (see :func:`tune_malloc`)."""
LIBRARIES = ("onnxruntime_pybind11_state",)
"""Shared objects whose start-up code is dropped: onnxruntime's, the one whose session set-up is that large."""


def code_mappings(smaps: str, libraries: tuple[str, ...] = LIBRARIES) -> list[tuple[int, int]]:
    """(start, end) of the never-written executable mappings of ``libraries`` in a ``/proc/<pid>/smaps`` text."""
    out: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for line in smaps.splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            current = None
            if len(fields) >= 6 and fields[1] == "r-xp" and any(lib in fields[5] for lib in libraries):
                start, _, end = fields[0].partition("-")
                current = (int(start, 16), int(end, 16))
        elif current is not None and fields[:1] == ["Anonymous:"]:
            if fields[1] == "0":
                out.append(current)
            current = None
    return out


def drop_cold_code(libraries: tuple[str, ...] = LIBRARIES) -> int:
    """Advise the start-up code of ``libraries`` out of the resident set; returns the bytes advised (0 off Linux)."""
    try:
        with open("/proc/self/smaps") as f:
            mappings = code_mappings(f.read(), libraries)
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    advised = 0
    for start, end in mappings:
        if madvise(start, end - start, MADV_DONTNEED) == 0:
            advised += end - start
        else:
            log.debug("madvise on %#x-%#x failed: errno %d", start, end, ctypes.get_errno())
    return advised


def tune_malloc(arenas: int = 2) -> None:
    """Keep glibc from holding freed memory the agent no longer uses.

    Two settings, both measured on the 16-agent bench: at most ``arenas`` malloc arenas
    (each thread would otherwise get its own, ~MiBs each), and fixed trim/mmap thresholds.
    By default glibc raises both after a large block is freed, and from then on keeps up
    to twice that at the top of the heap; under load an agent's heap grew by 11 MiB that
    way and never gave it back (1.2 MiB with the thresholds fixed).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(M_ARENA_MAX, arenas)
        mallopt(M_TRIM_THRESHOLD, MALLOC_THRESHOLD)
        mallopt(M_MMAP_THRESHOLD, MALLOC_THRESHOLD)
