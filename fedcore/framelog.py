"""Append-only, checksummed frame logs: an edge agent's claims journal and its experience log.

A frame is ``length (4 bytes) | crc32 (4 bytes) | msgpack payload``. Appends are
buffered; :meth:`FrameLog.sync` makes everything appended so far durable. The
daemon group-commits: it appends one frame per batch of operations and runs one
fsync (off the event loop) before any effect of those operations leaves the
process, however many batches that fsync covers. A crash
can only tear the last frame; :meth:`FrameLog.read` stops at the first frame whose
length or checksum is wrong and truncates the file there, so what was committed
is kept exactly and a torn tail is dropped, never misread. :func:`read_frames` is the
read-only form for another process (a trainer reading an agent's experience while the
agent appends): it stops at a torn tail without touching the file.

It lives in fedcore because both sides of the learning loop use it: the agent writes,
federated's trainer reads.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import msgpack

log = logging.getLogger("fedcore.framelog")

_HEADER = 8
MAX_FRAME = 64 * 1024 * 1024


class FrameLog:
    """One append-only file of msgpack frames."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab")
        self.dirty = False
        """Something was appended since the last :meth:`sync`."""

    def append(self, payload: Any) -> None:
        """Buffer one frame; :meth:`flush` hands the buffer to the OS, :meth:`fsync` makes it durable."""
        self._file.write(_frame(payload))
        self.dirty = True

    def flush(self) -> None:
        """Hand buffered frames to the OS (on the event loop: the buffer is not thread-safe)."""
        self.dirty = False
        self._file.flush()

    def fsync(self) -> None:
        """Make what was flushed durable; safe in a worker thread while the loop appends more."""
        os.fsync(self._file.fileno())

    def sync(self) -> None:
        self.flush()
        self.fsync()

    def size(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()  # flushes

    def read(self) -> Iterator[Any]:
        """Every intact frame, in order; a torn or corrupt tail is logged and cut off."""
        with open(self.path, "rb") as f:
            data = f.read()
        end = yield from _frames(data)
        if end < len(data):
            log.warning("%s: dropping a torn or corrupt tail of %d bytes at offset %d", self.path, len(data) - end, end)
            self._file.truncate(end)

    def replace(self, payloads: list[Any]) -> None:
        """Make ``payloads`` the whole file, durably, then keep appending after them.

        Written to a temporary file, fsynced and renamed over the log (and the directory
        fsynced): a crash leaves either the old log or the new one, never a mix.
        """
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            for payload in payloads:
                f.write(_frame(payload))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # on failure the old log stays open and in use
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._file.close()  # the replaced file's buffered frames are covered by the payloads
        self._file = open(self.path, "ab")
        self.dirty = False

    def rotate(self, keep: Path) -> None:
        """Move the current file to ``keep`` (replacing it) and start an empty one; both steps are renames."""
        self._file.close()
        os.replace(self.path, keep)
        self._file = open(self.path, "ab")


def read_frames(path: Path) -> Iterator[Any]:
    """Every intact frame of ``path``, in order, without writing to it: a torn tail (a frame the
    writer is still appending) ends the reading and stays as it is."""
    with open(path, "rb") as f:
        data = f.read()
    yield from _frames(data)


def frames_from(path: Path, offset: int, max_bytes: int) -> tuple[list[Any], int]:
    """The intact frames of ``path`` from byte ``offset`` (a frame boundary), until about ``max_bytes`` are read, and
    the offset after the last one: read-only, frame by frame, for a shipper following a writer (a torn tail ends it)."""
    frames: list[Any] = []
    end = offset
    with open(path, "rb") as f:
        f.seek(offset)
        while end - offset < max_bytes:
            header = f.read(_HEADER)
            size = _size(header)
            body = f.read(size) if size >= 0 else b""
            if not _intact(header, size, body):
                break
            frames.append(msgpack.unpackb(body, raw=False, strict_map_key=False))
            end += _HEADER + size
    return frames, end


def _size(header: bytes) -> int:
    """A frame's body length from its header; -1 when the header is short or the length impossible."""
    size = int.from_bytes(header[:4], "big") if len(header) == _HEADER else -1
    return size if size <= MAX_FRAME else -1


def _intact(header: bytes, size: int, body: bytes) -> bool:
    return size >= 0 and len(body) == size and zlib.crc32(body).to_bytes(4, "big") == header[4:]


def _frames(data: bytes) -> Generator[Any, None, int]:
    """Decode intact frames from the start of ``data``; returns the offset where they stop."""
    offset = 0
    while offset < len(data):
        header = data[offset:offset + _HEADER]
        size = _size(header)
        body = data[offset + _HEADER:offset + _HEADER + size] if size >= 0 else b""
        if not _intact(header, size, body):
            return offset
        yield msgpack.unpackb(body, raw=False, strict_map_key=False)
        offset += _HEADER + size
    return offset


def _frame(payload: Any) -> bytes:
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    return len(data).to_bytes(4, "big") + zlib.crc32(data).to_bytes(4, "big") + data
