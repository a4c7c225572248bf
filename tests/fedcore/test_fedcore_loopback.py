"""Loopback ports handed to child processes: distinct, free for TCP and UDP, clear of the ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from fedcore.loopback import free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(40, random.Random(5))
    assert len(set(ports)) == 40
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(1024 <= p < low for p in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            tcp.bind(("127.0.0.1", port))
            udp.bind(("127.0.0.1", port))
