"""Planning failback: which failed-over replicas go home this round, and why the others wait (pure).

Each :class:`~controlplane.registry.Home` (replicas failed over from ``home`` to ``away``) is judged by its
workload's :class:`~controlplane.failbacks.Failback` policy; a workload in a group returns only together with
the group: every member's homes ready and no member moving, all in one round. A return is an eviction from the
away cluster, so each unit (a workload, or a group) spends one token of every away cluster it leaves, through the
planner's eviction budget; a unit that finds a bucket empty waits whole. The same rules answer the dry run
(``controlplane migrate --dry-run``), which spends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.failbacks import Falls, FailbackMode, in_maintenance, required_s
from controlplane.journal import Kind
from controlplane.registry import Home, Placement, PlacementState
from controlplane.workloads import Workload


@dataclass(frozen=True, slots=True)
class Move:
    """One return: ``replicas`` of ``workload`` from ``away`` back to ``home`` (the target then runs ``home_total``)."""

    kind: Kind
    workload: str
    away: str
    home: str
    replicas: int
    home_total: int
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pending:
    """A home's failback as the dry run shows it: the moves it makes now, or why it waits."""

    home: Home
    unit: str
    moves: tuple[Move, ...]
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Inputs:
    """What one round of failback planning reads."""

    now: float
    wall: float
    """Unix seconds, for maintenance windows (``now`` is the plane's monotonic clock)."""
    default_s: float
    """The plane's ``--return-after`` (0: never) for workloads without a policy of their own."""
    healthy_since: Mapping[str, float]
    falls: Falls


def readiness(h: Home, w: Workload, x: Inputs) -> tuple[bool, tuple[str, ...]]:
    """Whether ``h`` may return now by its workload's policy, and why (or why not)."""
    f = w.policy.failback
    if f.mode is FailbackMode.NEVER or (f.mode is FailbackMode.DEFAULT and x.default_s <= 0):
        return False, (f"failback of {w.name} is never" + (" (the plane's default, --return-after 0)" if f.mode is FailbackMode.DEFAULT else ""),)
    window = x.default_s if f.mode is FailbackMode.DEFAULT else f.window_s
    since = x.healthy_since.get(h.home)
    if since is None:
        return False, (f"{h.home} is not healthy",)
    need, falls = required_s(window, x.falls.of(h.home), x.now)
    stretched = f" ({falls} falls in 10 min: {need / window:g}x the {window:g}s window)" if need > window else ""
    healthy = x.now - since
    if healthy < need:
        return False, (f"{h.home} healthy for {healthy:.0f}s of the {need:.0f}s needed{stretched}",)
    why = (f"{h.home} healthy for {healthy:.0f}s (>= {need:.0f}s{stretched})",)
    if f.mode is FailbackMode.MAINTENANCE:
        if not in_maintenance(f.maintenance, x.wall):
            return False, why + (f"outside the maintenance window {f.maintenance} UTC",)
        why += (f"inside the maintenance window {f.maintenance} UTC",)
    return True, why


def plan(
    homes: Sequence[Home], workloads: Mapping[str, Workload], placements: Sequence[Placement], moving: set[str], x: Inputs,
    tokens: Callable[[set[str]], bool],
) -> list[Pending]:
    """Every home's failback this round; ``tokens(clusters)`` takes one eviction token of each away cluster, all or
    none (the dry run's only looks)."""
    units: dict[str, list[Home]] = {}
    for h in homes:
        w = workloads.get(h.workload)
        if w is not None:
            units.setdefault(f"group {w.policy.group}" if w.policy.group else h.workload, []).append(h)
    placed: dict[tuple[str, str], int] = {}
    for p in placements:
        if p.state is PlacementState.PLACED:
            placed[(p.workload, p.cluster)] = placed.get((p.workload, p.cluster), 0) + p.replicas
    out: list[Pending] = []
    for unit, members in sorted(units.items()):
        judged = [(h, *readiness(h, workloads[h.workload], x)) for h in members]
        busy = sorted({h.workload for h in members} & moving)
        waiting = [f"{h.workload}: {'; '.join(why)}" for h, ok, why in judged if not ok]
        if busy:
            waiting.append(f"{', '.join(busy)} moving now")
        moves = _moves(judged, placed) if not waiting else []
        if moves and not tokens({m.away for m in moves}):
            waiting.append(f"eviction budget of {', '.join(sorted({m.away for m in moves}))} spent: waits for the next token")
            moves = []
        for h, _, why in judged:
            mine = tuple(m for m in moves if m.workload == h.workload and m.home == h.home and m.away == h.away)
            grouped = (f"moves with {unit} ({len(members)} homes)",) if unit.startswith("group ") else ()
            out.append(Pending(h, unit, mine, why + grouped if mine else tuple(waiting) or why))
    return out


def _moves(judged: Sequence[tuple[Home, bool, tuple[str, ...]]], placed: Mapping[tuple[str, str], int]) -> list[Move]:
    """The returns of one ready unit: each home takes back what is still placed on its away cluster."""
    home_totals = dict(placed)
    moves = []
    for h, _, why in judged:
        k = min(h.replicas, placed.get((h.workload, h.away), 0))
        if k:
            home_totals[(h.workload, h.home)] = home_totals.get((h.workload, h.home), 0) + k
            moves.append(Move(Kind.RETURN, h.workload, h.away, h.home, k, home_totals[(h.workload, h.home)],
                              why + (f"returning {k} replica(s) of {h.workload} failed over to {h.away}",)))
    return moves
