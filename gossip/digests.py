"""Bloom-filter digests (pybloom-live) of the entries a node holds, for anti-entropy.

An entry is a string ``salt|r|owner|key|version`` for a record or
``salt|m|name|incarnation|state`` for a member; a peer sends back only entries the digest
does not cover. The digest travels in pybloom's own file format, whose header carries
capacity and error rate, so both sides hash identically without prior agreement.

Speed and memory: pybloom hashes each key through a Python generator on every add and
lookup. Here each key is hashed once per salt with pybloom's own hash functions and salts,
the digests are joined into one buffer and every bit position is computed from it with
numpy, so an exchange allocates a few arrays rather than a Python int per bit (memoising
those tuples cost an agent 25 MiB of heap under load). Keys arrive as an iterable and are
hashed :data:`CHUNK` at a time, so an exchange's temporaries stay the same size whatever
the store holds (building every key, digest and position at once made each push-pull of
an edge agent a ~1.4 MiB burst of small objects, which pymalloc's arenas kept as RSS).
Capacities are rounded up to a ladder so that peers with similar state build similar
filters.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any, TypeVar

import numpy as np
from bitarray import bitarray
from pybloom_live import BloomFilter
from pybloom_live.pybloom import make_hashfuncs

from gossip.wire import DropReason, WireError

CAPACITY_STEP = 128
"""Capacities are multiples of this: digests of similar states hash alike (cache hits)."""
MIN_ERROR_RATE = 1e-6
"""Below this a peer's digest would ask for absurd numbers of hash slices: refused."""
CHUNK = 256
"""Keys hashed per numpy batch: bounds an exchange's temporaries (a few tens of KiB)."""
_HEADER = struct.Struct(BloomFilter.FILE_FMT.decode())
T = TypeVar("T")


def capacity_for(count: int) -> int:
    return max(CAPACITY_STEP, math.ceil(count / CAPACITY_STEP) * CAPACITY_STEP)


@lru_cache(maxsize=64)
def _salts(num_slices: int, bits_per_slice: int) -> tuple[tuple[Any, ...], np.dtype]:
    """pybloom's salted hash states and digest word type for this geometry (as ``make_hashfuncs`` makes them)."""
    maker, hashfn = make_hashfuncs(num_slices, bits_per_slice)
    cells = dict(zip(maker.__code__.co_freevars, maker.__closure__ or ()))
    fmt: str = cells["fmt"].cell_contents
    return tuple(cells["salts"].cell_contents), np.dtype(fmt[0])


def _offsets(bloom: BloomFilter, keys: Sequence[str]) -> np.ndarray:
    """Bit offsets of every key, one row per key: the positions ``BloomFilter.__contains__`` tests."""
    k, m = bloom.num_slices, bloom.bits_per_slice
    salts, word = _salts(k, m)
    digests = []
    for key in keys:
        data = key.encode()
        for salt in salts:
            h = salt.copy()
            h.update(data)
            digests.append(h.digest())
    words = np.frombuffer(b"".join(digests), dtype=word).reshape(len(keys), -1)[:, :k].astype(np.int64)
    return words % m + np.arange(k, dtype=np.int64) * m


def _chunks(items: Iterable[T]) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, CHUNK)):
        yield chunk


@dataclass(frozen=True, slots=True)
class Hashed:
    """Bit positions of many keys in filters of one geometry, laid out for :func:`build` and
    :func:`missing` to read in bulk: precomputed for keys many filters hold (:mod:`gossip.shared`)."""

    rows: np.ndarray
    """Positions of key i in row i (keys x slices)."""
    columns: np.ndarray
    """The same, slice by slice (slices x keys, contiguous): one gather per slice tests every key."""
    counts: np.ndarray
    """Per bit, how many of the keys set it: a filter of all keys but a few is these counts minus
    theirs, without setting the bits of all the others again."""


def positions(keys: Sequence[str], capacity: int, error_rate: float) -> Hashed:
    """Bit positions of every key in a filter of this capacity and error rate."""
    bloom = BloomFilter(capacity, error_rate)
    chunks = [_offsets(bloom, chunk) for chunk in _chunks(keys)]
    rows = np.concatenate(chunks) if chunks else np.zeros((0, bloom.num_slices), dtype=np.int64)
    counts = np.bincount(rows.reshape(-1), minlength=bloom.num_bits).astype(np.int32)
    return Hashed(rows, np.ascontiguousarray(rows.T), counts)


def build(keys: Iterable[str], count: int, error_rate: float, known: tuple[Hashed, np.ndarray] | None = None) -> bytes:
    """Serialise a filter holding every key (pybloom ``tofile`` format); ``count`` keys set its capacity.

    ``known`` adds keys already hashed for this capacity and error rate: (their positions,
    a mask of which of them we hold).
    """
    bloom = BloomFilter(capacity_for(count), error_rate)
    added = 0
    if known is None:
        bits = np.zeros(bloom.num_bits, dtype=np.bool_)
    else:
        hashed, held = known
        counts = hashed.counts
        absent = np.flatnonzero(~held)
        if len(absent):
            counts = counts.copy()
            np.subtract.at(counts, hashed.rows[absent].reshape(-1), 1)
        bits = counts > 0
        added += len(held) - len(absent)
    for chunk in _chunks(keys):
        bits[_offsets(bloom, chunk).reshape(-1)] = 1
        added += len(chunk)
    bloom.bitarray = bitarray(endian="little")
    bloom.bitarray.frombytes(np.packbits(bits, bitorder="little").tobytes())
    bloom.bitarray = bloom.bitarray[: bloom.num_bits]
    bloom.count = added
    out = io.BytesIO()
    bloom.tofile(out)
    return out.getvalue()


def parse(data: bytes, max_capacity: int) -> BloomFilter:
    """A peer's digest, checked before pybloom sees it; raises WireError."""
    if len(data) < _HEADER.size:
        raise WireError(DropReason.TRUNCATED, "digest shorter than its header")
    error_rate, num_slices, bits_per_slice, capacity, _count = _HEADER.unpack_from(data)
    if not (MIN_ERROR_RATE <= error_rate < 0.5 and 1 <= capacity <= max_capacity):
        raise WireError(DropReason.UNDECODABLE, f"digest capacity {capacity} / error {error_rate} out of range")
    expected = BloomFilter(capacity, error_rate)
    if (num_slices, bits_per_slice) != (expected.num_slices, expected.bits_per_slice):
        raise WireError(DropReason.UNDECODABLE, "digest geometry does not match its capacity and error rate")
    if len(data) - _HEADER.size != math.ceil(expected.num_bits / 8):
        raise WireError(DropReason.TRUNCATED, "digest bit array has the wrong length")
    bloom = BloomFilter.fromfile(io.BytesIO(data))
    bloom.bitarray = bloom.bitarray[: bloom.num_bits]  # fromfile keeps the byte padding
    return bloom


def geometry(bloom: BloomFilter) -> tuple[int, float]:
    """(capacity, error rate): with the salt, what :func:`positions` depend on."""
    return bloom.capacity, bloom.error_rate


def missing(
    bloom: BloomFilter, entries: Iterable[tuple[str, T]], known: tuple[Hashed, np.ndarray, Sequence[T]] | None = None
) -> list[T]:
    """What each (key, item) entry stands for, for the keys the filter certainly does not hold
    (false positives hide a few). ``known`` adds entries already hashed for this filter's
    geometry: (their positions, a mask of which of them we hold, what each stands for)."""
    bits = np.unpackbits(np.frombuffer(bloom.bitarray.tobytes(), dtype=np.uint8), bitorder="little")
    out: list[T] = []
    if known is not None:
        hashed, ours, items = known
        covered = np.ones(len(ours), dtype=np.bool_)
        flags = bits.view(np.bool_)
        for column in hashed.columns:
            covered &= flags[column]
        out.extend(items[i] for i in np.flatnonzero(ours & ~covered).tolist())
    for chunk in _chunks(entries):
        held = bits[_offsets(bloom, [key for key, _ in chunk])].all(axis=1)
        out.extend(chunk[i][1] for i in np.flatnonzero(~held))
    return out


def record_key(salt: int, owner: str, key: str, version: int) -> str:
    return f"{salt}|r|{owner}|{key}|{version}"


def member_key(salt: int, name: str, incarnation: int, state: int) -> str:
    return f"{salt}|m|{name}|{incarnation}|{state}"
