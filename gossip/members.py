"""The member table: who exists, in which SWIM state, at which incarnation.

Pure bookkeeping for the node's collaborators (``membership`` changes rows, ``probing``
walks the probe order, ``exchanging`` digests them): it keeps a dense list of live peers
for O(1) random choice and a shuffled probe order (memberlist probes round-robin over a shuffled list
and reshuffles on wrap, so each member is probed within a bounded time).
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator, Sequence
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


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as a table holds it: a value, safe to keep and to share between tables."""

    name: str
    incarnation: int
    state: MemberState


class SharedRows:
    """Member rows that many tables start from and share (:class:`gossip.shared.SharedState`).

    Rows ``0 .. len(names) - 1`` are the snapshot's, member i in row i. Every row a table
    changes to is added once (interned: the same (name, incarnation, state) is one row for
    every table), so a table records a change as a row number, not as a row of its own.
    Under loss each of 10,000 simulated nodes changes thousands of rows (every refuted
    suspicion leaves a new incarnation); as objects per table they took 8.5 GB.
    """

    __slots__ = ("rows", "index", "names", "live", "live_set", "down", "at", "_ids")

    def __init__(self, rows: Sequence[MemberView], at: float) -> None:
        """``rows`` as of time ``at``, one per distinct name."""
        self.rows: list[MemberView] = list(rows)
        self.names: tuple[str, ...] = tuple(row.name for row in self.rows)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        """Member name -> its snapshot row."""
        self.live: tuple[str, ...] = tuple(row.name for row in self.rows if row.state in LIVE_STATES)
        self.live_set = frozenset(self.live)
        self.down: tuple[str, ...] = tuple(row.name for row in self.rows if row.state not in LIVE_STATES)
        self.at = at
        """When the snapshot was taken: when its dead and left members went down, for reaping."""
        self._ids: dict[tuple[str, int, MemberState], int] = {(r.name, r.incarnation, r.state): i for i, r in enumerate(self.rows)}

    def __len__(self) -> int:
        return len(self.names)

    def intern(self, name: str, incarnation: int, state: MemberState) -> int:
        """The row number of this value, added on first use."""
        key = (name, incarnation, state)
        at = self._ids.get(key)
        if at is None:
            at = self._ids[key] = len(self.rows)
            self.rows.append(MemberView(name, incarnation, MemberState(state)))
        return at


def _identity(n: int) -> bytes:
    """Row numbers 0 .. n - 1 as native ints, the bytes of an ``array("i")``: numpy, not a
    Python range (1 ms a table at N = 10,000, 10 s for the whole simulated cluster)."""
    import numpy as np

    return np.arange(n, dtype=np.intc).tobytes()


class Members:
    """All members but ourselves, with live peers indexed for sampling and probing.

    A table may sit on :class:`SharedRows`: it reads the snapshot's rows through until it
    changes them, and then holds, per snapshot member, the number of the (interned) row it
    reads now: 4 bytes a member, allocated on the first change. Members the snapshot does
    not hold, and every member of a table without shared rows, are rows of its own.
    """

    __slots__ = ("_rows", "_shared", "_over", "_skip", "_size", "_since", "_gone", "_live", "_live_at", "_probe", "_probe_at", "_extra_names")

    def __init__(self, shared: SharedRows | None = None, exclude: str | None = None) -> None:
        """``shared`` is read-only here; ``exclude`` (ourselves) is left out of it."""
        self._shared: SharedRows | None = None
        self._rows: dict[str, MemberView] = {}
        """Members outside the shared rows (all of them without shared rows)."""
        self._over: array[int] | None = None
        """Per shared member: the row we read (-1: removed); None while we read the snapshot's."""
        self._skip = -1
        """A snapshot row we never read (ourselves), until ``_over`` records it."""
        self._size = 0
        self._since: dict[str, float] = {}
        """When each dead or left member went down: drives reaping."""
        self._gone: set[str] = set()
        """Members live in the snapshot that are not live here."""
        self._live: list[str] = []
        """Live peers outside the snapshot's live ones (every live peer without shared rows)."""
        self._live_at: dict[str, int] = {}
        self._probe: list[str] | np.ndarray = []
        """Probe order: names, or on shared rows row numbers (snapshot rows, then ``_extra_names``)."""
        self._probe_at = 0
        self._extra_names: list[str] = []
        if shared is not None:
            self.adopt(shared, exclude)

    def adopt(self, shared: SharedRows, exclude: str | None = None) -> None:
        """Read through to ``shared`` from now on, as if built on it (a node adopting a shared
        state keeps its table object, which its collaborators hold). Only an empty table may."""
        if self._size or self._rows or self._shared is not None:
            raise ValueError("only an empty member table may adopt shared rows")
        self._shared = shared
        self._size = len(shared)
        self._since = dict.fromkeys(shared.down, shared.at)
        if exclude is not None and exclude in shared.index:
            self._skip = shared.index[exclude]
            self._size -= 1
            self._since.pop(exclude, None)
            if exclude in shared.live_set:
                self._gone.add(exclude)

    def __len__(self) -> int:
        return self._size

    def cluster_size(self) -> int:
        """Estimated N for timeouts and retransmit limits: every member we know and ourselves, as memberlist."""
        return self._size + 1

    def __iter__(self) -> Iterator[MemberView]:
        shared = self._shared
        if shared is not None:
            rows, over = shared.rows, self._over
            if over is None:
                yield from (row for i, row in enumerate(rows[: len(shared)]) if i != self._skip)
            else:
                yield from (rows[at] for at in over if at >= 0)
        yield from self._rows.values()

    def get(self, name: str) -> MemberView | None:
        shared = self._shared
        if shared is not None:
            i = shared.index.get(name)
            if i is not None:
                over = self._over
                if over is None:
                    return None if i == self._skip else shared.rows[i]
                at = over[i]
                return None if at < 0 else shared.rows[at]
        return self._rows.get(name)

    def down_since(self, name: str) -> float | None:
        """When a dead or left member went down (None for live or unknown members)."""
        return self._since.get(name)

    def live_count(self) -> int:
        """Alive or suspect peers (not counting ourselves)."""
        base = len(self._shared.live) if self._shared is not None else 0
        return base - len(self._gone) + len(self._live)

    def _is_base_live(self, name: str) -> bool:
        return self._shared is not None and name in self._shared.live_set

    def _is_live(self, name: str) -> bool:
        return name in self._live_at or (self._is_base_live(name) and name not in self._gone)

    def set(self, name: str, incarnation: int, state: MemberState, now: float, rng: random.Random) -> MemberView:
        """Insert or update a row, keeping the live index and the probe order in step."""
        previous = self.get(name)
        shared = self._shared
        i = shared.index.get(name) if shared is not None else None
        if shared is not None and i is not None:
            at = shared.intern(name, incarnation, state)
            self._writable()[i] = at
            row = shared.rows[at]
        else:
            row = self._rows[name] = MemberView(name, incarnation, state)
            if previous is None and shared is None:  # a newcomer goes to a random place in the probe order, as memberlist does
                self._probe.insert(rng.randint(0, len(self._probe)), name)  # type: ignore[union-attr]
        if previous is None:
            self._size += 1
        if state in LIVE_STATES:
            self._since.pop(name, None)
        elif previous is None or previous.state != state:
            self._since[name] = now
        self._set_live(name, state in LIVE_STATES)
        return row

    def _writable(self) -> array[int]:
        """Our row numbers, made on the first change (the snapshot's, ourselves removed)."""
        if self._over is None:
            assert self._shared is not None
            self._over = array("i", bytes(0))
            self._over.frombytes(_identity(len(self._shared)))
            if self._skip >= 0:
                self._over[self._skip] = -1
        return self._over

    def remove(self, name: str) -> None:
        """Forget a member entirely (reaping); it is skipped lazily in the probe order."""
        if self.get(name) is None:
            return
        self._set_live(name, False)
        shared = self._shared
        i = shared.index.get(name) if shared is not None else None
        if i is not None:
            self._writable()[i] = -1
        else:
            del self._rows[name]
        self._since.pop(name, None)
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
        if self._shared is not None and self._shared.live:
            return self._sample_over_base(rng, k, exclude)
        live = self._live
        want = k + (1 if exclude is not None and exclude in self._live_at else 0)
        picked = rng.sample(live, want) if want < len(live) else list(live)
        return [name for name in picked if name != exclude][:k]

    def _sample_over_base(self, rng: random.Random, k: int, exclude: str | None) -> list[str]:
        """Draw slots of the snapshot's live tuple and our own live list, skipping the gone ones."""
        assert self._shared is not None
        base, extra, gone = self._shared.live, self._live, self._gone
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
        for _ in range(len(self._probe) + self._size + 1):
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
        if self._shared is None:
            self._probe = [n for n in self._probe if n in self._rows]
            rng.shuffle(self._probe)
            return
        # on shared rows: a permutation of row numbers (4 bytes each, not a list of names);
        # members new since the snapshot join the order at the next pass. numpy loads only
        # here: importing the package (an agent's config does) stays light
        import numpy as np

        self._extra_names = list(self._rows)
        count = len(self._shared) + len(self._extra_names)
        self._probe = np.random.default_rng(rng.getrandbits(64)).permutation(count).astype(np.int32)

    def _nth(self, i: int) -> str | None:
        assert self._shared is not None
        names = self._shared.names
        return names[i] if i < len(names) else self._extra_names[i - len(names)]

    def changed(self) -> np.ndarray:
        """Snapshot rows this table no longer reads (changed or removed here, or ourselves)."""
        import numpy as np

        if self._shared is None:
            return np.zeros(0, dtype=np.int64)
        if self._over is None:
            return np.array([self._skip] if self._skip >= 0 else [], dtype=np.int64)
        over = np.frombuffer(self._over, dtype=np.int32)
        return np.flatnonzero(over != np.arange(len(over), dtype=np.int32))

    def own_rows(self) -> Iterator[MemberView]:
        """Rows not read from the snapshot: all of them without shared rows, else those changed or new."""
        shared = self._shared
        if shared is not None and self._over is not None:
            over = self._over
            yield from (shared.rows[over[i]] for i in self.changed().tolist() if over[i] >= 0)
        yield from self._rows.values()

    def views(self) -> list[MemberView]:
        return list(self)
