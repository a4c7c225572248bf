"""Sealing and opening packets for one node: header, keyring (AEAD) and replay windows.

The order of checks on receipt is chosen so that cheap rejections come first and no
unauthenticated packet can change any state: parse the header, refuse a stale stamp,
authenticate and decrypt, decode, and only then record the stamp as seen.
"""

from __future__ import annotations

from gossip import keyring as keyrings
from gossip import wire
from gossip.messages import Message
from gossip.replays import ReplayWindows
from gossip.wire import DropReason, WireError


class Envelopes:
    """Stamps outgoing bodies with (epoch, counter) and checks incoming ones."""

    __slots__ = ("sender", "epoch", "keyring", "_counter", "_windows", "overhead")

    def __init__(self, sender: str, epoch: int, keyring: keyrings.Keyring | None) -> None:
        self.sender = sender
        self.epoch = epoch
        """Grows across restarts of this node, so packets of a previous life are stale."""
        self.keyring = keyring
        """Shared with the driver: rotating keys on it takes effect on the next packet."""
        self._counter = 0
        self._windows = ReplayWindows()
        self.overhead = wire.header_size(sender) + (keyrings.OVERHEAD if keyring else 0)
        """Bytes a sealed packet adds to its body."""

    def seal(self, body: bytes) -> bytes:
        self._counter += 1
        header = wire.pack_header(self.sender, self.epoch, self._counter, self.keyring is not None)
        if self.keyring is None:
            return header + body
        return header + self.keyring.seal(body, header)

    def open(self, data: bytes) -> tuple[str, list[Message]]:
        """The authenticated sender and its messages; raises WireError."""
        env = wire.unpack_envelope(data)
        if self.keyring is not None and not env.encrypted:
            raise WireError(DropReason.UNENCRYPTED, "plaintext packet but encryption is required")
        if self.keyring is None and env.encrypted:
            raise WireError(DropReason.FORGED, "encrypted packet but we hold no keyring")
        if not self._windows.fresh(env.sender, env.epoch, env.counter):
            raise WireError(DropReason.REPLAYED, f"stamp {env.epoch}/{env.counter} already seen")
        body = env.body
        if self.keyring is not None:
            opened = self.keyring.open(body, env.header)
            if opened is None:
                raise WireError(DropReason.FORGED, "no installed key authenticates it")
            body = opened
        messages = wire.decode(body)
        self._windows.accept(env.sender, env.epoch, env.counter)
        return env.sender, messages
