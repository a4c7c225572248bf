"""What the placement core asks its shell to do: values, safe to keep, performed in order.

The shell writes the ledger's pending operations to the journal before it performs
any of these, so nothing leaves the process that a restart could forget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the row type is imported only by agents that score with a model (federated's runtime)
    from federated.runtime.experience import Row


@dataclass(frozen=True, slots=True)
class Publish:
    """Set (or, with None, withdraw) one of our gossip records."""

    key: str
    value: Any


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind the pod to our node at the back end's epoch; answer with ``Placer.bind_done``.

    ``gpus`` are the devices our node table reserved, so the back end books the same ones
    (if it picked its own, our table and its table would drift and refuse later pods).
    """

    pod: str
    node: str
    epoch: int
    gpus: tuple[int, ...] = ()
    reclaimed_milli: int = 0
    """CPU a batch pod takes from the plane's reclaimed offer (:mod:`edgeagent.classfit`), not the node's allocatable."""


@dataclass(frozen=True, slots=True)
class ReportNode:
    """Tell the back end a node is (not) ready; not-ready frees its pods with a bumped epoch."""

    node: str
    ready: bool


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop a pod that runs here under a superseded epoch (its node was re-placed)."""

    pod: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Experience:
    """One decision's row for the experience log (state, action, outcome, delayed outcome)."""

    row: Row


Effect = Publish | Bind | ReportNode | Evict | Experience
