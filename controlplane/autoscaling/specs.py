"""What a user asks for with ``fedplane autoscale enable``, and where the control plane keeps it.

Demand comes from a series replayed on the control plane's clock: a packaged real series by
name (its held-out part; its training part is the forecaster's history) or samples the client
read from its own CSV file and sent along (``values``, bounded): the control plane never opens
a path a client names. Specs live in the control plane's store under ``autoscalers/<workload>``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

from controlplane.autoscaling import series as sr
from controlplane.autoscaling.controllers import MAX_REPLICAS
from controlplane.store import Store
from fedcore.backends.model import check_name

log = logging.getLogger(__name__)
POLICIES = ("forecast_hpa", "hpa")
MAX_STARTUP_S = 86_400.0   # a pod starting for more than a day is not a forecast horizon
MAX_STRIDE_S = 86_400.0
MIN_STRIDE_S = 1.0         # with MAX_SPEED: at most 1,000 samples fed to the forecaster per second of the plane's clock
MAX_SPEED = 1_000.0        # series seconds per second: each tick feeds the forecaster every sample it passed
MAX_LABEL = 128            # characters of a series' name or label


@dataclass(frozen=True, slots=True)
class AutoscaleSpec:
    workload: str
    series: str = "alibaba2018-cpu"   # a packaged series name, or the label of ``values``
    stride_s: float = 0.0             # seconds between ``values`` (0: 60 s; packaged series have their own)
    policy: str = "forecast_hpa"
    min_replicas: int = 1
    max_replicas: int = 100
    startup_s: float = 60.0           # how long a new pod takes to be ready: the forecast's horizon
    peak_replicas: float = 10.0       # the series is scaled so its training p99 needs this many pods at 100%
    speed: float = 1.0                # series seconds replayed per control-plane second
    enabled_at: float = 0.0
    values: tuple[float, ...] = ()    # demand samples sent by the client (read from its CSV); () for a packaged series

    def __post_init__(self) -> None:
        check_name("workload", self.workload)
        if self.policy not in POLICIES:
            raise ValueError(f"autoscale policy {self.policy[:40]!r}: choose from {', '.join(POLICIES)}")
        if not 1 <= self.min_replicas <= self.max_replicas <= MAX_REPLICAS:
            raise ValueError(f"autoscale {self.workload}: need 1 <= min ({self.min_replicas}) <= max ({self.max_replicas}) <= {MAX_REPLICAS}")
        for name, value, low, high in (("startup_s", self.startup_s, 0.0, MAX_STARTUP_S), ("stride_s", self.stride_s, 0.0, MAX_STRIDE_S),
                                       ("speed", self.speed, 0.001, MAX_SPEED), ("peak_replicas", self.peak_replicas, 0.1, float(MAX_REPLICAS))):
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"autoscale {self.workload}: {name} must be a number in {low:g}..{high:g}, not {value!r}")
        if 0 < self.stride_s < MIN_STRIDE_S:
            raise ValueError(f"autoscale {self.workload}: stride_s must be 0 (60 s) or at least {MIN_STRIDE_S:g}, not {self.stride_s!r}")
        if not self.series or len(self.series) > MAX_LABEL or not self.series.isprintable():
            raise ValueError(f"autoscale {self.workload}: a demand series is required, named in at most {MAX_LABEL} printable characters")
        if self.values:
            sr.check_samples(self.series, self.values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Book:
    """Autoscale specs in the store, one document per workload."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, spec: AutoscaleSpec) -> None:
        with self.store.tx() as t:
            t.put(f"autoscalers/{spec.workload}", spec.to_dict())

    def drop(self, workload: str) -> bool:
        with self.store.tx() as t:
            found = t.get(f"autoscalers/{workload}") is not None
            t.delete(f"autoscalers/{workload}")
        return found

    def all(self) -> list[AutoscaleSpec]:
        """Every stored spec; one that no longer reads (written before a bound existed) is logged and left out."""
        with self.store.tx() as t:
            rows = t.scan("autoscalers/")
        out = []
        for key, d in rows:
            try:
                out.append(AutoscaleSpec(**{**d, "values": tuple(d.get("values", ()))}))
            except (TypeError, ValueError) as exc:
                log.warning("%s: stored autoscale spec left out: %s", key, exc)
        return out
