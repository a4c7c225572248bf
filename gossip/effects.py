"""What the sans-IO core asks its driver to do, or tells it happened.

The core returns a list of these from every call; a driver performs ``Send`` and
``SendStream`` and hands the events to subscribers. They are values: safe to keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.members import MemberState
from gossip.records import RecordValue


@dataclass(frozen=True, slots=True)
class Send:
    """Send one datagram (at most the MTU) to a member's address, best effort."""

    addr: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SendStream:
    """Send one frame too large for a datagram over a reliable stream (TCP) to addr."""

    addr: str
    data: bytes


@dataclass(frozen=True, slots=True)
class MemberEvent:
    """A member changed state; ``state`` is None once it is reaped (forgotten)."""

    name: str
    state: MemberState | None
    incarnation: int
    previous: MemberState | None
    """None when the member was unknown before."""


@dataclass(frozen=True, slots=True)
class RecordEvent:
    """A record changed; ``value`` None means it is gone (withdrawn, or reaped with its owner)."""

    owner: str
    key: str
    version: int
    value: RecordValue


Effect = Send | SendStream | MemberEvent | RecordEvent
