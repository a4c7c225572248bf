"""The member table: who exists, in which SWIM state, at which incarnation.

Pure bookkeeping for ``node``: it keeps a dense list of live peers for O(1) random
choice and a shuffled probe order (memberlist probes round-robin over a shuffled list
and reshuffles on wrap, so each member is probed within a bounded time).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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
    """All members but ourselves, with live peers indexed for sampling and probing.

    A table may sit on a shared ``base``: rows many tables start from (a snapshot a whole
    simulated cluster restores), read through until this table changes them. Changed rows
    are private copies, so the base is never written and costs one copy per process, not
    one per node (10,000 nodes of 10,000 members would not fit otherwise).
    """

    __slots__ = ("_rows", "_base", "_size", "_base_live", "_base_names", "_gone", "_live", "_live_at", "_probe", "_probe_at", "_extra_names")

    def __init__(
        self,
        base: Mapping[str, Member] | None = None,
        base_names: Sequence[str] = (),
        base_live: Sequence[str] = (),
        exclude: str | None = None,
    ) -> None:
        """``base`` is shared and read-only; ``base_names`` and ``base_live`` are its members' and
        its live members' names (shared too); ``exclude`` (ourselves) is left out of it."""
        self._base: Mapping[str, Member] = base or {}
        self._base_names = base_names
        self._rows: dict[str, Member | None] = {}
        """Rows of our own: changed or new ones, and None for a base row we removed."""
        self._size = len(self._base)
        self._base_live = base_live
        """Base members live when we started: sampled in place, minus those in ``_gone``."""
        self._gone: set[str] = set()
        self._live: list[str] = []
        """Live peers outside ``_base_live`` (every live peer when there is no base)."""
        self._live_at: dict[str, int] = {}
        self._probe: list[str] | np.ndarray = []
        """Probe order: names, or on a shared base row numbers (base rows, then ``_extra_names``)."""
        self._probe_at = 0
        self._extra_names: list[str] = []
        if exclude is not None and exclude in self._base:
            self.remove(exclude)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Member]:
        rows = self._rows
        for row in rows.values():
            if row is not None:
                yield row
        for name, row in self._base.items():
            if name not in rows:
                yield row

    def get(self, name: str) -> Member | None:
        """A row to read; change it only through :meth:`set`."""
        rows = self._rows
        if name in rows:
            return rows[name]
        return self._base.get(name)

    def live_count(self) -> int:
        """Alive or suspect peers (not counting ourselves)."""
        return len(self._base_live) - len(self._gone) + len(self._live)

    def _is_base_live(self, name: str) -> bool:
        base = self._base.get(name)
        return base is not None and base.state in LIVE_STATES

    def _is_live(self, name: str) -> bool:
        return name in self._live_at or (self._is_base_live(name) and name not in self._gone)

    def set(self, name: str, incarnation: int, state: MemberState, now: float, rng: random.Random) -> Member:
        """Insert or update a row, keeping the live index and the probe order in step."""
        row = self.get(name)
        if row is None:
            row = self._rows[name] = Member(name, incarnation, state, now)
            self._size += 1
            if not self._base:  # a newcomer goes to a random place in the probe order, as memberlist does
                self._probe.insert(rng.randint(0, len(self._probe)), name)  # type: ignore[union-attr]
        else:
            if name not in self._rows:  # first change to a shared row: make it ours
                row = self._rows[name] = Member(row.name, row.incarnation, row.state, row.since)
            if row.state != state:
                row.since = now
            row.incarnation, row.state = incarnation, state
        self._set_live(name, state in LIVE_STATES)
        return row

    def remove(self, name: str) -> None:
        """Forget a member entirely (reaping); it is skipped lazily in the probe order."""
        if self.get(name) is None:
            return
        self._set_live(name, False)
        if name in self._base:
            self._rows[name] = None
        else:
            del self._rows[name]
        self._size -= 1

    def _set_live(self, name: str, live: bool) -> None:
        if self._is_base_live(name):
            if live:
                self._gone.discard(name)
            else:
                self._gone.add(name)
        elif live and name not in self._live_at:
            self._live_at[name] = len(self._live)
            self._live.append(name)
        elif not live and name in self._live_at:
            self._unlive(name)

    def _unlive(self, name: str) -> None:
        at = self._live_at.pop(name)
        last = self._live.pop()
        if last != name:
            self._live[at] = last
            self._live_at[last] = at

    def sample(self, rng: random.Random, k: int, exclude: str | None = None) -> list[str]:
        """Up to k distinct live peers chosen uniformly, never ``exclude``."""
        if self._base_live:
            return self._sample_over_base(rng, k, exclude)
        live = self._live
        want = k + (1 if exclude is not None and exclude in self._live_at else 0)
        picked = rng.sample(live, want) if want < len(live) else list(live)
        return [name for name in picked if name != exclude][:k]

    def _sample_over_base(self, rng: random.Random, k: int, exclude: str | None) -> list[str]:
        """Draw slots of the base's live tuple and our own live list, skipping the gone ones."""
        base, extra, gone = self._base_live, self._live, self._gone
        candidates = self.live_count() - (1 if exclude is not None and self._is_live(exclude) else 0)
        if k >= candidates or 2 * len(gone) > len(base):  # few left to draw from: list them
            live = [n for n in base if n not in gone] + extra
            picked = rng.sample(live, min(len(live), k + 1))
            return [name for name in picked if name != exclude][:k]
        slots = len(base) + len(extra)
        picked: list[str] = []
        while len(picked) < k:
            i = rng.randrange(slots)
            name = base[i] if i < len(base) else extra[i - len(base)]
            if name != exclude and name not in gone and name not in picked:
                picked.append(name)
        return picked

    def next_probe_target(self, rng: random.Random) -> str | None:
        """The next live peer in the shuffled probe order; reshuffles after a full pass."""
        for _ in range(len(self._probe) + len(self._base) + 1):
            if self._probe_at >= len(self._probe):
                self._reshuffle(rng)
                if not len(self._probe):
                    return None
            at = self._probe[self._probe_at]
            self._probe_at += 1
            name = at if isinstance(at, str) else self._nth(int(at))
            if name is not None and self._is_live(name):
                return name
        return None

    def _reshuffle(self, rng: random.Random) -> None:
        self._probe_at = 0
        if not self._base:
            self._probe = [n for n in self._probe if n in self._rows]
            rng.shuffle(self._probe)
            return
        # on a shared base: a permutation of row numbers (4 bytes each, not a list of names);
        # members new since the base join the order at the next pass. numpy loads only here:
        # importing the package (an agent's config does) stays light
        import numpy as np

        self._extra_names = [n for n, row in self._rows.items() if row is not None and n not in self._base]
        count = len(self._base_names) + len(self._extra_names)
        self._probe = np.random.default_rng(rng.getrandbits(64)).permutation(count).astype(np.int32)

    def _nth(self, i: int) -> str | None:
        names = self._base_names
        return names[i] if i < len(names) else self._extra_names[i - len(names)]

    def own_rows(self) -> Iterator[Member]:
        """Rows this table holds itself: all of them without a base, else those changed or new."""
        return (row for row in self._rows.values() if row is not None)

    def shadowed(self) -> Iterator[str]:
        """Base rows this table no longer reads through to (changed or removed here)."""
        base = self._base
        return (name for name in self._rows if name in base)

    def views(self) -> list[MemberView]:
        return [MemberView(m.name, m.incarnation, m.state) for m in self]
