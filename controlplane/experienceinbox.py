"""Agents' experience, received over their link and held for their region's trainer.

Why the plane receives it (rather than each region's trainer): the agents' link already reaches the plane with
their credentials, mTLS and leader following, a trainer is a Flower SuperNode with no authenticated way in for
agents, agents need not know where trainers run, and a trainer killed mid-round (a fault the loop must ride
out) loses nothing: the rows wait here, bounded, until a trainer reads them (:meth:`ExperienceInbox.rows`).

Per agent (``<directory>/<cluster>/<node>/``) a frame log (:mod:`fedcore.framelog`) holds one frame per frame the
agent shipped, ``{"seq": n, "rows": [...]}``, rotating at ``max_bytes`` keeping one older file, under the agent's
own log's names: :func:`federated.runtime.experience.read` reads such a directory as it reads an agent's, so a
region's trainer is pointed at its agents' directories here (its node config ``agents``) and runs unchanged. The next number
expected is the last frame's plus one, read back from the log itself on first use: a frame and its number are
committed by one append (fsynced before the answer), so neither a restart nor a lost answer counts a row twice.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgpack

from fedcore.framelog import FrameLog, read_frames
from federated.runtime import experience
from federated.runtime.experience import CURRENT, OLDER, Row
MAX_BATCH = 16 * 1024 * 1024
"""The most a shipment may inflate to."""


class ExperienceInbox:
    """See the module's docstring; :meth:`take` is called from the link's event loop (in a thread), :meth:`rows` by the
    rounds."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory, self.max_bytes = directory, max_bytes
        self._logs: dict[tuple[str, str], tuple[FrameLog, int]] = {}
        self._lock = threading.Lock()
        self.received_bytes = 0

    def take(self, cluster: str, node: str, first_seq: int, frames: int, body: bytes) -> int:
        """Keep the frames of a shipment the agent numbered from ``first_seq`` that are new; returns the next number
        expected. Raises ValueError for a shipment that is not one (nothing is kept of it)."""
        for what, name in (("cluster", cluster), ("node", node)):
            if not name or "/" in name or name.startswith(".") or len(name) > 253:
                raise ValueError(f"{what} must be a plain name, not {name[:40]!r}")
        if first_seq < 0 or not 0 < frames <= 100_000:
            raise ValueError(f"first_seq must be >= 0 and frames in 1..100000, got {first_seq} and {frames}")
        batch = _decode(body, frames)
        with self._lock:
            log, expected = self._log(cluster, node)
            new = batch[max(0, expected - first_seq):]  # a frame number below expected: already kept
            start = max(first_seq, expected)  # above it: the agent's log rotated past rows it could not ship (lost)
            for i, frame in enumerate(new):
                log.append({"seq": start + i, "rows": frame})
            if new:
                log.sync()
                if log.size() > self.max_bytes:
                    log.rotate(log.path.with_name(OLDER))
                expected = start + len(new)
            self._logs[(cluster, node)] = (log, max(expected, first_seq + frames))
            self.received_bytes += len(body)
            return self._logs[(cluster, node)][1]

    def rows(self, cluster: str, node: str) -> Iterator[Row]:
        """The rows held for one agent, oldest first."""
        return experience.read(self.directory / cluster / node)

    def agents(self) -> list[tuple[str, str]]:
        """(cluster, node) of every agent with rows held."""
        return sorted((d.parent.name, d.name) for d in self.directory.glob("*/*") if d.is_dir())

    def close(self) -> None:
        with self._lock:
            for log, _ in self._logs.values():
                log.close()
            self._logs.clear()

    def _log(self, cluster: str, node: str) -> tuple[FrameLog, int]:
        found = self._logs.get((cluster, node))
        if found is None:
            log = FrameLog(self.directory / cluster / node / CURRENT)
            last = -1
            for frame in log.read():  # cuts a torn tail: a frame half-written before a crash was never acknowledged
                last = int(frame["seq"])
            if last < 0 and (log.path.with_name(OLDER)).is_file():
                for frame in read_frames(log.path.with_name(OLDER)):
                    last = int(frame["seq"])
            found = (log, last + 1)
            self._logs[(cluster, node)] = found
        return found


def _decode(body: bytes, frames: int) -> list[list[dict[str, object]]]:
    """The frames of a shipment, every row checked (:meth:`Row.decode`); ValueError when it is not ``frames`` of them."""
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(body, MAX_BATCH)
        if inflate.unconsumed_tail:
            raise ValueError(f"a shipment inflates past {MAX_BATCH} bytes")
        batch = msgpack.unpackb(raw, raw=False)
    except (zlib.error, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"not an experience shipment: {exc}") from None
    if not isinstance(batch, list) or len(batch) != frames or not all(isinstance(f, list) for f in batch):
        raise ValueError(f"a shipment of {frames} frames holds {len(batch) if isinstance(batch, list) else 'no'} frame list(s)")
    for frame in batch:
        for raw_row in frame:
            Row.decode(raw_row, "shipped row")
    return batch
