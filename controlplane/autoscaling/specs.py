"""What a user asks for with ``fedplane autoscale enable``, and where the control plane keeps it.

Demand comes from a series replayed on the control plane's clock: a packaged real series by
name (its held-out part; its training part is the forecaster's history) or a CSV file of one
value per line. Specs live in the control plane's store under ``autoscalers/<workload>``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from controlplane.autoscaling.controllers import MAX_REPLICAS
from controlplane.store import Store
from fedcore.backends.model import check_name

POLICIES = ("forecast_hpa", "hpa")


@dataclass(frozen=True, slots=True)
class AutoscaleSpec:
    workload: str
    series: str = "alibaba2018-cpu"   # a packaged series name, or a CSV path (one demand value per line)
    stride_s: float = 0.0             # seconds between CSV samples (0: the packaged series' own)
    policy: str = "forecast_hpa"
    min_replicas: int = 1
    max_replicas: int = 100
    startup_s: float = 60.0           # how long a new pod takes to be ready: the forecast's horizon
    peak_replicas: float = 10.0       # the series is scaled so its training p99 needs this many pods at 100%
    speed: float = 1.0                # series seconds replayed per control-plane second
    enabled_at: float = 0.0

    def __post_init__(self) -> None:
        check_name("workload", self.workload)
        if self.policy not in POLICIES:
            raise ValueError(f"autoscale policy {self.policy!r}: choose from {', '.join(POLICIES)}")
        if not 1 <= self.min_replicas <= self.max_replicas <= MAX_REPLICAS:
            raise ValueError(f"autoscale {self.workload}: need 1 <= min ({self.min_replicas}) <= max ({self.max_replicas}) <= {MAX_REPLICAS}")
        if self.startup_s < 0 or self.speed <= 0 or self.peak_replicas <= 0 or self.stride_s < 0:
            raise ValueError(f"autoscale {self.workload}: startup_s >= 0, speed > 0, peak_replicas > 0 and stride_s >= 0 required")
        if not self.series:
            raise ValueError(f"autoscale {self.workload}: a demand series is required")

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
        with self.store.tx() as t:
            return [AutoscaleSpec(**d) for _, d in t.scan("autoscalers/")]
