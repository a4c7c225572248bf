"""Experience over the agents' link: the agent's experience log shipped to the control plane, once, in order.

The log (:mod:`federated.runtime.experience`) is a frame log that rotates at ``experience_max_mib`` keeping one
older file, so what waits on disk while the plane is away is bounded by twice that; the oldest rows go first when
the plane stays away longer. Frames are shipped as they are (each a batch of ``fedplane-experience/1`` rows), a
few at a time, zlib-compressed (stdlib: no new import on the agent), numbered: the agent's frames carry one
sequence for ever, and the plane acknowledges the next number it expects (:mod:`controlplane.experienceinbox`).

Where the agent is, is kept in ``experience.shipped`` in its data directory: the file (its inode, which a rotation's
rename keeps, and its first frame's header, so a reused inode is not mistaken for it), the byte offset in it and the sequence number there, written (by rename)
only after the plane acknowledged. An agent restarted before the acknowledgement sends the same frames again under
the same numbers and the plane, which has them, skips them; a plane restarted keeps its numbers with its rows. So
each row is counted once, whichever side restarts.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import msgpack

from fedapi.agentlink import Wire
from fedcore.framelog import frames_from

log = logging.getLogger("edgeagent.experience")

CURRENT = "experience.log"
OLDER = "experience.1.log"
"""The log's files (as :mod:`federated.runtime.experience` names them; not imported: that module loads numpy's features)."""
CURSOR = "experience.shipped"
BATCH_BYTES = 256 * 1024
"""Log bytes per shipment (before compression)."""

Call = Callable[[str, Wire], Awaitable[Wire]]


@dataclass(frozen=True, slots=True)
class Cursor:
    inode: int = 0
    head: str = ""
    """The file's first 8 bytes (hex): its first frame's length and checksum."""
    offset: int = 0
    seq: int = 0
    """The number of the frame at ``offset``: every frame before it was acknowledged."""


class ExperienceShipper:
    """Ships the log in ``data`` as ``cluster``/``node``; call :meth:`ship` periodically."""

    def __init__(self, call: Call, cluster: str, node: str, data: Path) -> None:
        self.call, self.cluster, self.node, self.data = call, cluster, node, data
        self.cursor = _read_cursor(data / CURSOR)
        self.shipped_bytes = 0
        """Compressed bytes sent (retries included)."""
        self.shipped_frames = 0

    async def ship(self) -> int:
        """Send what the plane has not acknowledged, in batches, until caught up; returns the frames acknowledged.
        Link errors propagate (:class:`fedapi.agentlink.LinkError`): the next call resumes where this one stopped."""
        acknowledged = 0
        while True:
            where = self._where()
            if where is None:
                return acknowledged
            path, identity, offset = where
            frames, end = frames_from(path, offset, BATCH_BYTES)
            if not frames:
                if path.name == OLDER:  # the older file is done: the current one is next
                    current = _identity(self.data / CURRENT)
                    if current is not None:
                        self._advance(Cursor(*current, 0, self.cursor.seq))
                        continue
                return acknowledged
            body = zlib.compress(msgpack.packb(frames, use_bin_type=True), 6)
            ack = await self.call("ShipExperience", {"cluster": self.cluster, "node": self.node, "first_seq": self.cursor.seq,
                                                     "frames": len(frames), "body": body})
            self.shipped_bytes += len(body)
            expected = self.cursor.seq + len(frames)
            if ack.get("next_seq") != expected:
                log.warning("the plane acknowledged experience up to %r, not %d: shipping again from there next time",
                            ack.get("next_seq"), expected)
                return acknowledged
            self._advance(Cursor(*identity, end, expected))
            self.shipped_frames += len(frames)
            acknowledged += len(frames)

    def _where(self) -> tuple[Path, tuple[int, str], int] | None:
        """The file, its identity and the offset to read next; a cursor whose file rotated away starts the oldest one kept."""
        c = self.cursor
        for name in (OLDER, CURRENT):
            found = _identity(self.data / name)
            if found is not None and found[0] == c.inode and (found[1] == c.head or c.offset == 0):
                return self.data / name, found, c.offset
        for name in (OLDER, CURRENT):
            found = _identity(self.data / name)
            if found is not None:
                if c.offset:
                    log.warning("experience not shipped before the log rotated past it is lost (the plane was away too long)")
                self._advance(Cursor(*found, 0, c.seq))
                return self.data / name, found, 0
        return None

    def _advance(self, cursor: Cursor) -> None:
        tmp = self.data / f".{CURSOR}.tmp"
        tmp.write_text(json.dumps(asdict(cursor)))
        os.replace(tmp, self.data / CURSOR)
        self.cursor = cursor


def _identity(path: Path) -> tuple[int, str] | None:
    """(inode, first 8 bytes in hex) of ``path``; None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return os.fstat(f.fileno()).st_ino, f.read(8).hex()
    except OSError:
        return None


def _read_cursor(path: Path) -> Cursor:
    try:
        doc = json.loads(path.read_text())
        return Cursor(int(doc["inode"]), str(doc["head"]), int(doc["offset"]), int(doc["seq"]))
    except FileNotFoundError:
        return Cursor()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s unreadable (%s): shipping the experience log from its oldest file", path, exc)
        return Cursor()
