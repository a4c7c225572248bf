"""One suspicion of one member: a deadline that independent confirmations pull in.

After memberlist's suspicion.go, but pure: the caller passes ``now`` and asks for the
deadline instead of arming a goroutine timer.
"""

from __future__ import annotations

from functools import lru_cache

from gossip import timeouts


@lru_cache(maxsize=256)
def _timeout(confirmations: int, k: int, lo: float, hi: float) -> float:
    """A suspicion's timeout: a handful of values per cluster size (confirmations 0..k), asked for
    at every confirmation of every suspicion."""
    return timeouts.remaining_suspicion_time(confirmations, k, 0.0, lo, hi)


class Suspicion:
    """Counts distinct accusers of a suspect and derives when it must be declared dead."""

    __slots__ = ("started", "k", "lo", "hi", "accusers", "confirmations", "_deadline", "_refused_by")

    def __init__(self, accuser: str, started: float, k: int, lo: float, hi: float) -> None:
        self.started = started
        self.k = k
        """Confirmations expected; with fewer than one the timeout is just ``lo``."""
        self.lo = lo
        self.hi = hi
        self.accusers = {accuser}
        """The first accuser does not count as a confirmation: it started the suspicion."""
        self.confirmations = 0
        self._deadline: float | None = None
        """Worked out once per confirmation count: a node under loss asks for it on every repeat
        of an accusation and for every suspicion it holds whenever its watch runs."""
        self._refused_by: float | None = None
        """When our own probe found no process at the suspect's address: the deadline is no later."""

    def refused(self, by: float) -> None:
        """Our probe was refused by the suspect's host (``GossipConfig.refused_suspicion``): dead by ``by`` at the latest."""
        self._refused_by = by if self._refused_by is None else min(self._refused_by, by)
        self._deadline = None

    def confirm(self, accuser: str) -> bool:
        """Record an independent accuser; True if it was new (worth re-gossiping)."""
        if self.confirmations >= self.k or accuser in self.accusers:
            return False
        self.accusers.add(accuser)
        self.confirmations += 1
        self._deadline = None
        return True

    def deadline(self) -> float:
        """Absolute time at which the suspect is declared dead if nobody refutes."""
        if self._deadline is None:
            if self.k < 1:
                self._deadline = self.started + self.lo
            else:
                self._deadline = self.started + _timeout(self.confirmations, self.k, self.lo, self.hi)
            if self._refused_by is not None:
                self._deadline = min(self._deadline, self._refused_by)
        return self._deadline
