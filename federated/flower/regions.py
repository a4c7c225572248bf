"""Non-IID regional slices of recorded decisions, standing in for each region's own experience.

A region sees one kind of traffic: ``app`` groups decisions by the pod's GPU shape (GPU-sharing,
one whole GPU, CPU-only or multi-GPU), ``tenant`` by priority class (latency-sensitive or
guaranteed vs best-effort), ``time`` by contiguous windows of the episode (an empty cluster
early, a full one late). Groups keep their natural sizes, so regions differ in size too and the
example weighting of FedAvg matters. Pure numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from federated.rollouts import Decisions
from federated.runtime.features import POD_FEATURES

SPLITS = ("app", "tenant", "time")
_GPU_COUNT = POD_FEATURES.index("gpu_count")
_SHARING = POD_FEATURES.index("gpu_sharing")
_PRIORITY = POD_FEATURES.index("priority")


def labels(data: Decisions, split: str, regions: int) -> np.ndarray:
    """A group label per decision for ``split``."""
    pods = data.pods
    if split == "app":
        whole_one = (pods[:, _GPU_COUNT] == 1 / 8) & (pods[:, _SHARING] == 0)
        return np.select([pods[:, _SHARING] == 1, whole_one], [0, 1], default=2)
    if split == "tenant":
        return (pods[:, _PRIORITY] > 0).astype(np.int64)
    if split == "time":
        return (np.arange(len(data)) * regions) // max(len(data), 1)
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def assign(groups: np.ndarray, regions: int) -> list[np.ndarray]:
    """Row indices per region: whole groups, largest first, to the smallest region; then halve the
    largest region until every region has rows."""
    if regions < 1:
        raise ValueError("need at least one region")
    ids, counts = np.unique(groups, return_counts=True)
    parts: list[list[np.ndarray]] = [[] for _ in range(regions)]
    for gid in ids[np.argsort(-counts, kind="stable")]:
        smallest = min(range(regions), key=lambda r: sum(p.size for p in parts[r]))
        parts[smallest].append(np.flatnonzero(groups == gid))
    rows = [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]
    while (empty := [r for r in range(regions) if rows[r].size == 0]) and max(r.size for r in rows) > 1:
        big = max(range(regions), key=lambda r: rows[r].size)
        half = rows[big].size // 2
        rows[big], rows[empty[0]] = rows[big][:half], rows[big][half:]
    return rows


def split(data: Decisions, kind: str, regions: int) -> list[Decisions]:
    """``data`` cut into ``regions`` non-IID slices of kind ``kind``."""
    return [take(data, rows) for rows in assign(labels(data, kind, regions), regions)]


def take(data: Decisions, rows: np.ndarray) -> Decisions:
    return Decisions(*(getattr(data, f.name)[rows] for f in dataclasses.fields(Decisions)))
