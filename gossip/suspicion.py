"""One suspicion of one member: a deadline that independent confirmations pull in.

After memberlist's suspicion.go, but pure: the caller passes ``now`` and asks for the
deadline instead of arming a goroutine timer.
"""

from __future__ import annotations

from gossip import timeouts


class Suspicion:
    """Counts distinct accusers of a suspect and derives when it must be declared dead."""

    __slots__ = ("started", "k", "lo", "hi", "accusers", "confirmations")

    def __init__(self, accuser: str, started: float, k: int, lo: float, hi: float) -> None:
        self.started = started
        self.k = k
        """Confirmations expected; with fewer than one the timeout is just ``lo``."""
        self.lo = lo
        self.hi = hi
        self.accusers = {accuser}
        """The first accuser does not count as a confirmation: it started the suspicion."""
        self.confirmations = 0

    def confirm(self, accuser: str) -> bool:
        """Record an independent accuser; True if it was new (worth re-gossiping)."""
        if self.confirmations >= self.k or accuser in self.accusers:
            return False
        self.accusers.add(accuser)
        self.confirmations += 1
        return True

    def deadline(self) -> float:
        """Absolute time at which the suspect is declared dead if nobody refutes."""
        if self.k < 1:
            return self.started + self.lo
        return self.started + timeouts.remaining_suspicion_time(self.confirmations, self.k, 0.0, self.lo, self.hi)
