"""Replay protection: per-sender sliding windows over (epoch, counter).

Every sender stamps each packet with its start epoch (a number that grows across
restarts, e.g. wall-clock microseconds at start) and a counter that grows per packet.
A packet is fresh if its epoch is newer, or if its counter is above the highest seen or
inside the window below it and not yet seen (IPsec-style anti-replay). Windows of many
senders are bounded: the least recently heard sender is forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

WINDOW = 128
"""Counters accepted out of order below the highest seen: covers UDP reordering and a
stream frame overtaken by the sender's packets sent while it was in flight."""


class ReplayWindows:
    """Accepts each (sender, epoch, counter) at most once."""

    __slots__ = ("_windows", "_max_senders")

    def __init__(self, max_senders: int = 65536) -> None:
        self._windows: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self._max_senders = max_senders

    def fresh(self, sender: str, epoch: int, counter: int) -> bool:
        """True if the stamp was never accepted; does not record it (see ``accept``)."""
        held = self._windows.get(sender)
        if held is None:
            return True
        h_epoch, top, seen = held
        if epoch != h_epoch:
            return epoch > h_epoch
        if counter > top:
            return True
        back = top - counter
        return back < WINDOW and not (seen >> back) & 1

    def accept(self, sender: str, epoch: int, counter: int) -> None:
        """Record a stamp once the packet authenticated: forged packets never move a window."""
        held = self._windows.get(sender)
        if held is None or epoch > held[0]:
            state = (epoch, counter, 1)
        else:
            _, top, seen = held
            if counter > top:
                shift = counter - top
                seen = ((seen << shift) | 1) & ((1 << WINDOW) - 1) if shift < WINDOW else 1
                state = (epoch, counter, seen)
            else:
                state = (epoch, top, seen | (1 << (top - counter)))
        self._windows[sender] = state
        self._windows.move_to_end(sender)
        if len(self._windows) > self._max_senders:
            self._windows.popitem(last=False)
