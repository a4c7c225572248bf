"""Which capacity a pod may be placed against, by its class: online never on reclaimed capacity, batch may be.

A node's escrow (the claims CRDT's free resources) holds what pods request. Reclaimed capacity is CPU
that online pods request but, by the plane's forecast, will not use (:mod:`controlplane.reclaiming`);
the plane offers it to this node's batch pods (:mod:`controlplane.auctions`). A batch pod whose CPU the
escrow cannot hold takes the rest from the offer: it is claimed with that part removed from its request
(so the escrow and the node table count only what is really reserved) and the offer records the part.
An online pod is judged on the escrow alone. The offer is the plane's to set and shrink; shrinking it
does not evict here — the plane's auction does that, at its bounded rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from dataclasses import dataclass, field

from fedcore.pods import Pod, QoS
from fedcore.resources import Resources


@dataclass(slots=True)
class Reclaimed:
    """The reclaimed CPU offered to this node's batch pods (millicores) and the part each holds."""

    offered_milli: int = 0
    held: dict[str, int] = field(default_factory=dict)

    def free(self) -> int:
        return max(0, self.offered_milli - sum(self.held.values()))

    def fitted(self, pod: Pod, escrow_free: Resources) -> Pod | None:
        """``pod`` as it is claimed here: as is when the escrow holds it; a batch pod with the CPU the escrow
        lacks taken from the offer; None when it fits neither way (online pods never use the offer)."""
        if pod.request.fits_in(escrow_free):
            return pod
        if pod.qos is not QoS.BEST_EFFORT:
            return None
        lacking = pod.cpu_milli - max(0, escrow_free.cpu_milli)
        if lacking > self.free():
            return None
        fitted = dataclasses.replace(pod, cpu_milli=pod.cpu_milli - lacking)
        return fitted if fitted.request.fits_in(escrow_free) else None

    def take(self, uid: str, milli: int) -> None:
        if milli > 0:
            self.held[uid] = milli

    def keep(self, uids: Container[str]) -> None:
        """Forget the parts of pods no longer held here (``uids``: the uids still held)."""
        for uid in [u for u in self.held if u not in uids]:
            del self.held[uid]
