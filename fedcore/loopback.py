"""Loopback ports for the processes a test, bench or drill starts on this machine."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """Loopback ports free for TCP and UDP now (gossip binds both on one port), below the ephemeral range.

    Below it, no outgoing connection (ours polling the agents, anyone's) can take a port between
    now and the agent's bind, nor while a killed agent waits to be restarted on it.
    """
    rng = rng or random.Random()
    low = _ephemeral_low()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(max(1024, low - 12_000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                tcp.bind(("127.0.0.1", port))
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
