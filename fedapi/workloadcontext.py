"""The workload context a control plane sends its agents (``fedplane.v1.WorkloadContext``): its bounds' one home.

The learned policy reads, besides the pod and the node, the workload profile of its fleet
(``PodTypes``: the typical pod shapes FGD's expected fragmentation is computed against, the common
CPU-only slot shapes, the share of GPU request pinned to GPU models, and the CPU pressure: the
workload's CPU per requested GPU over the fleet's CPU per GPU). The twin builds it from the whole
workload and fleet; an agent sees one node, and its artifact's manifest only knows the training
pods. So the control plane builds it per cluster, quantizes it (:meth:`Profile.quantized`, so every
agent of a cluster holds the same bits) and sends it with every ``AgentAck``. Both sides use this
module: the sender keeps its values inside the bounds, the receiver (an agent, from a twin-link map)
refuses anything else with a reason, never a traceback.

On the wire the profile's columns are the artifact manifest's ``pod_types`` encoding
(:func:`federated.runtime.artifacts.types_to_json`, slots flattened to (CPU, memory) pairs), read
back by its :func:`~federated.runtime.artifacts.types_from_json`: one encoding of a profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fedcore.scheduling.fragmentation import PodTypes

DECIMALS = 2
"""Sent pressures are rounded to hundredths: the policy's input ramps over 0.95..1.0, five steps of 0.01."""
MAX_CPU_PRESSURE = 100.0
"""Above this a value is garbage: the policy's input saturates at 1.0, so a sender clamps here and a receiver refuses more."""
WEIGHT_DECIMALS = 2
"""Shape weights are rounded to hundredths (a shape under half a percent of the pods is dropped), then renormalised."""
PINNED_DECIMALS = 3
"""The pinned share is rounded to thousandths: the policy's input saturates at 0.02, twenty steps below it."""
MAX_SHAPES = 64
"""At most this many typical shapes are sent (the heaviest) and accepted: a bounded message and fragment table."""
MAX_SLOTS = 8
"""At most this many CPU-only slot shapes are accepted (fedcore keeps 3)."""
MAX_CPU_MILLI = 1_000_000
"""A pod or slot shape's CPU above a thousand cores is garbage; the agent's fragment table is indexed by CPU milli
(int16), so this bound also keeps it within 2 MiB."""
MAX_MEMORY_MIB = 2**40
MAX_DEVICES = 64
"""A shape asking for more GPU devices than any node holds is garbage."""
LEARNED = "learned"
SCORERS = (LEARNED, "fgd", "bestfit")
"""The scorer families a cluster's agents may be told to place with: the policy model, or fedcore's FGD or BestFit
profile on their own node (the candidates of the control plane's lookahead selection); any other name is refused."""


def _int(value: object, name: str, high: int, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r:.40}")
    return value


def _share(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:  # false for NaN
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r:.40}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Profile:
    """A cluster's workload profile as sent: ``PodTypes`` without its CPU pressure (the context carries that).

    ``shapes`` are (CPU milli, GPU milli per device, devices, weight), weights summing to 1 and at
    least one GPU shape (a workload without GPU request has no profile: agents keep their artifact's);
    ``slots`` (CPU milli, memory MiB); ``pinned`` a share. Construction validates all of it."""

    shapes: tuple[tuple[int, int, int, float], ...]
    slots: tuple[tuple[int, int], ...] = ()
    pinned: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.shapes, tuple) or not 0 < len(self.shapes) <= MAX_SHAPES:
            raise ValueError(f"a profile needs 1 to {MAX_SHAPES} shapes, got {len(self.shapes) if isinstance(self.shapes, tuple) else self.shapes!r:.40}")
        if not isinstance(self.slots, tuple) or len(self.slots) > MAX_SLOTS:
            raise ValueError(f"a profile holds at most {MAX_SLOTS} slot shapes, got {len(self.slots) if isinstance(self.slots, tuple) else self.slots!r:.40}")
        for cpu, milli, count, weight in self.shapes:
            _int(cpu, "shape cpu", MAX_CPU_MILLI)
            _int(milli, "shape gpu milli", 1000)
            _int(count, "shape gpu count", MAX_DEVICES)
            if (milli == 0) != (count == 0):
                raise ValueError(f"shape ({cpu}, {milli}, {count}): GPU milli and device count must be both 0 or both positive")
            if _share(weight, "shape weight") == 0.0:
                raise ValueError(f"shape ({cpu}, {milli}, {count}) has weight 0")
        if len({s[:3] for s in self.shapes}) != len(self.shapes):
            raise ValueError("a profile lists a shape twice")
        if not any(count for _, _, count, _ in self.shapes):
            raise ValueError("a profile needs a GPU shape (without one, agents keep their artifact's)")
        total = math.fsum(s[3] for s in self.shapes)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"shape weights must sum to 1, got {total!r:.40}")
        for cpu, memory in self.slots:
            _int(cpu, "slot cpu", MAX_CPU_MILLI)
            _int(memory, "slot memory", MAX_MEMORY_MIB)
        object.__setattr__(self, "shapes", tuple((c, m, n, float(w)) for c, m, n, w in self.shapes))
        object.__setattr__(self, "pinned", _share(self.pinned, "pinned"))

    @classmethod
    def quantized(cls, types: PodTypes) -> Profile | None:
        """What a control plane sends for a computed profile; None when it requests no GPU (keep the artifact's).

        The rule (all agents of a cluster then hold the same bits, and the profile moves only when
        the workload does): the :data:`MAX_SHAPES` heaviest shapes within the bounds, weights rounded
        to :data:`WEIGHT_DECIMALS` (a shape rounding to 0 is dropped) and renormalised, in
        ``PodTypes``' order; slots within the bounds; pinned rounded to :data:`PINNED_DECIMALS`."""
        shapes = []
        for i in np.argsort(-types.weight, kind="stable").tolist():
            weight = round(float(types.weight[i]), WEIGHT_DECIMALS)
            cpu, milli, count = int(types.cpu[i]), int(types.milli[i]), int(types.count[i])
            if weight > 0 and cpu <= MAX_CPU_MILLI and count <= MAX_DEVICES and len(shapes) < MAX_SHAPES:
                shapes.append((cpu, milli, count, weight))
        if not any(count for _, _, count, _ in shapes):
            return None
        total = math.fsum(w for *_, w in shapes)
        slots = tuple((c, m) for c, m in types.slots.tolist() if c <= MAX_CPU_MILLI and m <= MAX_MEMORY_MIB)[:MAX_SLOTS]
        pinned = round(min(1.0, max(0.0, types.pinned)), PINNED_DECIMALS)
        return cls(tuple((c, m, n, w / total) for c, m, n, w in shapes), slots, pinned)

    def to_wire(self) -> dict[str, Any]:
        """The manifest's ``pod_types`` columns (slots flattened), as ``fedplane.v1.PodTypes`` carries them."""
        return {
            "cpu": [s[0] for s in self.shapes], "milli": [s[1] for s in self.shapes], "count": [s[2] for s in self.shapes],
            "weight": [s[3] for s in self.shapes], "slots": [v for slot in self.slots for v in slot], "pinned": self.pinned,
        }

    def types(self, cpu_pressure: float) -> PodTypes:
        """The ``PodTypes`` an agent scores with, as the twin's ``PodTypes.from_pods`` would hold them."""
        from federated.runtime.artifacts import types_from_json  # only a learned scorer needs it: a best-fit agent stays lean

        return types_from_json({**self.to_wire(), "cpu_pressure": cpu_pressure})


def profile_from_wire(value: object) -> Profile | None:
    """The profile in a context map's ``profile`` (the proto's columns); None when absent or empty (an older plane,
    or a workload without GPU request). Raises ValueError naming what is wrong: ragged columns, a bad value."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"expected a profile map, got {type(value).__name__}")  # noqa: TRY004 (ValueError is the decode contract)
    columns = {k: value.get(k, []) for k in ("cpu", "milli", "count", "weight", "slots")}
    for name, column in columns.items():
        if not isinstance(column, list):
            raise ValueError(f"profile {name} must be a list, got {type(column).__name__}")
        if len(column) > 2 * MAX_SHAPES:
            raise ValueError(f"profile {name} holds {len(column)} values, at most {MAX_SHAPES} shapes are accepted")
    if not columns["cpu"] and not any(columns.values()) and not value.get("pinned"):
        return None
    lengths = {len(columns[k]) for k in ("cpu", "milli", "count", "weight")}
    if len(lengths) != 1:
        raise ValueError(f"profile columns cpu, milli, count, weight must have one length, got {[len(columns[k]) for k in ('cpu', 'milli', 'count', 'weight')]}")
    if len(columns["slots"]) % 2:
        raise ValueError(f"profile slots must be (cpu, memory) pairs, got {len(columns['slots'])} values")
    slots = columns["slots"]
    return Profile(tuple(zip(columns["cpu"], columns["milli"], columns["count"], columns["weight"])),
                   tuple(zip(slots[::2], slots[1::2])), value.get("pinned", 0.0))


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """``version`` is when the control plane adopted the value (its clock, ms); 0 means no context (keep yours).

    ``profile`` None: score with the artifact's typical shapes (only the CPU pressure is the cluster's).
    ``scorer``: the family every agent of the cluster places with (:data:`SCORERS`); claims compare scores, so
    the cluster switches together. ``max_cpu_milli``/``max_gpus``: the cluster's largest node, BestFit's normaliser
    over the fleet (0: the agent's own node)."""

    cpu_pressure: float = 0.0
    version: int = 0
    profile: Profile | None = None
    scorer: str = LEARNED
    max_cpu_milli: int = 0
    max_gpus: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.cpu_pressure, bool) or not isinstance(self.cpu_pressure, (int, float)):
            raise ValueError(f"cpu_pressure must be a number, got {self.cpu_pressure!r:.40}")
        if not 0.0 <= self.cpu_pressure <= MAX_CPU_PRESSURE:  # exact for any int; false for NaN
            raise ValueError(f"cpu_pressure {self.cpu_pressure!r:.40} is outside [0, {MAX_CPU_PRESSURE:g}]")
        object.__setattr__(self, "cpu_pressure", float(self.cpu_pressure))  # msgpack carries a whole float as an int
        if isinstance(self.version, bool) or not isinstance(self.version, int) or not 0 <= self.version < 2**63:
            raise ValueError(f"version must be an integer in [0, 2^63), got {self.version!r:.40}")
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {self.scorer!r:.40}")
        _int(self.max_cpu_milli, "max_cpu_milli", MAX_CPU_MILLI)
        _int(self.max_gpus, "max_gpus", MAX_DEVICES)

    @property
    def max_spec(self) -> tuple[float, float] | None:
        """BestFit's (CPU milli, GPU milli) normaliser over the cluster's fleet, as ``fedcore.scheduling.scores.max_spec``
        reads it from a fleet-wide table; None when not sent (the agent's own node)."""
        if not self.max_cpu_milli:
            return None
        return float(max(1, self.max_cpu_milli)), float(max(1, self.max_gpus * 1000))

    @property
    def known(self) -> bool:
        return self.version > 0

    def to_wire(self, profile: bool = True) -> dict[str, Any]:
        """The map a twin link carries; ``profile=False`` is an agent's report: the version names the profile and the
        fleet's largest node, and a control plane that predates a field refuses a report carrying it (so the scorer
        goes only when not learned: only a plane that knows the field sends another)."""
        wire: dict[str, Any] = {"cpu_pressure": self.cpu_pressure, "version": self.version}
        if self.scorer != LEARNED:
            wire["scorer"] = self.scorer
        if profile:
            if self.profile is not None:
                wire["profile"] = self.profile.to_wire()
            if self.max_cpu_milli:
                wire["max_cpu_milli"], wire["max_gpus"] = self.max_cpu_milli, self.max_gpus
        return wire

    def types(self, base: PodTypes) -> PodTypes:
        """The ``PodTypes`` to score with: the profile's, else ``base`` (the artifact's), with this CPU pressure."""
        if self.profile is not None:
            return self.profile.types(self.cpu_pressure)
        return replace(base, cpu_pressure=self.cpu_pressure)


NONE = WorkloadContext()
"""No context: what an agent scores with until its control plane sends one (and what an old control plane means)."""


def from_wire(value: object) -> WorkloadContext:
    """The context in a twin-link map (``AgentAck.context``); None (an older control plane) is :data:`NONE`.

    Fields this agent does not know are ignored, as protobuf does: a newer control plane may append some. An
    absent or empty scorer is learned (an older plane). Raises ValueError naming what is wrong: a non-map, a NaN,
    negative or huge pressure, a bad version, profile or fleet size, a scorer family this agent does not know."""
    if value is None:
        return NONE
    if not isinstance(value, dict):
        raise ValueError(f"expected a WorkloadContext map, got {type(value).__name__}")  # noqa: TRY004 (ValueError is the decode contract)
    context = WorkloadContext(value.get("cpu_pressure", 0.0), value.get("version", 0), profile_from_wire(value.get("profile")),
                              _scorer(value.get("scorer")), value.get("max_cpu_milli", 0), value.get("max_gpus", 0))
    if context.scorer == "fgd" and context.profile is None:
        raise ValueError("scorer fgd needs the cluster's workload profile, and none came with it")
    return context


def _scorer(value: object) -> object:
    """An absent or empty name is learned (an older plane, or the proto field's default); anything else is checked."""
    return LEARNED if value is None or value == "" else value


def quantize(cpu_pressure: float) -> float:
    """The value a control plane sends for a computed pressure: rounded to :data:`DECIMALS`, within the bounds."""
    if math.isnan(cpu_pressure):
        return 0.0
    return round(min(MAX_CPU_PRESSURE, max(0.0, cpu_pressure)), DECIMALS)
