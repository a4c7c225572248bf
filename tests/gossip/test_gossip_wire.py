"""The codec and the envelope: round trips, and every kind of bad input refused cleanly."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip import digests, keyring, wire
from gossip.envelopes import Envelopes
from gossip.keyring import Keyring, KeyringError
from gossip.messages import (
    Ack,
    Alive,
    Dead,
    Delta,
    DigestReply,
    DigestRequest,
    IndirectPing,
    Message,
    MsgType,
    Nack,
    Ping,
    PushPull,
    Record,
    Suspect,
)
from gossip.node import GossipNode
from gossip.replays import ReplayWindows
from gossip.wire import DropReason, WireError

KEY_A, KEY_B = bytes(32), bytes(range(32))
names = st.text(max_size=40)
u64 = st.integers(min_value=0, max_value=2**64 - 1)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Ping, u64, names),
    st.builds(IndirectPing, u64, names),
    st.builds(Ack, u64),
    st.builds(Nack, u64),
    st.builds(Alive, names, u64),
    st.builds(Suspect, names, u64, names),
    st.builds(Dead, names, u64, names),
    st.builds(Record, names, names, u64, values),
    st.builds(DigestRequest, u64, st.binary(max_size=64)),
    st.builds(DigestReply, u64, st.binary(max_size=64)),
    st.builds(PushPull, st.booleans()),
    st.just(Delta()),
)


def test_wire_type_numbers_are_stable() -> None:
    """ONLY APPEND: peers of older versions rely on these numbers."""
    assert [(t.name, t.value) for t in MsgType] == [
        ("PING", 1), ("INDIRECT_PING", 2), ("ACK", 3), ("NACK", 4), ("ALIVE", 5), ("SUSPECT", 6),
        ("DEAD", 7), ("RECORD", 8), ("DIGEST_REQUEST", 9), ("DIGEST_REPLY", 10), ("PUSH_PULL", 11), ("DELTA", 12),
    ]  # fmt: skip


@given(st.lists(messages, max_size=8))
def test_messages_round_trip(batch: list[Message]) -> None:
    assert wire.decode(wire.join([wire.encode(m) for m in batch])) == batch


def test_decoded_owner_names_are_one_object_per_name() -> None:
    """A node holds thousands of records from a dozen owners: each decoded owner name is the one shared string.

    Record keys are not interned: they come and go with pods, and interning a stream of them would grow the
    interpreter's interned-string table for good."""
    first, second = (wire.decode(wire.join([wire.encode(Record("edge-07", "claim/pod-" + "x" * 40, v, b"v"))]))[0]
                     for v in (1, 2))
    assert isinstance(first, Record) and isinstance(second, Record)
    assert first.owner is second.owner
    assert first.key == second.key and first.key is not second.key


@settings(max_examples=400)
@given(st.binary(max_size=300))
def test_garbage_body_is_refused_with_wire_error_only(data: bytes) -> None:
    try:
        wire.decode(data)
    except WireError as exc:
        assert isinstance(exc.reason, DropReason)


@settings(max_examples=300)
@given(st.recursive(st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5) | st.binary(max_size=5) | st.booleans(), lambda x: st.lists(x, max_size=5), max_leaves=12))
def test_wellformed_msgpack_of_wrong_shape_is_refused_with_wire_error_only(obj: object) -> None:
    try:
        wire.decode(msgpack.packb(obj))
    except WireError:
        pass


@settings(max_examples=300)
@given(st.binary(max_size=400), st.booleans())
def test_garbage_packet_never_escapes_the_node(data: bytes, encrypted: bool) -> None:
    node = GossipNode("me", now=0.0, rng=random.Random(1), keyring=Keyring([KEY_A]) if encrypted else None)
    effects = node.on_packet("1.2.3.4:5", data, 0.0)
    assert effects == [] or all(type(e).__name__ in {"Send", "SendStream"} for e in effects)
    assert node.metrics.packets_in == 1


def _sealed(sender: str = "peer", keyring: Keyring | None = None, body: list[Message] | None = None) -> tuple[Envelopes, bytes]:
    env = Envelopes(sender, 1, keyring)
    return env, env.seal(wire.join([wire.encode(m) for m in body or [Ping(1, "me")]]))


def _reason(receiver: Envelopes, data: bytes) -> DropReason:
    with pytest.raises(WireError) as info:
        receiver.open(data)
    return info.value.reason


def test_envelope_opens_once_then_refuses_the_replay() -> None:
    receiver = Envelopes("me", 0, Keyring([KEY_A]))
    _, data = _sealed(keyring=Keyring([KEY_A]))
    assert receiver.open(data) == ("peer", [Ping(1, "me")])
    assert _reason(receiver, data) == DropReason.REPLAYED


def test_replay_window_accepts_reordering_but_not_stale_epochs() -> None:
    receiver = Envelopes("me", 0, None)
    sender = Envelopes("peer", 5, None)
    packets = [sender.seal(wire.join([wire.encode(Ack(i))])) for i in range(10)]
    for data in reversed(packets):  # reordered delivery is fine
        receiver.open(data)
    reborn = Envelopes("peer", 6, None)  # a restart: newer epoch, counter from 1 again
    receiver.open(reborn.seal(wire.join([wire.encode(Ack(1))])))
    old = sender.seal(wire.join([wire.encode(Ack(99))]))
    assert _reason(receiver, old) == DropReason.REPLAYED, "packets of a previous life are stale"


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d[:10], DropReason.TRUNCATED),
        (lambda d: d[:-1], DropReason.FORGED),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), DropReason.FORGED),
        (lambda d: d[:5] + bytes([d[5] ^ 1]) + d[6:], DropReason.FORGED),  # header is authenticated
        (lambda d: bytes([9]) + d[1:], DropReason.VERSION),
        (lambda d: d[:1] + bytes([0x80]) + d[2:], DropReason.UNDECODABLE),
    ],
)
def test_tampered_packets_are_refused(mutate, reason: DropReason) -> None:  # type: ignore[no-untyped-def]
    receiver = Envelopes("me", 0, Keyring([KEY_A]))
    _, data = _sealed(keyring=Keyring([KEY_A]))
    assert _reason(receiver, mutate(data)) == reason


def test_wrong_key_plaintext_and_unexpected_encryption_are_refused() -> None:
    assert _reason(Envelopes("me", 0, Keyring([KEY_A])), _sealed(keyring=Keyring([KEY_B]))[1]) == DropReason.FORGED
    assert _reason(Envelopes("me", 0, Keyring([KEY_A])), _sealed(keyring=None)[1]) == DropReason.UNENCRYPTED
    assert _reason(Envelopes("me", 0, None), _sealed(keyring=Keyring([KEY_A]))[1]) == DropReason.FORGED


def test_node_counts_oversized_and_unknown_sender_drops() -> None:
    node = GossipNode("me", now=0.0, rng=random.Random(1))
    node.on_packet("x", b"\x01" * 5000, 0.0)
    _, gossip = _sealed("stranger", body=[Suspect("someone", 1, "stranger"), Ping(7, "me")])
    effects = node.on_packet("x", gossip, 0.0)
    assert node.metrics.dropped[DropReason.OVERSIZED] == 1
    assert node.metrics.dropped[DropReason.UNKNOWN_SENDER] == 1
    assert len(effects) == 1, "a stranger's ping is still answered"
    assert "stranger" not in node.members()


def test_a_version_1_packet_is_dropped_as_a_version_mismatch() -> None:
    """Version 1 sealed with AES-GCM: a v2 node cannot open it and says why rather than calling it forged."""
    receiver = Envelopes("me", 0, Keyring([KEY_A]))
    _, data = _sealed(keyring=Keyring([KEY_A]))
    assert data[0] == wire.PROTOCOL_VERSION == 2
    assert _reason(receiver, bytes([1]) + data[1:]) == DropReason.VERSION


def test_nonces_are_fresh_per_packet_and_the_sealed_body_is_not_the_plaintext() -> None:
    ring = Keyring([KEY_A])
    body = wire.join([wire.encode(Ping(1, "me"))])
    sealed = [ring.seal(body, b"header") for _ in range(200)]
    assert len({s[:keyring.NONCE_BYTES] for s in sealed}) == 200
    assert all(body not in s and len(s) == len(body) + keyring.OVERHEAD for s in sealed)
    assert all(ring.open(s, b"header") == body for s in sealed)
    assert ring.open(sealed[0], b"other header") is None, "the header is authenticated"


def test_sealed_bodies_are_standard_xchacha20_poly1305() -> None:
    """The keyring calls libsodium through PyNaCl's cffi module; PyNaCl's public binding opens what it seals (and
    the other way round), so any libsodium binding interoperates with the wire."""
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_decrypt as decrypt
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt as encrypt

    ring = Keyring([KEY_B])
    for body in (b"", b"x", bytes(range(256)) * 4):
        sealed = ring.seal(body, b"hdr")
        nonce = sealed[:keyring.NONCE_BYTES]
        assert decrypt(sealed[keyring.NONCE_BYTES:], b"hdr", nonce, KEY_B) == body
        assert ring.open(nonce + encrypt(body, b"hdr", nonce, KEY_B), b"hdr") == body


def test_rotation_seals_with_the_primary_and_opens_with_any_installed_key() -> None:
    old, new = Keyring([KEY_A]), Keyring([KEY_A])
    new.install(KEY_B)
    new.use(KEY_B)
    assert new.primary == KEY_B and new.keys == (KEY_B, KEY_A)
    from_new, from_old = new.seal(b"x", b"h"), old.seal(b"y", b"h")
    assert new.open(from_old, b"h") == b"y", "the old key still opens while installed"
    assert old.open(from_new, b"h") is None, "a node without the new key cannot"
    new.remove(KEY_A)
    assert new.open(old.seal(b"z", b"h"), b"h") is None


def test_keyring_rejects_bad_keys_and_protects_the_primary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KeyringError):
        Keyring([b"short"])
    with pytest.raises(KeyringError, match="32 bytes"):
        Keyring([bytes(16)])  # an AES-128 key of protocol version 1
    with pytest.raises(KeyringError):
        Keyring([])
    ring = Keyring([KEY_A, KEY_B])
    with pytest.raises(KeyringError):
        ring.remove(KEY_A)
    with pytest.raises(KeyringError):
        ring.use(bytes([7]) * 16)
    bad = tmp_path / "keys"
    bad.write_text("not base64!\n")
    with pytest.raises(KeyringError, match=str(bad)):
        Keyring.load(bad)
    bad.write_text(base64.b64encode(bytes(24)).decode() + "\n")
    with pytest.raises(KeyringError, match=str(bad)):
        Keyring.load(bad)
    with pytest.raises(KeyringError, match="cannot read"):
        Keyring.load(tmp_path / "missing")


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_garbage_digest_is_refused_with_wire_error_only(data: bytes) -> None:
    try:
        digests.parse(data, 1 << 16)
    except WireError:
        pass


def _uncovered(bloom: object, keys: list[str]) -> list[int]:
    """Indexes of the keys the filter certainly lacks."""
    return digests.missing(bloom, [(key, i) for i, key in enumerate(keys)])  # type: ignore[arg-type]


def test_digest_reports_exactly_the_uncovered_keys_modulo_false_positives() -> None:
    held = [digests.record_key(1, f"n{i}", "k", 3) for i in range(2000)]
    newer = [digests.record_key(1, f"n{i}", "k", 4) for i in range(2000)]
    bloom = digests.parse(digests.build(held, len(held), 0.01), 1 << 20)
    assert _uncovered(bloom, held) == []
    missed = len(newer) - len(_uncovered(bloom, newer))
    assert missed < 0.03 * len(newer), f"{missed} false positives at a 1% rate"
    assert all(key in bloom for key in held), "positions agree with pybloom's own lookup"
    assert bloom.count == len(held)


@pytest.mark.parametrize("capacity,error", [(128, 0.01), (4096, 0.001), (100_000, 1e-5), (128, 0.3)])
def test_digest_positions_match_pybloom_in_every_geometry(capacity: int, error: float) -> None:
    """16- and 32-bit hash words, one or several salts: the bulk positions are pybloom's, bit for bit."""
    from pybloom_live import BloomFilter

    keys = [f"{i}|r|n{i % 7}|c/pod-é{i}|{i * 31}" for i in range(200)]
    reference = BloomFilter(capacity, error)
    for key in keys[:100]:
        reference.add(key)
    assert _uncovered(reference, keys[:100]) == []
    assert _uncovered(reference, keys[100:]) == [i for i, key in enumerate(keys[100:]) if key not in reference]
    if capacity == digests.capacity_for(100):
        assert digests.parse(digests.build(keys[:100], 100, error), 1 << 20).bitarray == reference.bitarray


def test_digests_of_a_generator_equal_digests_of_a_list_across_chunk_edges() -> None:
    """Keys are hashed a chunk at a time: a stream that ends mid-chunk, or on its edge, builds the same filter."""
    for n in (1, digests.CHUNK - 1, digests.CHUNK, digests.CHUNK + 1, 3 * digests.CHUNK + 7):
        keys = [digests.record_key(5, f"n{i % 16}", f"c/pod-{i}", i) for i in range(n)]
        assert digests.build((k for k in keys), n, 0.01) == digests.build(keys, n, 0.01)
        bloom = digests.parse(digests.build(keys[::2], len(keys[::2]), 0.01), 1 << 20)
        found = digests.missing(bloom, ((k, k) for k in keys))
        assert set(keys[1::2]) - set(found) == {k for k in keys[1::2] if k in bloom}, "only false positives hide keys"
        assert not set(found) & set(keys[::2])


def test_building_digests_retains_no_memory() -> None:
    """Positions are computed per exchange, not memoised: salts rotate, so a memo only grew (25 MiB per agent)."""
    import tracemalloc

    digests.build(["warm"], 1, 0.01)
    tracemalloc.start()
    try:
        for salt in range(3):
            keys = [digests.record_key(salt, f"n{i % 16}", f"c/pod-{i}", i) for i in range(20_000)]
            bloom = digests.parse(digests.build(keys, len(keys), 0.01), 1 << 20)
            assert _uncovered(bloom, keys) == []
            del keys, bloom
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert retained < 256 * 1024, f"{retained} bytes kept after three exchanges"


def test_a_digest_exchange_over_a_large_store_holds_a_chunk_at_a_time() -> None:
    """Building and checking a digest of 20,000 streamed keys peaks at tens of KiB over the filter itself,
    not at every key, digest and position at once (which was ~10 MiB here, ~1.4 MiB per agent push-pull)."""
    import tracemalloc

    def stream(salt: int) -> Iterator[str]:
        return (digests.record_key(salt, f"n{i % 16}", f"c/pod-{i}", i) for i in range(20_000))

    theirs = digests.parse(digests.build(stream(1), 20_000, 0.01), 1 << 20)
    filter_bytes = len(theirs.bitarray) // 8
    tracemalloc.start()
    try:
        ours = digests.build(stream(2), 20_000, 0.01)
        lacking = digests.missing(theirs, ((key, None) for key in stream(2)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(ours) > filter_bytes and len(lacking) > 19_000, "salt 2's keys are all news to a salt-1 digest"
    assert peak < 12 * filter_bytes + 512 * 1024, f"peak {peak} bytes for a {filter_bytes}-byte filter"


def test_a_member_loads_nacl_only_with_keys_and_never_cryptography() -> None:
    """A cluster without keys does not pay for the cipher; with keys it pays for PyNaCl (~1.1 MiB), never for
    cryptography (~7.9 MiB, and its own OpenSSL)."""
    import subprocess
    import sys

    probe = "import sys, gossip.udp, fedplane.lab.doubles.memnet; print(sorted(m for m in ('nacl', 'cryptography') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    keyed = ("import sys; from gossip.keyring import Keyring; Keyring([bytes(32)]); "
             "print(sorted(m for m in ('nacl', 'cryptography') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", keyed], capture_output=True, text=True, check=True).stdout.strip() == "['nacl']"
    lean = "import sys; from gossip.keyring import Keyring; Keyring([bytes(32)]); print('nacl.bindings' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", lean], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_replay_windows_hold_full_u64_stamps_and_forget_the_least_recently_heard() -> None:
    windows = ReplayWindows(max_senders=2)
    top = 2**64 - 1
    windows.accept("a", top, top)
    assert not windows.fresh("a", top, top) and windows.fresh("a", top, top - 1)
    windows.accept("a", top, top - 200)  # below the window: stays refused by fresh(), never recorded
    windows.accept("b", 1, 1)
    windows.accept("a", top, top - 5)  # "a" heard again: now the most recent
    windows.accept("c", 1, 1)  # over the bound: "b" is forgotten, not "a"
    assert len(windows) == 2
    assert windows.fresh("b", 1, 1) and not windows.fresh("a", top, top - 5) and not windows.fresh("c", 1, 1)
