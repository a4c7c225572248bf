"""Resource vectors: what a pod asks for and what a node has.

GPUs are individual devices, each with a milli share (1000 = one whole GPU), so
fractional requests (openb's ``gpu_milli`` < 1000) are allocated per device.
``Resources`` is the scalar sum used for escrow, summaries and ratios; the
per-device view lives in :class:`GpuRequest` and the twin's node table.
"""

from __future__ import annotations

from dataclasses import dataclass

MILLI = 1000
"""Milli units in one CPU core or one whole GPU."""


@dataclass(frozen=True, slots=True)
class Resources:
    """A non-negative resource vector (CPU milli, memory MiB, disk MiB, milli-GPU summed over devices)."""

    cpu_milli: int = 0
    memory_mib: int = 0
    disk_mib: int = 0
    gpu_milli: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.disk_mib + other.disk_mib,
            self.gpu_milli + other.gpu_milli,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli - other.cpu_milli,
            self.memory_mib - other.memory_mib,
            self.disk_mib - other.disk_mib,
            self.gpu_milli - other.gpu_milli,
        )

    def fits_in(self, other: Resources) -> bool:
        """True when every dimension of ``self`` is at most that of ``other``."""
        return (
            self.cpu_milli <= other.cpu_milli
            and self.memory_mib <= other.memory_mib
            and self.disk_mib <= other.disk_mib
            and self.gpu_milli <= other.gpu_milli
        )

    def is_nonnegative(self) -> bool:
        return min(self.cpu_milli, self.memory_mib, self.disk_mib, self.gpu_milli) >= 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        """Compact form for wire encodings (msgpack arrays)."""
        return (self.cpu_milli, self.memory_mib, self.disk_mib, self.gpu_milli)

    @classmethod
    def from_tuple(cls, values: tuple[int, ...] | list[int]) -> Resources:
        if len(values) != 4 or not all(isinstance(v, int) for v in values):
            raise ValueError(f"a resource vector is 4 integers, got {values!r}")
        return cls(*values)


ZERO = Resources()


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """How a pod uses GPUs: ``count`` devices with ``milli_each`` free on each.

    A sharing request is ``count == 1`` with ``milli_each < 1000``; a request for k
    whole GPUs is ``count == k`` with ``milli_each == 1000``.
    """

    count: int = 0
    milli_each: int = 0

    def __post_init__(self) -> None:
        if self.count < 0 or not 0 <= self.milli_each <= MILLI:
            raise ValueError(f"bad GPU request: {self.count} x {self.milli_each} milli")
        if self.count > 1 and self.milli_each != MILLI:
            raise ValueError("a multi-GPU request must ask for whole GPUs")

    @property
    def total_milli(self) -> int:
        return self.count * self.milli_each

    @property
    def is_sharing(self) -> bool:
        return self.count == 1 and 0 < self.milli_each < MILLI
