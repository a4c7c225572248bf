"""The member table: who exists, in which SWIM state, at which incarnation.

Pure bookkeeping for ``node``: it keeps a dense list of live peers for O(1) random
choice and a shuffled probe order (memberlist probes round-robin over a shuffled list
and reshuffles on wrap, so each member is probed within a bounded time).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import IntEnum


class MemberState(IntEnum):
    """SWIM states; the values travel on the wire (ONLY APPEND)."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3


LIVE_STATES = (MemberState.ALIVE, MemberState.SUSPECT)


@dataclass(slots=True)
class Member:
    """One row of the table; mutated only by ``Members.set``."""

    name: str
    """The member's identity and its address (``host:port`` over UDP)."""
    incarnation: int
    state: MemberState
    since: float
    """When the state last changed: drives reaping of dead members."""


@dataclass(frozen=True, slots=True)
class MemberView:
    """What callers see of a member: a value, safe to keep."""

    name: str
    incarnation: int
    state: MemberState


class Members:
    """All members but ourselves, with live peers indexed for sampling and probing."""

    __slots__ = ("_rows", "_live", "_live_at", "_probe", "_probe_at")

    def __init__(self) -> None:
        self._rows: dict[str, Member] = {}
        self._live: list[str] = []
        self._live_at: dict[str, int] = {}
        self._probe: list[str] = []
        self._probe_at = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._rows.values())

    def get(self, name: str) -> Member | None:
        return self._rows.get(name)

    def live_count(self) -> int:
        """Alive or suspect peers (not counting ourselves)."""
        return len(self._live)

    def set(self, name: str, incarnation: int, state: MemberState, now: float, rng: random.Random) -> Member:
        """Insert or update a row, keeping the live index and the probe order in step."""
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = Member(name, incarnation, state, now)
            # a newcomer goes to a random place in the probe order, as memberlist does
            self._probe.insert(rng.randint(0, len(self._probe)), name)
        else:
            if row.state != state:
                row.since = now
            row.incarnation, row.state = incarnation, state
        live = state in LIVE_STATES
        if live and name not in self._live_at:
            self._live_at[name] = len(self._live)
            self._live.append(name)
        elif not live and name in self._live_at:
            self._unlive(name)
        return row

    def remove(self, name: str) -> None:
        """Forget a member entirely (reaping); it is skipped lazily in the probe order."""
        if self._rows.pop(name, None) is not None and name in self._live_at:
            self._unlive(name)

    def _unlive(self, name: str) -> None:
        at = self._live_at.pop(name)
        last = self._live.pop()
        if last != name:
            self._live[at] = last
            self._live_at[last] = at

    def sample(self, rng: random.Random, k: int, exclude: str | None = None) -> list[str]:
        """Up to k distinct live peers chosen uniformly, never ``exclude``."""
        live = self._live
        want = k + (1 if exclude is not None and exclude in self._live_at else 0)
        picked = rng.sample(live, want) if want < len(live) else list(live)
        return [name for name in picked if name != exclude][:k]

    def next_probe_target(self, rng: random.Random) -> str | None:
        """The next live peer in the shuffled probe order; reshuffles after a full pass."""
        for _ in range(len(self._probe) + 1):
            if self._probe_at >= len(self._probe):
                self._probe = [n for n in self._probe if n in self._rows]
                rng.shuffle(self._probe)
                self._probe_at = 0
                if not self._probe:
                    return None
            name = self._probe[self._probe_at]
            self._probe_at += 1
            if name in self._live_at:
                return name
        return None

    def views(self) -> list[MemberView]:
        return [MemberView(m.name, m.incarnation, m.state) for m in self._rows.values()]
