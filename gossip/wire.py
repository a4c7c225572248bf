"""The msgpack codec: messages to bytes and back, and the versioned envelope header.

Layout of every packet and stream frame::

    header  = version:u8 flags:u8 epoch:u64 counter:u64 sender_len:u8 sender:utf-8
    body    = msgpack array of messages, each ``[type, field, ...]``
              (sealed as nonce || XChaCha20-Poly1305(body, aad=header) || tag when encrypted)

Versions: 1 sealed with AES-GCM (12-byte nonce); 2 seals with XChaCha20-Poly1305 (24-byte
nonce, see :mod:`gossip.keyring`). A node speaks one version and drops the other's packets
as ``VERSION``, so a cluster moves from 1 to 2 all at once (with new 32-byte keys).

Decoding never trusts the input: anything that is not exactly a known shape raises
``WireError`` with a ``DropReason``, and nothing else escapes.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter
from typing import Any

import msgpack

from gossip.messages import MESSAGE_CLASSES, Message, MsgType

PROTOCOL_VERSION = 2
FLAG_ENCRYPTED = 0x01
MAX_NAME_BYTES = 255
_HEADER = struct.Struct("!BBQQB")
_UINT64 = 1 << 64


class DropReason(StrEnum):
    """Why a packet was dropped; one metrics counter each."""

    TRUNCATED = "truncated"
    OVERSIZED = "oversized"
    UNDECODABLE = "undecodable"
    VERSION = "version"
    FORGED = "forged"
    UNENCRYPTED = "unencrypted"
    REPLAYED = "replayed"
    UNKNOWN_SENDER = "unknown_sender"


class WireError(ValueError):
    """Input that must be dropped: log it with the peer, count it by ``reason``, carry on."""

    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed header and the still-sealed (or plain) body behind it."""

    sender: str
    epoch: int
    counter: int
    encrypted: bool
    header: bytes
    """The raw header bytes: authenticated as the AEAD's associated data."""
    body: bytes


def header_size(sender: str) -> int:
    return _HEADER.size + len(sender.encode())


def pack_header(sender: str, epoch: int, counter: int, encrypted: bool) -> bytes:
    name = sender.encode()
    if len(name) > MAX_NAME_BYTES:
        raise ValueError(f"node names are at most {MAX_NAME_BYTES} bytes of UTF-8")
    flags = FLAG_ENCRYPTED if encrypted else 0
    return _HEADER.pack(PROTOCOL_VERSION, flags, epoch, counter, len(name)) + name


def unpack_envelope(data: bytes) -> Envelope:
    """Split a packet into header fields and body; raises WireError."""
    if len(data) < _HEADER.size:
        raise WireError(DropReason.TRUNCATED, f"{len(data)} bytes is shorter than a header")
    version, flags, epoch, counter, name_len = _HEADER.unpack_from(data)
    if version != PROTOCOL_VERSION:
        raise WireError(DropReason.VERSION, f"protocol version {version}, we speak {PROTOCOL_VERSION}")
    if flags & ~FLAG_ENCRYPTED:
        raise WireError(DropReason.UNDECODABLE, f"unknown header flags {flags:#x}")
    end = _HEADER.size + name_len
    if len(data) < end:
        raise WireError(DropReason.TRUNCATED, "header cut inside the sender name")
    try:
        sender = data[_HEADER.size : end].decode()
    except UnicodeDecodeError as exc:
        raise WireError(DropReason.UNDECODABLE, "sender name is not UTF-8") from exc
    return Envelope(sender, epoch, counter, bool(flags & FLAG_ENCRYPTED), data[:end], data[end:])


_packer = msgpack.Packer(use_bin_type=True)


def encode(message: Message) -> bytes:
    """One message as a msgpack array; raises TypeError/ValueError for unencodable record values."""
    number, fields = _LAYOUTS[type(message)]
    data: bytes = _packer.pack([number, *fields(message)])
    return data


def _layout(cls: type[Message]) -> tuple[int, Callable[[Any], tuple[Any, ...]]]:
    """A class's type number as a plain int (msgpack packs an IntEnum more slowly) and a getter
    of its fields as a tuple: encoding runs for every message a node sends or relays."""
    names = cls.__match_args__
    if not names:
        return int(cls.TYPE), lambda _: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return int(cls.TYPE), lambda m: (one(m),)
    return int(cls.TYPE), attrgetter(*names)


_LAYOUTS = {cls: _layout(cls) for cls in MESSAGE_CLASSES.values()}


def array_header(count: int) -> bytes:
    """The msgpack array header that turns concatenated encoded messages into one body."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def join(encoded: list[bytes]) -> bytes:
    """A body holding already-encoded messages (a compound packet)."""
    return array_header(len(encoded)) + b"".join(encoded)


_ANY = object
"""Field kind of a record value: any msgpack value."""
_FIELDS: dict[MsgType, tuple[type, ...]] = {
    MsgType.PING: (int, str),
    MsgType.INDIRECT_PING: (int, str),
    MsgType.ACK: (int,),
    MsgType.NACK: (int,),
    MsgType.ALIVE: (str, int),
    MsgType.SUSPECT: (str, int, str),
    MsgType.DEAD: (str, int, str),
    MsgType.RECORD: (str, str, int, _ANY),
    MsgType.DIGEST_REQUEST: (int, bytes),
    MsgType.DIGEST_REPLY: (int, bytes),
    MsgType.PUSH_PULL: (bool,),
    MsgType.DELTA: (),
}
assert set(_FIELDS) == set(MsgType) == set(MESSAGE_CLASSES)
_RECORD_KEY = (MsgType.RECORD, 1)
_SPECS: dict[int, tuple[Any, tuple[type, ...], tuple[int, ...]]] = {
    int(t): (MESSAGE_CLASSES[t], kinds,
             tuple(i + 1 for i, kind in enumerate(kinds) if kind is str and (t, i) != _RECORD_KEY))
    for t, kinds in _FIELDS.items()
}
"""Per message type: its class, its field kinds, and where its member names sit in the array (a record's
owner, not its key: keys are transient, and interning a stream of them grows the interpreter's
interned-string table, which never shrinks). The decoder's hot lookup: no enum calls."""


def _fields_ok(kinds: tuple[type, ...], item: list[Any]) -> bool:
    if len(item) != len(kinds) + 1:
        return False
    i = 0
    for kind in kinds:
        i += 1
        if kind is _ANY:
            continue
        value = item[i]
        if type(value) is not kind:  # exact: a bool is not an int here
            return False
        if kind is int:
            if not 0 <= value < _UINT64:
                return False
        elif kind is str and len(value) > MAX_NAME_BYTES:
            return False
    return True


DECODED_CACHE = 4096
"""Distinct messages remembered by their bytes (about 150 bytes each when full)."""
_decoded: dict[bytes, Message] = {}
"""Message bytes -> the message they decoded to, oldest first. Gossip repeats itself: every
member hears each piece of news about retransmit_limit times (20 at N = 10,000), always as
the same bytes, so a repeat costs a dictionary lookup instead of unpacking and checking
again (what a simulated cluster of 10,000 spent most of its time on). Only bytes that
decoded to exactly one valid message are kept, so a hit yields what decoding would; the
message (and a record's value) is then shared: read-only, as every message is."""


def decode(body: bytes) -> list[Message]:
    """Messages of a body; unknown types from newer peers are skipped; raises WireError.

    The body is cut into one byte span per message without building them; a span seen
    before is looked up (:data:`_decoded`), others are decoded and checked. A body that
    does not cut cleanly goes to the full decoder for the precise error.
    """
    try:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(body), 1))
        unpacker.feed(body)
        count = unpacker.read_array_header()
        skip, tell = unpacker.skip, unpacker.tell
        start = tell()
        spans: list[bytes] = []
        for _ in range(count):
            skip()
            end = tell()
            spans.append(body[start:end])
            start = end
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError):
        return _decode_whole(body)
    if start != len(body):
        return _decode_whole(body)  # trailing bytes: the full decoder names them
    cache = _decoded
    out: list[Message] = []
    for span in spans:
        message = cache.get(span)
        if message is None:
            one = _decode_whole(array_header(1) + span)
            if len(one) != 1:
                continue  # a type from a newer peer
            if len(cache) >= DECODED_CACHE:
                del cache[next(iter(cache))]
            message = cache[span] = one[0]
        out.append(message)
    return out


def _decode_whole(body: bytes) -> list[Message]:
    try:
        items = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        cut = isinstance(exc, msgpack.OutOfData) or "incomplete" in str(exc)
        reason = DropReason.TRUNCATED if cut else DropReason.UNDECODABLE
        raise WireError(reason, f"body is not one msgpack value ({type(exc).__name__})") from exc
    except RecursionError as exc:  # defensive: msgpack's C decoder caps nesting itself
        raise WireError(DropReason.UNDECODABLE, "body nests too deep") from exc
    if type(items) is not list:
        raise WireError(DropReason.UNDECODABLE, "body is not an array of messages")
    out: list[Message] = []
    for item in items:
        if type(item) is not list or not item or type(item[0]) is not int:
            raise WireError(DropReason.UNDECODABLE, "message is not [type, field, ...]")
        spec = _SPECS.get(item[0])
        if spec is None:
            continue  # appended by a newer peer: ONLY APPEND keeps the rest readable
        cls, kinds, names = spec
        if not _fields_ok(kinds, item):
            raise WireError(DropReason.UNDECODABLE, f"{cls.__name__} has malformed fields")
        for i in names:  # member names recur in every packet: one string object each
            item[i] = sys.intern(item[i])
        out.append(cls(*item[1:]))
    return out
