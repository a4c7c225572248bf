"""AES-GCM keyring: one primary key seals what we send, every installed key may open.

Rotation without downtime, as memberlist's keyring: install the new key everywhere,
then ``use`` it everywhere, then ``remove`` the old one. Nodes between steps still
understand each other because receivers try every installed key.

``cryptography`` is imported when the first keyring is built: it is among the biggest
imports of an agent (~7 MiB resident with its OpenSSL), and a member without keys never
needs it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = NONCE_BYTES + TAG_BYTES
KEY_SIZES = (16, 24, 32)


class KeyringError(ValueError):
    """The keyring was asked for something impossible; fix the call or the key material."""


class Keyring:
    """Keys in preference order; the first is the primary used for sealing."""

    __slots__ = ("_keys", "_ciphers", "_aesgcm", "_invalid_tag")

    def __init__(self, keys: Iterable[bytes]) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aesgcm = AESGCM
        self._invalid_tag = InvalidTag
        self._keys: list[bytes] = []
        self._ciphers: list[AESGCM] = []
        for key in keys:
            self.install(key)
        if not self._keys:
            raise KeyringError("a keyring needs at least one key")

    @classmethod
    def load(cls, path: str | Path) -> Keyring:
        """Read base64 keys, one per line, primary first (blank lines and # comments skipped)."""
        lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
        try:
            return cls(base64.b64decode(ln, validate=True) for ln in lines if ln and not ln.startswith("#"))
        except ValueError as exc:
            raise KeyringError(f"{path}: not one base64 AES key per line ({exc})") from exc

    @staticmethod
    def generate(size: int = 32) -> bytes:
        """A fresh random key for ``install`` or a key file."""
        return os.urandom(size)

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(self._keys)

    @property
    def primary(self) -> bytes:
        return self._keys[0]

    def install(self, key: bytes) -> None:
        """Accept packets sealed with key (appended after the keys already installed)."""
        if len(key) not in KEY_SIZES:
            raise KeyringError(f"AES keys are 16, 24 or 32 bytes, got {len(key)}")
        if key not in self._keys:
            self._keys.append(key)
            self._ciphers.append(self._aesgcm(key))

    def use(self, key: bytes) -> None:
        """Make an installed key primary: from now on we seal with it."""
        if key not in self._keys:
            raise KeyringError("install the key before using it")
        at = self._keys.index(key)
        self._keys.insert(0, self._keys.pop(at))
        self._ciphers.insert(0, self._ciphers.pop(at))

    def remove(self, key: bytes) -> None:
        """Stop accepting key; the primary cannot be removed (``use`` another first)."""
        if key == self._keys[0]:
            raise KeyringError("cannot remove the primary key; use another key first")
        if key in self._keys:
            at = self._keys.index(key)
            del self._keys[at], self._ciphers[at]

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """nonce || ciphertext || tag, authenticating ``aad`` (the envelope header) too."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._ciphers[0].encrypt(nonce, plaintext, aad)

    def open(self, sealed: bytes, aad: bytes) -> bytes | None:
        """The plaintext, or None if no installed key authenticates it (forged or foreign)."""
        if len(sealed) < OVERHEAD:
            return None
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        invalid = self._invalid_tag
        for cipher in self._ciphers:
            try:
                return cipher.decrypt(nonce, body, aad)
            except invalid:
                continue
        return None
