"""The experience format, agent to trainer: one row per placement decision, in the policy's own feature spec.

An edge agent appends a row for every decision it scored with the learned policy: the exact
float32 inputs the model saw (``pod_x``, ``node_x``: :mod:`federated.runtime.features`, the same
numpy code training and run time share), the action (the claim and its score, the model
version that scored it), the outcome (``bound``: the claim won and the back end bound the pod;
``lost``: another node won; ``refused``: the back end refused the bind for lack of room;
``evicted``: a bound pod was stopped after a re-placement) and the delayed outcome (the pod's
wait from pending to decision, the node's GPU allocation after, its expected fragmentation
before and after the placement, in milli-GPU). Arrays travel as raw little-endian float32
bytes, so the trainer's batch equals what the agent scored bit for bit.

Rows are msgpack frames in a checksummed frame log (:mod:`fedcore.framelog`, like the claims
journal: a crash tears at most the last frame, which is dropped, never misread). The log
rotates at a size limit keeping one older file, so disk use is bounded by twice the limit.
Every row names :data:`FORMAT` and the feature spec; a reader refuses any other with
:class:`ExperienceFormatError` naming the file and what it found (an agent of another
release is refused, not misread). numpy and msgpack only: the agent imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.framelog import FrameLog, read_frames
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, SPEC_VERSION

FORMAT = "fedplane-experience/1"
CURRENT = "experience.log"
OLDER = "experience.1.log"
OUTCOMES = ("bound", "lost", "refused", "evicted")
_F32 = np.dtype("<f4")


class ExperienceFormatError(ValueError):
    """A row or log is not in this release's experience format (another version, another feature spec, or garbage)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One scored decision and what became of it."""

    t: float
    """The agent's clock when the outcome was known (seconds)."""
    pod: str
    model: str
    """Version of the model that scored the claim (not the one running when the outcome arrived)."""
    score: float
    pod_x: np.ndarray
    """(len(POD_FEATURES),) float32: the model's pod input."""
    node_x: np.ndarray
    """(len(NODE_FEATURES),) float32: the model's row for this agent's node."""
    outcome: str
    wait_s: float
    """From seeing the pod pending to the outcome."""
    gpu_alloc_after: float
    """Share of the node's GPU milli allocated right after the claim."""
    frag_before: float
    frag_after: float
    """Expected fragmentation of the node (milli-GPU, FGD's measure) before and after the claim."""

    def encode(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "spec": SPEC_VERSION, "t": self.t, "pod": self.pod, "model": self.model,
            "score": self.score, "pod_x": np.ascontiguousarray(self.pod_x, _F32).tobytes(),
            "node_x": np.ascontiguousarray(self.node_x, _F32).tobytes(), "outcome": self.outcome,
            "wait_s": self.wait_s, "gpu_alloc_after": self.gpu_alloc_after,
            "frag_before": self.frag_before, "frag_after": self.frag_after,
        }

    @classmethod
    def decode(cls, raw: object, where: str = "row") -> Row:
        """A row from its encoded form; :class:`ExperienceFormatError` naming ``where`` when it is not one."""
        if not isinstance(raw, dict):
            raise ExperienceFormatError(f"{where}: not an experience row (an old edge-v1 log?); found {type(raw).__name__}")
        if raw.get("format") != FORMAT:
            raise ExperienceFormatError(
                f"{where}: experience format {raw.get('format')!r}, this trainer reads {FORMAT!r}: "
                "the agent runs another release; upgrade it or move its old log away")
        if raw.get("spec") != SPEC_VERSION:
            raise ExperienceFormatError(
                f"{where}: rows computed with feature spec {raw.get('spec')!r}, this trainer uses {SPEC_VERSION!r}")
        try:
            pod_x = np.frombuffer(raw["pod_x"], _F32)
            node_x = np.frombuffer(raw["node_x"], _F32)
            row = cls(float(raw["t"]), str(raw["pod"]), str(raw["model"]), float(raw["score"]), pod_x, node_x,
                      str(raw["outcome"]), float(raw["wait_s"]), float(raw["gpu_alloc_after"]),
                      float(raw["frag_before"]), float(raw["frag_after"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ExperienceFormatError(f"{where}: malformed experience row ({exc})") from None
        if pod_x.size != len(POD_FEATURES) or node_x.size != len(NODE_FEATURES) or row.outcome not in OUTCOMES:
            raise ExperienceFormatError(
                f"{where}: row has {pod_x.size} pod and {node_x.size} node features and outcome {row.outcome!r}; "
                f"expected {len(POD_FEATURES)}, {len(NODE_FEATURES)} and one of {OUTCOMES}")
        return row


class ExperienceLog:
    """The agent's side: append rows, rotate at ``max_bytes`` (one older file kept)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._log = FrameLog(directory / CURRENT)

    def write(self, rows: Iterable[Row]) -> None:
        """Append a batch as one frame (handed to the OS with the next journal flush; a crash loses at most that)."""
        batch = [row.encode() for row in rows]
        if not batch:
            return
        self._log.append(batch)
        if self._log.size() > self.max_bytes:
            self._log.rotate(self.directory / OLDER)

    def flush(self) -> None:
        self._log.flush()

    def close(self) -> None:
        self._log.close()


def read(directory: Path) -> Iterator[Row]:
    """Every row an agent kept in ``directory``, oldest first, without writing to its files (the agent may be
    appending: a frame it is still writing ends the read); or, the same way, the rows the control plane holds for
    one agent (``controlplane.experienceinbox``: frames ``{"seq": n, "rows": [...]}``), so a regional trainer on
    another host reads what agents shipped as it reads a local agent's log. Raises :class:`ExperienceFormatError`."""
    for name in (OLDER, CURRENT):
        path = directory / name
        if not path.is_file():
            continue
        try:
            for n, frame in enumerate(read_frames(path)):
                batch = frame.get("rows") if isinstance(frame, dict) else frame  # {seq, rows}: as the plane holds shipped rows
                if not isinstance(batch, list):
                    raise ExperienceFormatError(f"{path}: frame {n} is not a batch of experience rows")
                for raw in batch:
                    yield Row.decode(raw, f"{path} frame {n}")
        except OSError as exc:
            raise ExperienceFormatError(f"{path}: unreadable ({exc})") from None


def newest(directories: Iterable[Path], limit: int) -> list[Row]:
    """Up to ``limit`` newest rows of each agent directory, oldest first per agent (a sliding window of experience)."""
    rows: list[Row] = []
    for directory in directories:
        kept = list(read(directory))
        rows.extend(kept[-limit:] if limit > 0 else kept)
    return rows

