"""The fenced-bind rule, once: what every back end answers a bind before it touches a node.

A bind names a pod, a node and the fencing epoch the binder saw. Whoever keeps the pod (the twin, a
Kubernetes API server read through either client, the lab's in-memory cluster) describes it as a
:class:`Seen` and asks :func:`fence`; only when the answer is ``None`` may it go on to check the node and
bind. The order is the contract of :class:`~fedcore.backends.model.BindOutcome`:

1. the pod is gone → REJECTED;
2. the epoch is not the pod's (behind or ahead) → STALE_EPOCH, naming the pod's epoch and node;
3. the pod finished → REJECTED (it keeps its node name after it ends: never "already bound");
4. it is bound → ALREADY_BOUND on the same node, DUPLICATE on another (naming it);
5. it is not pending → REJECTED.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore.backends.model import BindOutcome, BindResult


@dataclass(frozen=True, slots=True)
class Seen:
    """The pod as its keeper sees it now."""

    epoch: int
    node: str  # "" while unbound
    phase: str  # "Pending", "Running", "Succeeded", "Failed" or "Deleted" (the phases' shared values)


FINISHED = frozenset({"Succeeded", "Failed", "Deleted"})


def fence(pod: str, node: str, epoch: int, seen: Seen | None) -> BindResult | None:
    """The answer to a bind of ``pod`` to ``node`` at ``epoch`` when the fence refuses it; ``None`` lets it go on."""
    if seen is None:
        return BindResult(BindOutcome.REJECTED, node, epoch, f"pod {pod} does not exist")
    if epoch != seen.epoch:
        return BindResult(BindOutcome.STALE_EPOCH, seen.node, seen.epoch, f"epoch {epoch} is not the pod's {seen.epoch}")
    if seen.phase in FINISHED:
        return BindResult(BindOutcome.REJECTED, node, seen.epoch, f"pod is {seen.phase}")
    if seen.node:
        if seen.node == node:
            return BindResult(BindOutcome.ALREADY_BOUND, node, seen.epoch)
        return BindResult(BindOutcome.DUPLICATE, seen.node, seen.epoch, f"already bound to {seen.node} at epoch {seen.epoch}")
    if seen.phase != "Pending":
        return BindResult(BindOutcome.REJECTED, node, seen.epoch, f"pod is {seen.phase}")
    return None
