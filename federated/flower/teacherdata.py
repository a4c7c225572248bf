"""Recorded teacher decisions as ``.npz`` files: the regional data of ``fedplane bench federated``.

Benches and tests write regional slices of teacher rollouts on the traces here
(:mod:`federated.flower.datasets`); the imitation ClientApp trains on them. Agents' own
experience is another format (:mod:`federated.runtime.experience`, read by the learning loop's
ClientApp). Each file holds the arrays of :class:`federated.rollouts.Decisions`, one per field:
``pods`` (D, P), ``nodes`` (D, K, F) and per-candidate (D, K) arrays such as the teacher's scores
and masks. A directory is read as the concatenation of its ``*.npz`` files in name order. A file
that is not such a log is refused with :class:`ExperienceError`.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from pathlib import Path

import numpy as np

from federated.rollouts import Decisions
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

FIELDS = tuple(f.name for f in dataclasses.fields(Decisions))


class ExperienceError(ValueError):
    """The experience log is missing, unreadable or of another shape: fix the path or rewrite the log."""


def save(path: Path, decisions: Decisions) -> None:
    """Write ``decisions`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as out:
        np.savez(out, **{f: getattr(decisions, f) for f in FIELDS})
    os.replace(tmp, path)


def _read(path: Path) -> Decisions:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {f: data[f] for f in FIELDS}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise ExperienceError(f"{path}: not an experience log ({exc})") from None
    rows, k = arrays["nodes"].shape[:2] if arrays["nodes"].ndim == 3 else (-1, -1)
    expected = {f: (rows, k) for f in FIELDS} | {"pods": (rows, len(POD_FEATURES)), "nodes": (rows, k, len(NODE_FEATURES))}
    wrong = {f: a.shape for f, a in arrays.items() if a.shape != expected[f] or a.dtype.kind not in "fb"}
    if wrong:
        raise ExperienceError(
            f"{path}: arrays {wrong} do not match the feature spec ({len(POD_FEATURES)} pod, {len(NODE_FEATURES)} node features)"
        )
    return Decisions(**arrays)


def load(path: str | Path) -> Decisions:
    """One ``.npz`` file, or every ``*.npz`` in a directory, as one :class:`Decisions`."""
    path = Path(path)
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    if not files or not files[0].is_file():
        raise ExperienceError(f"{path}: no experience log here (expected a .npz file or a directory of them)")
    parts = [_read(f) for f in files]
    if len({p.nodes.shape[1] for p in parts}) > 1:
        raise ExperienceError(f"{path}: files disagree on the number of candidates per decision")
    data = Decisions.concat(parts)
    if len(data) == 0:
        raise ExperienceError(f"{path}: the experience log is empty")
    return data
