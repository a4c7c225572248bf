"""Records: publishing our own, taking in other members', and reclaiming what a past life published.

The record side of :class:`gossip.node.GossipNode`. We version our records with one
counter (``clock``) that grows with every publish, so the newest version wins wherever it
arrives (:mod:`gossip.records` holds them). Records of a member live and die with it: news
of one is taken only while its owner is alive or suspected here, and ``membership`` drops
them when it reaps the owner. New versions are broadcast through :mod:`gossip.sending` and
reported as ``RecordEvent``; anti-entropy (:mod:`gossip.exchanging`) repairs what gossip missed.
"""

from __future__ import annotations

from collections.abc import Iterable

from gossip import wire
from gossip.effects import RecordEvent
from gossip.members import LIVE_STATES, Members
from gossip.messages import Record
from gossip.records import RecordStore, RecordValue
from gossip.sending import Outbox
from gossip.shared import SharedState


class Publisher:
    """Our record clock and every change to the record store."""

    __slots__ = ("clock", "_name", "_members", "_records", "_outbox")

    def __init__(self, name: str, *, members: Members, records: RecordStore, outbox: Outbox) -> None:
        self.clock = 0
        """Version of our latest published record."""
        self._name = name
        self._members = members
        self._records = records
        self._outbox = outbox

    def restore(self, records: Iterable[tuple[str, str, int, RecordValue]], now: float) -> None:
        """Take records from a snapshot without gossiping them; ours become ours again, so later publishes outbid them."""
        for owner, key, version, value in records:
            if self._records.apply(owner, key, version, value, now):
                self._outbox.emit(RecordEvent(owner, key, version, value))
                if owner == self._name:
                    self.clock = max(self.clock, version)

    def adopt(self, state: SharedState) -> None:
        """Read the records through to a state shared with other in-process nodes."""
        self._records.adopt(state.records, state.record_count)
        self.clock = max([self.clock, *(version for version, _ in state.records.get(self._name, {}).values())])

    def publish(self, key: str, value: RecordValue, now: float) -> None:
        """Publish (or, with None, withdraw) one of our records; raises ValueError if unencodable."""
        if not isinstance(key, str) or len(key.encode()) > wire.MAX_NAME_BYTES:
            raise ValueError(f"record keys are str of at most {wire.MAX_NAME_BYTES} bytes")
        self.clock += 1
        record = Record(self._name, key, self.clock, value)
        try:
            wire.encode(record)
        except (TypeError, ValueError, OverflowError) as exc:
            self.clock -= 1
            raise ValueError(f"record value is not msgpack-encodable: {exc}") from exc
        self._records.apply(self._name, key, self.clock, value, now)
        self._outbox.broadcast((self._name, key), record, now)
        self._outbox.emit(RecordEvent(self._name, key, self.clock, value))

    def handle_record(self, sender: str, msg: Record, now: float) -> None:
        if msg.owner == self._name:
            if msg.version > self.clock:
                self._reclaim(msg.key, msg.version, now)
            elif msg.value is not None and self._records.get(self._name, msg.key) is None:
                self.publish(msg.key, None, now)  # a version that outlived its reaped tombstone: withdraw it again
            return
        row = self._members.get(msg.owner)
        if row is None or row.state not in LIVE_STATES:
            return  # records live and die with their owner
        if self._records.apply(msg.owner, msg.key, msg.version, msg.value, now):
            self._outbox.broadcast((msg.owner, msg.key), msg, now)
            self._outbox.emit(RecordEvent(msg.owner, msg.key, msg.version, msg.value))

    def _reclaim(self, key: str, version: int, now: float) -> None:
        """A past life of ours published newer versions: outbid them with what we hold now."""
        self.clock = version
        held = self._records.get(self._name, key)
        self.publish(key, None if held is None else held[1], now)
