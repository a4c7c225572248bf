"""The pending pods of one agent's placement core: each pod's progress, and the order they are tried in.

:class:`Pending` is what :mod:`edgeagent.placing` keeps per pod the back end says is pending
(its fencing epoch, when it is next due, our claim on it); :mod:`edgeagent.holdings` moves it
between the stages. :func:`in_queue_order` and :func:`kick` are the queue's two rules, pure
over the pending pods and the injected ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.framework import OldestFirst, QueueSortPlugin, Waiting

from edgeagent.scoring import Assessment


@dataclass(slots=True)
class Pending:
    """A pod the back end says is pending, and our progress on it."""

    pod: Pod
    epoch: int
    """The back end's fencing epoch for the pod: what a bind must name."""
    seen: float
    due: float
    claimed_at: float | None = None
    claim_epoch: int = 0
    assessment: Assessment | None = None
    """How our claim was scored (and the model's inputs): the experience row's state and action."""
    model: str = ""
    """The scorer version that made the claim: a model swapped in later does not re-attribute it."""
    gpu_alloc_after: float = 0.0
    frag_after: float = 0.0
    score: float = 0.0
    binding: bool = False
    elsewhere: bool = False
    """The back end refused our bind because another node holds the pod."""
    refused_until: float = 0.0
    """The back end had no room for it here: leave it to others until then (no kick shortens this)."""
    first_claim: float | None = None
    """When the first claim on the pod at its current epoch reached us (ours or a rival's)."""
    deferred: bool = False
    """Held back for better-ranked peers until ``fallback_after``, or until too few of them are sure to rank above us."""
    ahead: set[str] = field(default_factory=set)
    """Deferred: the peers that ranked above us and have not changed since (they still do)."""
    waiting_for_room: bool = False
    """It did not fit our node when we last considered it: it waits for room, in the queue order."""

    def new_epoch(self, epoch: int, now: float) -> None:
        """The back end fences the pod at another epoch now: a new race, due at once."""
        self.epoch, self.elsewhere, self.refused_until, self.first_claim = epoch, False, 0.0, None
        self.due = min(self.due, now)


def in_queue_order(due: list[tuple[str, Pending]], queue: QueueSortPlugin, table: NodeTable,
                   now: float) -> list[tuple[str, Pending]]:
    """``due`` with the pods we may claim now (unclaimed, due) in the scorer's queue order against our node as it is.

    The twin's learned profile gives a freed node to the waiting pods in this order; an agent
    claims for its own node in the same order, from the same features of its own row, among the
    pods that once found no room here (as the twin retries only pods waiting for room). Every
    other pod keeps its place, and a new arrival is tried in arrival order as on the twin: applied
    to every due pod, the order decided no placement where all fit, only who waited (``bench
    agent``'s decision p99 read 410-435 ms against 210 ms in arrival order); equal priorities keep
    arrival order. A learned order ranks only pods that waited ``LEARNED_AFTER_S`` (the queue's
    rule, the twin's too): younger ones wait on claims, not on departures.
    """
    slots = [k for k, (_, p) in enumerate(due)
             if p.waiting_for_room and p.claimed_at is None and not p.binding and p.due <= now]
    if isinstance(queue, OldestFirst) or len(slots) < 2:
        return due
    pods = [due[k][1] for k in slots]
    waiting = Waiting(
        np.array([p.pod.cpu_milli for p in pods], dtype=np.int64), np.array([p.pod.memory_mib for p in pods], dtype=np.int64),
        np.array([p.pod.gpu.count for p in pods], dtype=np.int64), np.array([p.pod.gpu.milli_each for p in pods], dtype=np.int64),
        np.array([now - p.seen for p in pods], dtype=np.float64),
    )
    order = np.argsort(-queue.priority(waiting, table, 0), kind="stable")
    out = list(due)
    for slot, k in zip(slots, order, strict=True):
        out[slot] = due[slots[int(k)]]
    return out


def kick(pending: Iterable[Pending], now: float, claim_window: float) -> None:
    """Capacity came back: look again now at pods we could not take (not those refused for a while)."""
    for p in pending:
        if p.claimed_at is None and not p.binding and p.due > now + claim_window and p.refused_until <= now:
            p.due = now


def rival_changed(pending: Iterable[Pending], member: str, now: float, candidates: int) -> None:
    """``member``'s standing changed (new state, suspected, dead): it may no longer rank above us. A pod
    deferred to it is ranked again once fewer than ``candidates`` peers are left that surely still do,
    not at every state change of every peer (each peer publishes twice a second: a re-rank storm)."""
    for p in pending:
        if p.deferred and member in p.ahead:
            p.ahead.discard(member)
            if len(p.ahead) < candidates:
                p.deferred, p.due = False, min(p.due, now)
