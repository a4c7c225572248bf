"""Failback policies: when replicas failed over from a cluster go back to it (data, parsing and the pure timing rules).

A workload says how it returns home once its home cluster recovers:

- ``never``: failed-over replicas stay where they went;
- ``stable``: once the home has stayed HEALTHY for a stabilization window;
- ``maintenance``: as ``stable``, and only inside a daily maintenance window (UTC, ``HH:MM-HH:MM``);
- ``""`` (the default, and what workloads stored before failback policies load as): the plane's
  ``--return-after`` window (0: never).

Hysteresis keeps a flapping cluster from making work ping-pong: the window restarts at every fall (it counts
the current HEALTHY streak only), and a cluster that fell ``n`` times in the last :data:`FLAP_MEMORY_S`
needs ``window * 2**(n-1)``, at most :data:`MAX_STRETCH` times the window. A cluster that goes down and up
every 20 s therefore never completes a window while it flaps: its workloads move out once and home once.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FLAP_MEMORY_S = 600.0
"""Falls older than this no longer stretch the window (ten minutes: several windows of the default 60 s)."""
MAX_STRETCH = 4
"""A flapping home waits at most this many windows (falls 1, 2, >=3 -> 1x, 2x, 4x)."""
WINDOW_MAX_S = 86_400.0
DEFAULT_WINDOW_S = 60.0
"""The stabilization window when a policy names none (a minute: longer than a node reboot's flap)."""
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class FailbackMode(enum.Enum):
    DEFAULT = ""  # the plane's --return-after
    NEVER = "never"
    STABLE = "stable"
    MAINTENANCE = "maintenance"


@dataclass(frozen=True, slots=True)
class Failback:
    """A workload's failback policy; bad values raise ``ValueError`` with what is allowed."""

    mode: FailbackMode = FailbackMode.DEFAULT
    window_s: float = DEFAULT_WINDOW_S
    """The stabilization window: seconds the home must have stayed HEALTHY (stretched by recent falls)."""
    maintenance: str = ""
    """``HH:MM-HH:MM`` in UTC, daily; may wrap midnight (``22:00-02:00``). Required by ``maintenance`` only."""

    def __post_init__(self) -> None:
        if not 1.0 <= self.window_s <= WINDOW_MAX_S:
            raise ValueError(f"failback window must be 1..{WINDOW_MAX_S:.0f} seconds, got {self.window_s:g}")
        if self.mode is FailbackMode.MAINTENANCE and not self.maintenance:
            raise ValueError("failback 'maintenance' needs a maintenance window HH:MM-HH:MM (UTC)")
        if self.maintenance:
            minutes(self.maintenance)

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode.value, "window_s": self.window_s, "maintenance": self.maintenance}

    @classmethod
    def from_dict(cls, d: Mapping[str, object] | None) -> Failback:
        """The stored form; ``None`` (a workload stored before failback policies) is the default."""
        if not d:
            return cls()
        return cls(mode_of(str(d.get("mode", ""))), float(d.get("window_s", DEFAULT_WINDOW_S)), str(d.get("maintenance", "")))  # type: ignore[arg-type]


def mode_of(text: str) -> FailbackMode:
    try:
        return FailbackMode(text)
    except ValueError:
        raise ValueError(f"unknown failback {text!r}; choose from never, stable, maintenance (or leave empty for the plane's default)") from None


def minutes(window: str) -> tuple[int, int]:
    """``HH:MM-HH:MM`` as (start, end) minutes of the day, UTC."""
    m = _HHMM.match(window.strip())
    if m is None:
        raise ValueError(f"bad maintenance window {window!r}: expected HH:MM-HH:MM (UTC, 24 h), e.g. 02:00-04:00")
    a, b = int(m[1]) * 60 + int(m[2]), int(m[3]) * 60 + int(m[4])
    if a == b:
        raise ValueError(f"bad maintenance window {window!r}: start and end are the same minute")
    return a, b


def in_maintenance(window: str, wall: float) -> bool:
    """Whether the wall-clock time ``wall`` (Unix seconds) falls inside the daily UTC window."""
    a, b = minutes(window)
    now = int(wall // 60) % (24 * 60)
    return a <= now < b if a < b else now >= a or now < b


def required_s(window_s: float, falls: Iterable[float], now: float) -> tuple[float, int]:
    """The stabilization a home needs now, and how many recent falls stretched it."""
    n = sum(1 for t in falls if now - t < FLAP_MEMORY_S)
    return window_s * min(2 ** max(0, n - 1), MAX_STRETCH), n


@dataclass(slots=True)
class Falls:
    """When each cluster last fell (turned PARTITIONED or DOWN), from the verdicts the planner sees every round.

    Kept in memory: a new leader starts with none, and its clusters' HEALTHY streaks start at its take-over.
    """

    at: dict[str, list[float]] = field(default_factory=dict)
    _failed: set[str] = field(default_factory=set)

    def observe(self, now: float, failed: set[str]) -> None:
        for cluster in failed - self._failed:
            self.at[cluster] = [t for t in self.at.get(cluster, []) if now - t < FLAP_MEMORY_S] + [now]
        self._failed = set(failed)

    def of(self, cluster: str) -> list[float]:
        return self.at.get(cluster, [])
