"""The models the plane hands its agents: signed bundles by version, and which one each agent should run.

The rounds (:mod:`federated.flower.loopserver`) decide; the shelf carries the decision to the fleet. :meth:`promote`
makes a registry version every agent's current model, :meth:`start_canary` puts one on trial on some agents for
a share of their decisions, :meth:`end_canary` ends the trial. Each version is packed and signed once, when it is
first promoted or canaried (:mod:`federated.runtime.modelbundles`); agents ask over their link what they should
run (:meth:`offer`, a few hundred bytes) and download a bundle (:meth:`chunk`) only for a version they lack.

On disk, in the plane's models directory: ``signing.key`` (the Ed25519 seed, 0600, created on first start: its
public key is what agents pin), ``bundles/<version>.bundle`` with ``<version>.json`` (its signature), and
``shelf.json`` (the assignment), each written by rename, so a restarted plane offers what it offered before. The
plane re-reads ``shelf.json`` when it changes: the process that runs the rounds, or an operator
(``fedplane controlplane models``), decides on the same host through the same directory. ``events.jsonl``: what the
rounds service did besides deciding models (started, a run ended, stopped: :func:`note`), one line each, appended; the
plane reads the lines added since it started at the same looks and records each as a decision too.
A replicated plane's members each keep their own directory: a promotion reaches the agents of the member that
made it (the agents' link follows the leader).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from federated.runtime import modelbundles
from federated.runtime.modelbundles import Signed

log = logging.getLogger(__name__)

KEY = "signing.key"
STATE = "shelf.json"
EVENTS = "events.jsonl"
BUNDLES = "bundles"
SEED_BYTES = 32


@dataclass(frozen=True, slots=True)
class Assignment:
    """Who runs what: every agent ``current``; the agents in ``nodes`` (``cluster/node``; empty: every agent) also
    ``canary`` for ``weight`` of their decisions."""

    current: str = ""
    canary: str = ""
    weight: float = 0.0
    nodes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Offer:
    current: Signed | None
    canary: Signed | None
    weight: float


Note = Callable[[str, str, str], None]
"""Told (kind, subject, why) once per line another process appended to ``events.jsonl`` (:func:`note`)."""
Change = Callable[["Assignment", "Assignment"], None]
"""Told (old, new) once per change of the assignment the plane sees, whichever process made it (the plane's decisions
log); changes another process makes between two of the plane's looks are seen as one."""


def node_key(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


def changes(old: Assignment, new: Assignment) -> list[tuple[str, str, str]]:
    """(kind, version, why) of each decision between two assignments, as the decisions log words them."""
    found: list[tuple[str, str, str]] = []
    if new.current != old.current:
        found.append(("model-promote", new.current, f"every agent runs {new.current} (was {old.current or 'none'})"))
    if old.canary and new.canary != old.canary:
        promoted = new.current == old.canary
        found.append(("model-canary-end", old.canary, f"trial of {old.canary} ended: {'promoted' if promoted else 'rolled back'}"))
    if new.canary and (new.canary, new.weight, new.nodes) != (old.canary, old.weight, old.nodes):
        on = ", ".join(new.nodes) or "every agent"
        found.append(("model-canary", new.canary, f"{new.canary} on trial for {new.weight:.0%} of the decisions of {on}"))
    return found


class ModelShelf:
    """See the module's docstring; safe to call from the link's event loop and the rounds' thread at once."""

    def __init__(self, directory: Path, on_change: Change | None = None, on_note: Note | None = None) -> None:
        self.directory, self.on_change, self.on_note = directory, on_change, on_note
        (directory / BUNDLES).mkdir(parents=True, exist_ok=True)
        self._seed = _seed(directory / KEY)
        self.signer = modelbundles.public_key(self._seed)
        self._lock = threading.Lock()
        self._signed: dict[str, Signed] = {}
        self._stamp = _stamp(directory / STATE)
        self._assignment = _read_assignment(directory / STATE)
        self._events_seen = _size(directory / EVENTS)  # what happened before this plane started is not its decision

    def publish(self, artifact: Path) -> Signed:
        """Pack and sign the artifact directory ``artifact`` as version ``artifact.name`` (once; raises ValueError for a
        broken artifact or an unusable name)."""
        version = artifact.name
        if not version or not version.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"a model version is a plain name (letters, digits, - and _), not {version[:40]!r}")
        known = self.signed(version)
        if known is not None:
            return known
        bundle = modelbundles.pack(artifact)
        signed = modelbundles.sign(self._seed, version, bundle)
        _write(self._bundle(version), bundle)
        _write(self._bundle(version).with_suffix(".json"), json.dumps({**asdict(signed), "signature": signed.signature.hex()}).encode())
        with self._lock:
            self._signed[version] = signed
        return signed

    def promote(self, artifact: Path) -> Signed:
        """Every agent's model becomes ``artifact`` (any trial ends)."""
        signed = self.publish(artifact)
        self._assign(Assignment(current=signed.version))
        return signed

    def start_canary(self, artifact: Path, weight: float, nodes: Collection[str] = ()) -> Signed:
        """Put ``artifact`` on trial for ``weight`` of the decisions of ``nodes`` (``cluster/node``; empty: all)."""
        if not 0 < weight <= 1:
            raise ValueError(f"a canary's weight is a share in (0, 1], not {weight!r}")
        signed = self.publish(artifact)
        self._assign(Assignment(self.assignment.current, signed.version, weight, tuple(sorted(nodes))))
        return signed

    def end_canary(self) -> None:
        """The trial ends (rolled back or promoted): every agent back to its current model alone."""
        self._assign(Assignment(current=self.assignment.current))

    @property
    def assignment(self) -> Assignment:
        """The current assignment, re-read when another process changed it (one stat a call)."""
        self._read_notes()
        stamp = _stamp(self.directory / STATE)
        if stamp != self._stamp:
            try:
                found = _read_assignment(self.directory / STATE)
            except ValueError:
                return self._assignment  # half-written by hand: keep offering the last good one
            self._stamp = stamp
            self._changed(found)
        return self._assignment

    def offer(self, cluster: str, node: str) -> Offer:
        """What the agent on ``node`` of ``cluster`` should run."""
        a = self.assignment
        trial = a.canary and (not a.nodes or node_key(cluster, node) in a.nodes)
        return Offer(self.signed(a.current), self.signed(a.canary) if trial else None, a.weight if trial else 0.0)

    def chunk(self, version: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``version``'s bundle from ``offset``; raises KeyError for a version never published."""
        if self.signed(version) is None:
            raise KeyError(f"no model {version[:40]!r} on this plane's shelf")
        with self._bundle(version).open("rb") as f:
            f.seek(max(0, offset))
            return f.read(size)

    def signed(self, version: str) -> Signed | None:
        if not version:
            return None
        with self._lock:
            found = self._signed.get(version)
        if found is None:
            try:
                doc = json.loads(self._bundle(version).with_suffix(".json").read_text())
                found = Signed(str(doc["version"]), str(doc["sha256"]), int(doc["size"]), bytes.fromhex(doc["signature"]))
            except (OSError, ValueError, KeyError, TypeError):
                return None
            with self._lock:
                self._signed[version] = found
        return found

    def _assign(self, assignment: Assignment) -> None:
        _write(self.directory / STATE, json.dumps(asdict(assignment)).encode())
        self._stamp = _stamp(self.directory / STATE)
        self._changed(assignment)

    def _changed(self, assignment: Assignment) -> None:
        old, self._assignment = self._assignment, assignment
        if self.on_change is not None and old != assignment:
            try:
                self.on_change(old, assignment)
            except Exception:  # the log is told, never in the way: agents still get the new assignment
                log.exception("model assignment changed, but recording it failed")

    def _read_notes(self) -> None:
        """Tell ``on_note`` each complete line appended to ``events.jsonl`` since the last look (a torn line waits)."""
        path = self.directory / EVENTS
        if self.on_note is None or _size(path) <= self._events_seen:
            return
        with self._lock:
            try:
                with path.open("rb") as f:
                    f.seek(self._events_seen)
                    data = f.read()
            except OSError:
                return
            complete = data[: data.rfind(b"\n") + 1]
            self._events_seen += len(complete)
        for raw in complete.splitlines():
            try:
                doc = json.loads(raw)
                self.on_note(str(doc["kind"]), str(doc.get("subject", "")), str(doc["why"]))
            except (ValueError, KeyError, TypeError):
                log.warning("%s: skipped an unreadable line", path)
            except Exception:  # the log is told, never in the way
                log.exception("recording a rounds event failed")

    def _bundle(self, version: str) -> Path:
        return self.directory / BUNDLES / f"{version}.bundle"


def _seed(path: Path) -> bytes:
    """The plane's signing seed, created (0600) on first start."""
    try:
        seed = path.read_bytes()
    except FileNotFoundError:
        seed = os.urandom(SEED_BYTES)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(seed)
        try:
            os.link(tmp, path)  # never replaces a key another process created meanwhile: that one wins
        except FileExistsError:
            seed = path.read_bytes()
        finally:
            tmp.unlink()
    if len(seed) != SEED_BYTES:
        raise ValueError(f"{path}: a signing key is {SEED_BYTES} bytes, this file holds {len(seed)}")
    return seed


def note(directory: Path, kind: str, subject: str, why: str) -> None:
    """Append one event for the plane that serves ``directory`` (one ``write`` of one line: appends never interleave)."""
    line = json.dumps({"kind": kind, "subject": subject, "why": why}).encode() + b"\n"
    fd = os.open(directory / EVENTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stamp(path: Path) -> tuple[int, int]:
    try:
        found = path.stat()
    except OSError:
        return (0, 0)
    return found.st_mtime_ns, found.st_ino


def _read_assignment(path: Path) -> Assignment:
    try:
        doc: Any = json.loads(path.read_text())
        return Assignment(str(doc["current"]), str(doc["canary"]), float(doc["weight"]), tuple(str(n) for n in doc["nodes"]))
    except FileNotFoundError:
        return Assignment()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable model assignment ({exc}); remove it to start with none") from None


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
