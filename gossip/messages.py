"""Gossip messages: one dataclass per wire type, and the type numbers.

Messages are values (compared and hashed by their fields) that nothing mutates, but they
are not frozen: a frozen dataclass sets each field through ``object.__setattr__`` and
takes ~3x as long to build, and a node builds one per message it receives (10,000
simulated nodes under loss build billions).

A packet or stream frame carries a sequence of these (a compound packet). Every
message names its subject explicitly; the sender comes from the authenticated envelope
header (``wire``), never from the socket address.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar


class MsgType(IntEnum):
    """Wire type numbers. ONLY APPEND TO THIS LIST: old peers must keep understanding it."""

    PING = 1
    INDIRECT_PING = 2
    ACK = 3
    NACK = 4
    ALIVE = 5
    SUSPECT = 6
    DEAD = 7
    RECORD = 8
    DIGEST_REQUEST = 9
    DIGEST_REPLY = 10
    PUSH_PULL = 11
    DELTA = 12


@dataclass(slots=True, unsafe_hash=True)
class Ping:
    """Direct probe; ``target`` lets a node reached at a reused address ignore a probe meant for another."""

    TYPE: ClassVar[MsgType] = MsgType.PING
    seq: int
    target: str


@dataclass(slots=True, unsafe_hash=True)
class IndirectPing:
    """Ask the receiver to probe ``target`` for us and ack (or nack, Lifeguard) back."""

    TYPE: ClassVar[MsgType] = MsgType.INDIRECT_PING
    seq: int
    target: str


@dataclass(slots=True, unsafe_hash=True)
class Ack:
    TYPE: ClassVar[MsgType] = MsgType.ACK
    seq: int


@dataclass(slots=True, unsafe_hash=True)
class Nack:
    """An indirect prober could not reach the target: proof that we ourselves are heard (Lifeguard)."""

    TYPE: ClassVar[MsgType] = MsgType.NACK
    seq: int


@dataclass(slots=True, unsafe_hash=True)
class Alive:
    TYPE: ClassVar[MsgType] = MsgType.ALIVE
    node: str
    incarnation: int


@dataclass(slots=True, unsafe_hash=True)
class Suspect:
    TYPE: ClassVar[MsgType] = MsgType.SUSPECT
    node: str
    incarnation: int
    accuser: str


@dataclass(slots=True, unsafe_hash=True)
class Dead:
    """``accuser == node`` means the node left gracefully."""

    TYPE: ClassVar[MsgType] = MsgType.DEAD
    node: str
    incarnation: int
    accuser: str


@dataclass(slots=True, unsafe_hash=True)
class Record:
    """One versioned record of ``owner``; ``value`` is any msgpack value, ``None`` a tombstone."""

    TYPE: ClassVar[MsgType] = MsgType.RECORD
    owner: str
    key: str
    version: int
    value: Any


@dataclass(slots=True, unsafe_hash=True)
class DigestRequest:
    """Anti-entropy leg 1: a Bloom digest of every entry the sender holds."""

    TYPE: ClassVar[MsgType] = MsgType.DIGEST_REQUEST
    salt: int
    bloom: bytes


@dataclass(slots=True, unsafe_hash=True)
class DigestReply:
    """Leg 2: the responder's digest (same salt); its frame also carries what leg 1 lacked."""

    TYPE: ClassVar[MsgType] = MsgType.DIGEST_REPLY
    salt: int
    bloom: bytes


@dataclass(slots=True, unsafe_hash=True)
class PushPull:
    """Baseline full-state exchange (memberlist style): the frame carries every member and record."""

    TYPE: ClassVar[MsgType] = MsgType.PUSH_PULL
    reply: bool


@dataclass(slots=True, unsafe_hash=True)
class Delta:
    """Leg 3: marks a frame carrying what the responder's digest did not cover."""

    TYPE: ClassVar[MsgType] = MsgType.DELTA


Message = Ping | IndirectPing | Ack | Nack | Alive | Suspect | Dead | Record | DigestRequest | DigestReply | PushPull | Delta
StateMessage = Alive | Suspect | Dead | Record

MESSAGE_CLASSES: dict[MsgType, type[Message]] = {
    cls.TYPE: cls
    for cls in (Ping, IndirectPing, Ack, Nack, Alive, Suspect, Dead, Record, DigestRequest, DigestReply, PushPull, Delta)
}
