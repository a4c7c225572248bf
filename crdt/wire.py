"""Compact msgpack form of claim deltas and version vectors, validated on receipt.

A delta is ``[FORMAT, claims, marks, context]`` with each claim a flat array
``[pod, epoch, node, agent, score, lamport, cpu, mem, disk, gpu, flags, seq]``,
each mark ``[pod, epoch, agent, seq]`` and the context ``nil`` or
``[[replica, base, [cloud seq, ...]], ...]``. A one-claim delta is ~100 bytes.
An anti-entropy delta or full state appends the sender's Lamport time,
``[FORMAT, claims, marks, context, lamport]``; it is left out when 0, so gossip
records stay what they were (and an older decoder refuses a full state rather
than lose it).

Decoding is the trust boundary: anything malformed, oversized or internally
inconsistent raises :class:`crdt.errors.InvalidDelta` and nothing else, before
any replica sees it.
"""

from __future__ import annotations

import sys
from typing import Any

import msgpack

from crdt.claims import Claim, ClaimDelta, EpochMark, check_delta
from crdt.dots import VersionVector
from crdt.errors import InvalidDelta

FORMAT = 1
"""Wire format version; a receiver rejects any other."""
MAX_RECORD_BYTES = 64 * 1024
"""Default size limit: a gossip record. Pass a larger ``max_bytes`` for full-state sync."""
CLAIM_FIELDS = 12
MARK_FIELDS = 4


def encode_delta(delta: ClaimDelta) -> bytes:
    claims = [[c.pod, c.epoch, c.node, c.agent, c.score, c.lamport, *c.request, c.flags, c.seq]
              for c in delta.claims]
    marks = [list(m) for m in delta.marks]
    context = None if delta.context is None else _version_rows(delta.context)
    lamport = [delta.lamport] if delta.lamport else []
    return msgpack.packb([FORMAT, claims, marks, context, *lamport], use_bin_type=True)  # type: ignore[no-any-return]


def decode_delta(data: bytes, max_bytes: int = MAX_RECORD_BYTES) -> ClaimDelta:
    """Parse and check a delta; raises :class:`InvalidDelta` on any defect."""
    top = _unpack(data, max_bytes)
    if not isinstance(top, list) or len(top) not in (4, 5) or top[0] != FORMAT or type(top[0]) is not int:
        raise InvalidDelta("not a claims delta (expected [1, claims, marks, context] with an optional lamport after)")
    _, raw_claims, raw_marks, raw_context, *lamport = top
    claims = tuple(_claim(item) for item in _array(raw_claims, "claims"))
    marks = tuple(_mark(item) for item in _array(raw_marks, "marks"))
    context = None if raw_context is None else _version(raw_context)
    delta = ClaimDelta(claims, marks, context, *lamport)
    check_delta(delta)
    return delta


def encode_version(version: VersionVector) -> bytes:
    """A pull request for anti-entropy: "send me what this does not cover"."""
    return msgpack.packb(_version_rows(version), use_bin_type=True)  # type: ignore[no-any-return]


def decode_version(data: bytes, max_bytes: int = MAX_RECORD_BYTES) -> VersionVector:
    return _version(_unpack(data, max_bytes))


def _unpack(data: bytes, max_bytes: int) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidDelta(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise InvalidDelta(f"delta of {len(data)} bytes exceeds the {max_bytes}-byte limit")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as error:  # msgpack raises a zoo of types; all mean the same here
        raise InvalidDelta(f"undecodable delta: {type(error).__name__}: {error}") from error


def _array(value: Any, what: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        shape = "an array" if length is None else f"an array of {length}"
        raise InvalidDelta(f"{what} must be {shape}, got {value!r:.80}")
    return value


def _claim(item: Any) -> Claim:
    f = _array(item, "a claim", CLAIM_FIELDS)
    return Claim(f[0], f[1], _name(f[2]), _name(f[3]), f[4], f[5], (f[6], f[7], f[8], f[9]), f[10], f[11])


def _mark(item: Any) -> EpochMark:
    f = _array(item, "an epoch mark", MARK_FIELDS)
    return EpochMark(f[0], f[1], _name(f[2]), f[3])


def _name(value: Any) -> Any:
    """Node and agent names recur in every record a replica keeps: one string object each.

    Pod names are not interned: each is new, and interning a stream of transient names
    grows the interpreter's interned-string table (a 64K-slot table is 0.9 MiB that never
    shrinks back). Anything else passes through for :func:`crdt.claims.check_delta` to reject."""
    return sys.intern(value) if type(value) is str else value


def _version_rows(version: VersionVector) -> list[list[Any]]:
    return [[r, version.base(r), sorted(version.cloud_of(r))] for r in sorted(version.replicas())]


def _version(value: Any) -> VersionVector:
    version = VersionVector()
    for row in _array(value, "a version vector"):
        replica, base, cloud = _array(row, "a version row", 3)
        if type(replica) is not str or not replica:
            raise InvalidDelta(f"version row names no replica: {replica!r:.80}")
        seqs = _array(cloud, "a version cloud")
        if any(type(s) is not int or not 0 <= s < 2**63 for s in (base, *seqs)):
            raise InvalidDelta(f"version row of {replica!r} holds a bad sequence number")
        if replica in version.replicas():
            raise InvalidDelta(f"version vector lists {replica!r} twice")
        version.merge(VersionVector({replica: base}))
        for seq in seqs:
            version.add((replica, seq))
    return version
