"""The seam between the control plane and a cluster: what every back end must do.

Contracts callers rely on (tested against every back end by one suite):
- ``create_workload`` raises ``Conflict`` when the name exists (callers make it idempotent by
  reading back and comparing epochs); ``delete_workload`` raises ``NotFound`` when it is gone.
- ``bind_pod`` returns a :class:`~fedcore.backends.model.BindResult` (the fence rules are in
  :class:`~fedcore.backends.model.BindOutcome`); a wrong epoch or a second bind of the same
  (pod, epoch) to another node is refused, never silently accepted.
- ``evict_pod`` returns an :class:`~fedcore.backends.model.EvictResult`: idempotent, fenced by epoch.
- Every call may raise a ``TemporaryError`` (unreachable, 5xx, conflict) or ``PermanentError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from fedcore.backends.model import BindResult, EvictResult, NodeState, PodEvent, PodState, Workload, WorkloadSpec


class ClusterBackend(Protocol):
    name: str

    def create_workload(self, spec: WorkloadSpec) -> Workload: ...

    def get_workload(self, name: str) -> Workload: ...

    def list_workloads(self) -> list[Workload]: ...

    def scale_workload(self, name: str, replicas: int) -> Workload: ...

    def delete_workload(self, name: str, orphan_pods: bool = False) -> None: ...

    def list_pods(self, workload: str | None = None) -> list[PodState]: ...

    def list_nodes(self) -> list[NodeState]: ...

    def bind_pod(self, pod: str, node: str, epoch: int) -> BindResult: ...

    def evict_pod(self, pod: str, epoch: int) -> EvictResult:
        """Stop the pod while it is at ``epoch`` (Kubernetes: the Eviction API, PodDisruptionBudgets apply)."""
        ...

    def watch_pods(self, timeout_s: float) -> Iterator[PodEvent]:
        """Current pods as ADDED, then changes until ``timeout_s`` elapses."""
        ...
