"""Counters of one node: a plain object the core bumps, exportable to Prometheus.

The core never imports prometheus_client; ``export_prometheus`` copies the counters into
a registry on demand (a driver calls it from its scrape hook or a timer).
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any

from gossip.wire import DropReason


@dataclass(slots=True)
class Counters:
    """Monotonic counts since start; ``dropped`` is keyed by why a packet was refused."""

    packets_in: int = 0
    packets_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    streams_in: int = 0
    streams_out: int = 0
    antientropy_bytes_out: int = 0
    """Bytes of push-pull frames sent (digest or full state): what the benchmark compares."""
    full_state_bytes_counted: int = 0
    """With ``count_full_state``: what full-state push-pull frames would have taken instead (never sent)."""
    probes: int = 0
    probe_failures: int = 0
    refutations: int = 0
    dropped: dict[DropReason, int] = field(default_factory=lambda: dict.fromkeys(DropReason, 0))

    def as_dict(self) -> dict[str, int]:
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dropped"}
        flat.update({f"dropped_{reason.value}": n for reason, n in self.dropped.items()})
        return flat


_gauges: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
"""Gauges already registered, per registry (a registry refuses the same name twice)."""


def export_prometheus(counters: Counters, registry: Any = None, prefix: str = "fedplane_gossip") -> None:
    """Publish the counters as Prometheus gauges of their current totals (call again to refresh)."""
    from prometheus_client import REGISTRY, Gauge

    registry = REGISTRY if registry is None else registry
    gauges: dict[str, Gauge] = _gauges.setdefault(registry, {})
    for name, value in counters.as_dict().items():
        gauge = gauges.get(name)
        if gauge is None:
            gauge = gauges[name] = Gauge(f"{prefix}_{name}", f"gossip counter {name}", registry=registry)
        gauge.set(value)
