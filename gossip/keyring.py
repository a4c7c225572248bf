"""XChaCha20-Poly1305 keyring: one primary key seals what we send, every installed key may open.

Rotation without downtime, as memberlist's keyring: install the new key everywhere,
then ``use`` it everywhere, then ``remove`` the old one. Nodes between steps still
understand each other because receivers try every installed key.

Why this cipher, through libsodium (PyNaCl): an edge agent keeps every import resident,
and ``cryptography``'s AES-GCM cost 7.9 MiB of RSS once used where PyNaCl's bindings cost
1.1 MiB (measured side by side in one bare Python with msgpack, numpy and asyncio
loaded). XChaCha20's 192-bit nonce makes random nonces safe for every member sharing a
key (a repeat is a ~2^-96 event after 2^48 packets), so no nonce state has to survive a
restart; 96-bit AES-GCM nonces drawn at random would not leave that margin. It costs
~20 us per seal+open of 500 bytes against AES-NI's ~6 us: noise at gossip's packet rates.

The two libsodium calls go through PyNaCl's cffi module (``nacl._sodium``) rather than
``nacl.bindings``, whose package imports every binding PyNaCl has (box, sign, pwhash, ...):
0.66 against 2.07 MiB resident, measured the same way. It is imported when the first
keyring is built: a member without keys never needs it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NONCE_BYTES = 24
TAG_BYTES = 16
OVERHEAD = NONCE_BYTES + TAG_BYTES
KEY_BYTES = 32


class KeyringError(ValueError):
    """The keyring was asked for something impossible; fix the call or the key material."""


def read_keys(path: str | Path) -> list[bytes]:
    """Base64 keys of KEY_BYTES bytes, one per line, primary first (blank lines and # comments skipped).

    Checked without loading libsodium, so ``fedplane agent --check`` can judge a key file
    cheaply; every problem is a :class:`KeyringError` naming the file and line.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KeyringError(f"{path}: cannot read key file: {reason}") from None
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = base64.b64decode(line, validate=True)
        except ValueError:
            raise KeyringError(f"{path}:{number}: not a base64 key") from None
        if len(key) != KEY_BYTES:
            raise KeyringError(f"{path}:{number}: keys are {KEY_BYTES} bytes, this one is {len(key)}")
        keys.append(key)
    if not keys:
        raise KeyringError(f"{path}: no keys (one base64 key per line, primary first)")
    return keys


class Keyring:
    """Keys in preference order; the first is the primary used for sealing."""

    __slots__ = ("_keys", "_ffi", "_lib")

    def __init__(self, keys: Iterable[bytes]) -> None:
        from nacl._sodium import ffi, lib

        if lib.sodium_init() == -1:  # idempotent; picks the CPU's fastest implementations
            raise KeyringError("libsodium failed to initialise")
        self._ffi: Any = ffi
        self._lib: Any = lib
        self._keys: list[bytes] = []
        for key in keys:
            self.install(key)
        if not self._keys:
            raise KeyringError("a keyring needs at least one key")

    @classmethod
    def load(cls, path: str | Path) -> Keyring:
        """A keyring of the keys in a key file (see :func:`read_keys`)."""
        return cls(read_keys(path))

    @staticmethod
    def generate() -> bytes:
        """A fresh random key for ``install`` or a key file."""
        return os.urandom(KEY_BYTES)

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(self._keys)

    @property
    def primary(self) -> bytes:
        return self._keys[0]

    def install(self, key: bytes) -> None:
        """Accept packets sealed with key (appended after the keys already installed)."""
        if len(key) != KEY_BYTES:
            raise KeyringError(f"keys are {KEY_BYTES} bytes (XChaCha20-Poly1305), got {len(key)}"
                               " (16- and 24-byte AES keys of protocol version 1 no longer apply: generate a new key)")
        if key not in self._keys:
            self._keys.append(key)

    def use(self, key: bytes) -> None:
        """Make an installed key primary: from now on we seal with it."""
        if key not in self._keys:
            raise KeyringError("install the key before using it")
        self._keys.insert(0, self._keys.pop(self._keys.index(key)))

    def remove(self, key: bytes) -> None:
        """Stop accepting key; the primary cannot be removed (``use`` another first)."""
        if key == self._keys[0]:
            raise KeyringError("cannot remove the primary key; use another key first")
        if key in self._keys:
            self._keys.remove(key)

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """nonce || ciphertext || tag, authenticating ``aad`` (the envelope header) too."""
        nonce = os.urandom(NONCE_BYTES)
        out = self._ffi.new("unsigned char[]", len(plaintext) + TAG_BYTES)
        self._lib.crypto_aead_xchacha20poly1305_ietf_encrypt(
            out, self._ffi.NULL, plaintext, len(plaintext), aad, len(aad), self._ffi.NULL, nonce, self._keys[0])
        return nonce + self._ffi.buffer(out)[:]

    def open(self, sealed: bytes, aad: bytes) -> bytes | None:
        """The plaintext, or None if no installed key authenticates it (forged or foreign)."""
        if len(sealed) < OVERHEAD:
            return None
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        out = self._ffi.new("unsigned char[]", len(body) - TAG_BYTES)
        for key in self._keys:
            if self._lib.crypto_aead_xchacha20poly1305_ietf_decrypt(
                    out, self._ffi.NULL, self._ffi.NULL, body, len(body), aad, len(aad), nonce, key) == 0:
                return self._ffi.buffer(out)[:]
        return None
