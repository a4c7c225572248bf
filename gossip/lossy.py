"""Packet loss in user space: a datagram transport wrapper that drops a seeded share of what is sent.

This machine's kernel has no netem and no iptables, so real-socket tests and drills inject loss
here, on the sending side of each member (both directions of a link lose packets, as each end
wraps its own socket). The deterministic in-memory network (:mod:`fedplane.lab.doubles.memnet`) covers loss at scale.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any


class LossyDatagrams:
    """Stands in for an ``asyncio.DatagramTransport``: ``sendto`` loses each datagram with probability ``loss``."""

    def __init__(self, inner: asyncio.DatagramTransport, loss: float, rng: random.Random) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss!r}")
        self.inner, self.loss, self.rng = inner, loss, rng
        self.sent = self.dropped = 0

    def sendto(self, data: bytes, addr: Any = None) -> None:
        if self.rng.random() < self.loss:
            self.dropped += 1
            return
        self.sent += 1
        self.inner.sendto(data, addr)

    def close(self) -> None:
        self.inner.close()
