"""What a node's state looks like to anti-entropy: digest entries and state messages.

Pure functions over the member table and record store, used by ``exchanging`` for both the
Bloom-digest exchange and the memberlist-style full-state baseline. Members come before
records in every list, because a receiver accepts records only of owners it knows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gossip import digests, wire
from gossip.members import MemberState, Members
from gossip.messages import Alive, Dead, PushPull, Record, StateMessage, Suspect
from gossip.records import RecordStore
from gossip.shared import Ref, SharedState


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


def digest_parts(
    me: str, incarnation: int, members: Members, records: RecordStore, shared: SharedState, salt: int, capacity: int, error_rate: float
) -> tuple[digests.Hashed, np.ndarray, Iterator[tuple[str, Ref]]]:
    """The entries of a node on a shared state, split as :func:`digest_entries` would yield them:
    bit positions of every shared row (hashed once per process) with a mask of the rows it still
    reads through to (``shared.refs`` says what each stands for), and the digest keys of
    everything it holds itself."""
    held = _read_through(members, records, shared)
    return shared.positions(salt, capacity, error_rate), held, _own_entries(me, incarnation, members, records, salt)


def _read_through(members: Members, records: RecordStore, shared: SharedState) -> np.ndarray:
    """Which rows of ``shared.refs`` a node still reads from the shared state (a mask)."""
    keep = np.ones(len(shared.refs), dtype=bool)
    keep[members.changed()] = False  # member i is row i of refs
    for owner in records.own_owners():
        span = shared.owner_rows.get(owner)
        if span is not None:
            keep[span[0] : span[1]] = False
    return keep


def _own_entries(me: str, incarnation: int, members: Members, records: RecordStore, salt: int) -> Iterator[tuple[str, Ref]]:
    yield digests.member_key(salt, me, incarnation, MemberState.ALIVE), (me, None)
    for row in members.own_rows():
        yield digests.member_key(salt, row.name, row.incarnation, row.state), (row.name, None)
    for owner, key, version, _ in records.own_entries():
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


def full_state_body_size(me: str, incarnation: int, members: Members, records: RecordStore, shared: SharedState | None) -> int:
    """Bytes of the body of a full-state push-pull frame (``[Alive(me), PushPull, *members, *records]``, as
    :func:`wire.join` builds it), without building it: entries read through to a shared state are
    sized once per process (:meth:`SharedState.message_sizes`), the rest encoded here."""
    head = len(wire.encode(Alive(me, incarnation))) + len(wire.encode(PushPull(False)))  # PushPull(True) is as long
    count = 2 + len(members) + len(records)
    if shared is None:
        body = sum(len(wire.encode(m)) for m in full_state(me, incarnation, members, records)[1:])
        return len(wire.array_header(count)) + head + body
    keep = _read_through(members, records, shared)
    body = int(shared.message_sizes() @ keep)
    table = shared.members
    vouched = shared.vouched_rows()
    for i in vouched[keep[vouched]].tolist():  # sized per node: the message names us
        row = table.rows[i]
        body += len(wire.encode(member_message(row.name, row.incarnation, row.state, me)))
    body += sum(len(wire.encode(member_message(r.name, r.incarnation, r.state, me))) for r in members.own_rows())
    body += sum(len(wire.encode(Record(owner, key, version, value))) for owner, key, version, value in records.own_entries())
    return len(wire.array_header(count)) + head + body
