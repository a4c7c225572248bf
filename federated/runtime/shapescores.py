"""Scores kept per pod shape, so a fleet-wide decision rescores only the nodes that changed since the shape was last asked.

A workload repeats few request shapes (openb: ~120 over 2,000 pods) and a placement changes one
node. A node's features read only the pod's request and that node's own row (the workload
columns are the exception: they read where the workload's other replicas run, so a pod whose
workload has placed replicas is scored afresh), and the model scores each candidate row on its
own. So a node the table has not stamped since a shape was scored keeps that score exactly: the
cache hands it back and scores only the stamped rows, with the same features and the same model
call, bit for bit (tests replay this against the uncached path over whole fleets).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.fragments import all_rows

BUDGET_BYTES = 1 << 24
"""Memory the kept scores may take (16 MiB: ~690 shapes over 1,523 nodes, ~170 over the DLRM fleet x4); the least recently asked go first."""
MAX_SHAPES = 512
"""Shapes kept at most, whatever their size (an agent's one row: under 1 KiB each, objects included)."""

SHARE_AT = 32
"""Stale rows from which equal rows share one scoring: below it, finding them costs about what it saves."""

Scored = tuple[np.ndarray, np.ndarray, np.ndarray]
"""The model's inputs and its scores: ``pod_x`` (1, pod features), ``node_x`` (rows, node features), scores (rows,)."""
Score = Callable[[Pod, NodeTable, np.ndarray], Scored]


class Classes(Protocol):
    """Rows whose features are equal for any pod (``features._NodeCache``): ``classes`` numbers them per row."""

    classes: np.ndarray

    def one_per_class(self) -> tuple[np.ndarray, np.ndarray]:
        """(one row of each class, for every row the index of its class's row there)."""
        ...


def shape_of(pod: Pod) -> Hashable:
    """Everything of a pod that its features read: pods with equal shapes get equal scores on any node."""
    return (pod.cpu_milli, pod.memory_mib, pod.gpu.count, pod.gpu.milli_each, pod.priority > 0, pod.max_per_node,
            pod.workload, pod.gpu_model, pod.archs)


class _Kept:
    """One shape's scores over the whole fleet and, per row, the table's change count when it was scored (-1: never);
    with its inputs when they are kept."""

    __slots__ = ("scores", "at", "pod_x", "node_x")

    def __init__(self, rows: int, features: int) -> None:
        self.scores = np.empty(rows)
        self.at = np.full(rows, -1, dtype=np.int64)
        self.pod_x: np.ndarray | None = None
        self.node_x = np.empty((rows, features), dtype=np.float32) if features else None


class ShapeScores:
    """Per-shape scores of one node table; cleared when the table, the model or the features' history is replaced.

    ``features`` > 0 keeps the model's inputs (that many node features a row) beside the scores: an
    edge agent records them with each claim and holds one row, so they cost it a few hundred bytes.
    """

    def __init__(self, features: int = 0) -> None:
        self.features = features
        self._shapes: dict[Hashable, _Kept] = {}
        self._table: NodeTable | None = None
        self._epoch: object = None

    def clear(self) -> None:
        self._shapes.clear()

    def scores(self, pod: Pod, table: NodeTable, rows: np.ndarray, score: Score, epoch: object,
               classes: Classes | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """``score(pod, table, rows)``'s scores as a fresh float64 array, calling ``score`` only for rows not kept;
        with ``pod_x`` and ``node_x`` for ``rows`` when inputs are kept, else None.

        ``epoch`` names the features' history (it changes when the feature caches were rebuilt, which
        resets the load trend): kept scores from another epoch are dropped. ``classes`` (per row, when
        given) marks rows whose features are equal for any pod: of many stale rows, one per class is scored (when
        every row is stale, as on a shape's first sight, the classes' kept grouping says which, with no regrouping).
        """
        if pod.workload and table.per_workload.get(pod.workload, np.zeros(1)).any():
            pod_x, node_x, fresh = score(pod, table, rows)  # placed replicas: its latency and spread columns change on every node
            return (fresh, pod_x, node_x) if self.features else (fresh, None, None)
        if table is not self._table or epoch is not self._epoch:
            self._shapes.clear()
            self._table, self._epoch = table, epoch
        key = shape_of(pod)
        kept = self._shapes.pop(key, None)
        if kept is None:
            kept = _Kept(len(table), self.features)
            if len(self._shapes) >= MAX_SHAPES or len(self._shapes) * len(table) * (16 + 4 * self.features) >= BUDGET_BYTES:
                del self._shapes[next(iter(self._shapes))]
        self._shapes[key] = kept  # last: the most recently asked
        # A row's kept score holds while the table has not stamped the row since it was scored.
        whole = all_rows(rows, len(table))
        stale = np.flatnonzero(table.stamp > kept.at) if whole else rows[table.stamp[rows] > kept.at[rows]]
        if stale.size >= SHARE_AT and classes is not None and kept.node_x is None:
            if whole and stale.size == len(table):
                scored, copies = classes.one_per_class()
                pod_x, node_x, fresh = score(pod, table, scored)
                np.take(fresh, copies, out=kept.scores)
            else:
                scored, copies = _one_per_class(stale, classes.classes)
                pod_x, node_x, fresh = score(pod, table, scored)
                kept.scores[stale] = fresh[copies]
            kept.at[stale] = table.changes
        elif stale.size:
            pod_x, node_x, kept.scores[stale] = score(pod, table, rows if stale.size == rows.size else stale)
            kept.at[stale] = table.changes
            if kept.node_x is not None:
                kept.pod_x, kept.node_x[stale] = pod_x, node_x
        scores = kept.scores.copy() if whole else kept.scores[rows]
        if kept.node_x is None:
            return scores, None, None
        return scores, kept.pod_x, kept.node_x[rows]


def _one_per_class(rows: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row of each class among ``rows``, in order; for each of ``rows``, the index of its class's row there).

    No sort: each row's class points at the last of ``rows`` in it (repeated assignment keeps the last
    value), and the rows pointed at are the ones scored.
    """
    of_row = classes[rows]
    last = np.empty(int(of_row.max()) + 1, dtype=np.intp)
    last[of_row] = np.arange(rows.size)
    pointed = last[of_row]
    chosen = np.flatnonzero(pointed == np.arange(rows.size))
    position = np.empty(rows.size, dtype=np.intp)
    position[chosen] = np.arange(chosen.size)
    return rows[chosen], position[pointed]
