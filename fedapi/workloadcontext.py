"""The workload context a control plane sends its agents (``fedplane.v1.WorkloadContext``): its bounds' one home.

The learned policy reads, besides the pod and the node, how the pod's workload sits on its fleet
(``PodTypes.cpu_pressure``: the workload's CPU per requested GPU over the fleet's CPU per GPU). An
agent sees one node, so the control plane computes it per cluster and sends it with every
``AgentAck``. Both sides use this module: the sender keeps its values inside the bounds, the
receiver (an agent, from a twin-link map) refuses anything else with a reason, never a traceback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DECIMALS = 2
"""Sent values are rounded to hundredths: the policy's input ramps over 0.95..1.0, five steps of 0.01."""
MAX_CPU_PRESSURE = 100.0
"""Above this a value is garbage: the policy's input saturates at 1.0, so a sender clamps here and a receiver refuses more."""


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """``version`` is when the control plane adopted the value (its clock, ms); 0 means no context (keep yours)."""

    cpu_pressure: float = 0.0
    version: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.cpu_pressure, bool) or not isinstance(self.cpu_pressure, (int, float)):
            raise ValueError(f"cpu_pressure must be a number, got {self.cpu_pressure!r:.40}")
        if not 0.0 <= self.cpu_pressure <= MAX_CPU_PRESSURE:  # exact for any int; false for NaN
            raise ValueError(f"cpu_pressure {self.cpu_pressure!r:.40} is outside [0, {MAX_CPU_PRESSURE:g}]")
        object.__setattr__(self, "cpu_pressure", float(self.cpu_pressure))  # msgpack carries a whole float as an int
        if isinstance(self.version, bool) or not isinstance(self.version, int) or not 0 <= self.version < 2**63:
            raise ValueError(f"version must be an integer in [0, 2^63), got {self.version!r:.40}")

    @property
    def known(self) -> bool:
        return self.version > 0

    def to_wire(self) -> dict[str, Any]:
        return {"cpu_pressure": self.cpu_pressure, "version": self.version}


NONE = WorkloadContext()
"""No context: what an agent scores with until its control plane sends one (and what an old control plane means)."""


def from_wire(value: object) -> WorkloadContext:
    """The context in a twin-link map (``AgentAck.context``); None (an older control plane) is :data:`NONE`.

    Fields this agent does not know are ignored, as protobuf does: a newer control plane may append some.
    Raises ValueError naming what is wrong: a non-map, a NaN, negative or huge pressure, a bad version."""
    if value is None:
        return NONE
    if not isinstance(value, dict):
        raise ValueError(f"expected a WorkloadContext map, got {type(value).__name__}")  # noqa: TRY004 (ValueError is the decode contract)
    return WorkloadContext(value.get("cpu_pressure", 0.0), value.get("version", 0))


def quantize(cpu_pressure: float) -> float:
    """The value a control plane sends for a computed pressure: rounded to :data:`DECIMALS`, within the bounds."""
    if math.isnan(cpu_pressure):
        return 0.0
    return round(min(MAX_CPU_PRESSURE, max(0.0, cpu_pressure)), DECIMALS)
