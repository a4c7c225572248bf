"""The seam between an agent and its cluster's API: watch pods, bind with a fencing epoch, report status.

Two implementations sit behind :class:`ClusterAPI`: the twin cluster API over the twin link
(:mod:`edgeagent.planeclient`, speaking ``fedapi``'s TwinCluster) and Kubernetes
(:mod:`edgeagent.kube`); tests use :class:`fedplane.lab.doubles.memcluster.InMemoryCluster`.

Contracts the agent relies on:

* ``watch`` yields every current pod first, then each change, for as long as the
  connection holds; it raises :class:`ClusterUnavailable` when it cannot (the agent
  reconnects with backoff and keeps placing what it already knows).
* ``bind`` is fenced: a stale epoch, or a second node for the same (pod, epoch), is
  refused with an outcome value, never silently accepted. Binding the same node
  again answers ``ALREADY_BOUND`` (so a bind retried after a crash is harmless).
* ``bind`` books the GPU devices the agent names (its node table chose them), or
  refuses with ``REJECTED`` when they do not fit; the back end never silently picks
  others, which would make the agent's and the back end's device books disagree.
* ``evict(pod, epoch)`` stops a pod that runs under a superseded claim; it is fenced by
  the epoch (a newer copy is never stopped) and idempotent (a gone pod answers ``GONE``).
* ``report_node(node, ready=False)`` unbinds that node's pods and bumps their epoch:
  the back end's half of re-placing a dead peer's pods.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from fedcore.backends.model import BindOutcome as BindOutcome  # re-exported: the agent's seam speaks the back ends' outcomes
from fedcore.backends.model import BindResult as BindResult
from fedcore.backends.model import EvictOutcome as EvictOutcome
from fedcore.backends.model import EvictResult as EvictResult
from fedcore.nodes import Node
from fedcore.pods import Pod


class ClusterUnavailable(Exception):
    """The cluster API cannot be reached or answered garbage: retry later; nothing was changed here."""


class UnknownNode(Exception):
    """The back end answered and knows no such node (or cluster): retrying cannot help; fix the configuration."""


class Phase(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.DELETED)


@dataclass(frozen=True, slots=True)
class PodUpdate:
    """A pod as the cluster reports it: its spec, fencing epoch, phase and node (empty while pending)."""

    pod: Pod
    epoch: int
    phase: Phase
    node: str = ""


class ClusterAPI(Protocol):
    """What an agent needs from its cluster; every call may raise :class:`ClusterUnavailable`."""

    def watch(self) -> AsyncIterator[PodUpdate]:
        """Current pods, then changes, until the connection drops."""
        ...

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> BindResult:
        """Fenced bind; ``gpus`` names the node's devices to book (empty: the cluster picks); ``reclaimed_milli``: the
        CPU a batch pod takes from the node's reclaimed capacity (the plane's offer), booked outside its allocatable."""
        ...

    async def evict(self, pod: str, epoch: int) -> EvictResult:
        """Stop the pod while it is at ``epoch`` (Kubernetes: the Eviction API; elsewhere: delete it)."""
        ...

    async def report_node(self, node: str, ready: bool) -> int:
        """Node status from an agent; returns how many pods a not-ready report freed."""
        ...

    async def describe_node(self, node: str) -> Node:
        """The node's static description (capacity, arch, labels, taints) as the cluster knows it."""
        ...

    async def close(self) -> None: ...
