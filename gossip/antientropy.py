"""What a node's state looks like to anti-entropy: digest entries and state messages.

Pure functions over the member table and record store, used by ``node`` for both the
Bloom-digest exchange and the memberlist-style full-state baseline. Members come before
records in every list, because a receiver accepts records only of owners it knows.
"""

from __future__ import annotations

from collections.abc import Iterator

from gossip import digests
from gossip.members import MemberState, Members
from gossip.messages import Alive, Dead, Record, StateMessage, Suspect
from gossip.records import RecordStore

Ref = tuple[str, str | None]
"""An entry: (member name, None) or (record owner, record key)."""


def member_message(name: str, incarnation: int, state: MemberState, vouched_by: str) -> StateMessage:
    """The message that conveys a member's state; we vouch for suspicions and deaths we hold."""
    if state == MemberState.ALIVE:
        return Alive(name, incarnation)
    if state == MemberState.SUSPECT:
        return Suspect(name, incarnation, vouched_by)
    return Dead(name, incarnation, name if state == MemberState.LEFT else vouched_by)


def digest_entries(me: str, incarnation: int, members: Members, records: RecordStore, salt: int) -> Iterator[tuple[str, Ref]]:
    """The digest key of everything we hold, each with what it stands for; lazily, so an
    exchange never holds every key at once (there are :func:`entry_count` of them)."""
    yield digests.member_key(salt, me, incarnation, MemberState.ALIVE), (me, None)
    for row in members:
        yield digests.member_key(salt, row.name, row.incarnation, row.state), (row.name, None)
    for owner, key, version, _ in records.entries():
        yield digests.record_key(salt, owner, key, version), (owner, key)


def entry_count(members: Members, records: RecordStore) -> int:
    """How many entries :func:`digest_entries` yields."""
    return 1 + len(members) + len(records)


def state_messages(me: str, incarnation: int, members: Members, records: RecordStore, refs: list[Ref]) -> list[StateMessage]:
    """Current messages for the given entries (members first, then records)."""
    head: list[StateMessage] = []
    tail: list[StateMessage] = []
    for name, key in refs:
        if key is not None:
            held = records.get(name, key)
            if held is not None:
                tail.append(Record(name, key, held[0], held[1]))
        elif name == me:
            head.append(Alive(me, incarnation))
        else:
            row = members.get(name)
            if row is not None:
                head.append(member_message(name, row.incarnation, row.state, me))
    return head + tail


def full_state(me: str, incarnation: int, members: Members, records: RecordStore) -> list[StateMessage]:
    """Every member and record we hold: the memberlist-style push-pull payload."""
    out: list[StateMessage] = [Alive(me, incarnation)]
    out.extend(member_message(row.name, row.incarnation, row.state, me) for row in members)
    out.extend(Record(owner, key, version, value) for owner, key, version, value in records.entries())
    return out
