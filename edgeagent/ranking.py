"""Who should claim first: our node ranked among the peers' gossiped node states, pure functions.

To keep gossip quiet, only the ``placement.candidates`` best nodes by the heuristic
(:func:`edgeagent.scoring.estimate`) claim a pod at once (:mod:`edgeagent.placing` defers
the others). Every agent ranks from the same inputs, the node states its peers published
(:mod:`edgeagent.records`) and the one it published itself, so agents holding the same
gossip agree on who claims. :class:`PeerView` holds the live peers' states as arrays
(:mod:`edgeagent.peers` keeps it and writes a changed state in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedcore.pods import Pod

from edgeagent import records
from edgeagent.scoring import estimate


@dataclass(frozen=True, slots=True)
class PeerView:
    """Live peers' gossiped states as arrays, one row per peer (ranking runs per pod)."""

    free: np.ndarray
    capacity: np.ndarray
    load: np.ndarray
    devices: np.ndarray
    """(wholly free GPUs, most milli free on one GPU) per peer, -1 where the peer did not say."""
    before_us: np.ndarray
    """Peers whose node name sorts before ours: they win score ties."""
    members: tuple[str, ...]
    """Each row's gossip member name."""
    rows: dict[str, int] = field(default_factory=dict)
    """Member name -> row."""

    def __post_init__(self) -> None:
        self.rows.update((member, row) for row, member in enumerate(self.members))

    @classmethod
    def of(cls, live: Sequence[tuple[str, records.NodeState]], us: str) -> PeerView:
        """The view of ``live`` (member name, its state) for the agent of node ``us``."""
        states = [state for _, state in live]
        return cls(
            np.array([s.free.as_tuple() for s in states], dtype=np.float64).reshape(-1, 4),
            np.array([s.capacity.as_tuple() for s in states], dtype=np.float64).reshape(-1, 4),
            np.array([s.load for s in states], dtype=np.float64),
            np.array([(s.gpus_whole, s.gpu_share) for s in states], dtype=np.int64).reshape(-1, 2),
            np.array([s.node < us for s in states], dtype=bool),
            tuple(member for member, _ in live),
        )

    def set_row(self, row: int, state: records.NodeState, us: str) -> None:
        """A peer's new state, written in place (peers publish twice a second: a rebuild each time costs)."""
        self.free[row] = state.free.as_tuple()
        self.capacity[row] = state.capacity.as_tuple()
        self.load[row] = state.load
        self.devices[row] = (state.gpus_whole, state.gpu_share)
        self.before_us[row] = state.node < us


def ranked_above(view: PeerView, said: records.NodeState, pod: Pod, candidates: int) -> set[str]:
    """The live peers that rank above our node for ``pod`` by the heuristic over gossiped states, ours
    included: ``said`` is the state we last published, not our live one, so that every agent holding the
    same gossip ranks the same way (ranked by our live state, a node whose pods just left thought itself
    below peers that thought themselves below it, and all deferred until the next publication).
    Empty when fewer than ``candidates`` peers are known, or when our published state says we cannot
    take the pod (our live filters say we can: the claim decides)."""
    if len(view.load) < candidates:
        return set()
    request = pod.request
    mine = estimate(request, np.array([said.free.as_tuple()], dtype=np.float64),
                    np.array([said.capacity.as_tuple()], dtype=np.float64),
                    np.array([records.published_load(said.load)]), pod.gpu,
                    np.array([(said.gpus_whole, said.gpu_share)], dtype=np.int64))[0]
    if not np.isfinite(mine):
        return set()  # what we told the peers says we cannot take it, our filters say we can: claim
    theirs = estimate(request, view.free, view.capacity, view.load, pod.gpu, view.devices)
    above = (theirs > mine) | ((theirs == mine) & view.before_us)
    return {view.members[i] for i in np.flatnonzero(above)}


def says_it_fits(state: records.NodeState, pod: Pod) -> bool:
    """Whether peers holding ``state`` of a node believe ``pod`` fits there (they may defer to it)."""
    said = estimate(pod.request, np.array([state.free.as_tuple()], dtype=np.float64),
                    np.array([state.capacity.as_tuple()], dtype=np.float64), np.array([state.load]), pod.gpu,
                    np.array([[state.gpus_whole, state.gpu_share]], dtype=np.int64))
    return bool(np.isfinite(said[0]))
