"""Volumes on a directory host: the twin's persistent volumes, fenced by epoch, snapshotted and restored by copy.

One volume per (cluster, workload): ``<root of cluster>/<workload>/`` holds ``fence`` (the lowest epoch allowed to
write, as text: a fencing token) and ``data/`` (the workload's files; ``data/status.json`` its preserved status fields). The one rule
that keeps a single writer lives here: a writer appends only inside :func:`writing`, which holds a shared lock on
the fence and refuses an epoch below it, and :meth:`DirectoryVolumes.fence` stamps a new epoch under the
exclusive lock. Once ``fence`` returns, no write of an older epoch can start or be half done: every write the old
writer acknowledged is in its files, and every later one is refused. The control plane's hand-off
(:mod:`controlplane.handoffs`) fences the source, checkpoints it and restores the copy at the target; the lab's
key-value service (:mod:`fedplane.lab.drills.kvservice`) writes through :func:`writing`.

A checkpoint is a copy under ``<snapshots>/<id>/`` whose ``manifest.json`` is written last: a checkpoint without
one is incomplete (a crash mid-copy) and is made again. A Kubernetes cluster would do this with a VolumeSnapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.backends import errors

STATUS = "status.json"


class Fenced(Exception):
    """A write by an epoch the volume's fence no longer allows: the writer must stop (another owns the volume)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a hand-off carries: where the copy is, how big, its digest, and the status fields preserved with it."""

    id: str
    source: str
    bytes: int
    sha256: str
    fields: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "bytes": self.bytes, "sha256": self.sha256, "fields": self.fields}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Checkpoint:
        return cls(str(d["id"]), str(d["source"]), int(d["bytes"]), str(d["sha256"]), dict(d.get("fields", {})))


def stamped(volume: Path) -> int:
    """The lowest epoch the volume's fence allows (0: never fenced, anyone may write)."""
    try:
        return int((volume / "fence").read_text().strip() or 0)
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def writing(volume: Path, epoch: int) -> Iterator[Path]:
    """Hold the fence shared while one write happens; raises :class:`Fenced` when ``epoch`` is below the fence."""
    volume.mkdir(parents=True, exist_ok=True)
    with open(volume / "fence.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        now = stamped(volume)
        if epoch < now:
            raise Fenced(f"volume {volume} is fenced at epoch {now}: epoch {epoch} may no longer write")
        yield volume / "data"


class DirectoryVolumes:
    """Every cluster's volumes on a local directory (the twin's volume host); the control plane's ``Volumes``."""

    def __init__(self, roots: Mapping[str, Path], snapshots: Path) -> None:
        self.roots, self.snapshots = dict(roots), snapshots

    def volume(self, cluster: str, workload: str) -> Path:
        root = self.roots.get(cluster)
        if root is None:
            raise errors.PermanentError(cluster, "no volume host for this cluster")
        return root / workload

    def fence(self, cluster: str, workload: str, epoch: int) -> int:
        """Allow only ``epoch`` and later to write from now on; returns the fence before. Idempotent."""
        volume = self.volume(cluster, workload)
        volume.mkdir(parents=True, exist_ok=True)
        with open(volume / "fence.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # waits for every write in progress
            before = stamped(volume)
            _write(volume / "fence", str(epoch))
            return before

    def checkpoint(self, cluster: str, workload: str, cid: str) -> Checkpoint:
        """Copy the (fenced) volume's data to a snapshot; an existing complete snapshot of this id is returned as is."""
        snap = self.snapshots / cid
        manifest = snap / "manifest.json"
        if manifest.exists():
            return Checkpoint.from_dict(json.loads(manifest.read_text()))
        shutil.rmtree(snap, ignore_errors=True)
        data = self.volume(cluster, workload) / "data"
        data.mkdir(parents=True, exist_ok=True)
        shutil.copytree(data, snap / "data")
        size, digest = _digest(snap / "data")
        status = snap / "data" / STATUS
        fields = json.loads(status.read_text()) if status.exists() else {}
        cp = Checkpoint(cid, cluster, size, digest, fields)
        _write(manifest, json.dumps(cp.to_dict()))
        return cp

    def restore(self, cluster: str, workload: str, cp: Checkpoint, epoch: int) -> None:
        """Make the target's volume the checkpoint's copy, fenced at ``epoch`` (the target's writers' epoch). Idempotent
        until the target writes: a volume already fenced at ``epoch`` with this checkpoint restored is left alone."""
        volume = self.volume(cluster, workload)
        marker = volume / "restored"
        if stamped(volume) == epoch and marker.exists() and marker.read_text() == cp.id:
            return
        snap = self.snapshots / cp.id / "data"
        if _digest(snap)[1] != cp.sha256:
            raise errors.PermanentError(cluster, f"checkpoint {cp.id} does not match its digest: refusing to restore it")
        self.fence(cluster, workload, epoch)
        shutil.rmtree(volume / "data", ignore_errors=True)
        shutil.copytree(snap, volume / "data")
        _write(marker, cp.id)

    def drop(self, cluster: str, workload: str) -> None:
        """Remove a volume its workload left (the source after a hand-off)."""
        shutil.rmtree(self.volume(cluster, workload), ignore_errors=True)

    def forget(self, cid: str) -> None:
        shutil.rmtree(self.snapshots / cid, ignore_errors=True)


def _write(path: Path, text: str) -> None:
    """Replace a small file atomically and durably."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _digest(root: Path) -> tuple[int, str]:
    """Total bytes and one sha256 over every file (path and content, in name order)."""
    h, size = hashlib.sha256(), 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
    return size, h.hexdigest()
