"""Opening a connection to the control plane: one channel, both service stubs.

Agents and the CLI use this instead of building channels themselves, so TLS and the
keepalive settings stay the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from fedapi import controlplane_pb2_grpc, twincluster_pb2_grpc
from fedapi.tls import TlsFiles, channel_credentials

OPTIONS = [("grpc.keepalive_time_ms", 10_000), ("grpc.max_receive_message_length", 16 * 1024 * 1024)]


@dataclass(slots=True)
class Connection:
    channel: grpc.Channel
    control: controlplane_pb2_grpc.ControlPlaneStub
    twin: twincluster_pb2_grpc.TwinClusterStub

    def close(self) -> None:
        self.channel.close()


def connect(target: str, tls: TlsFiles | None = None) -> Connection:
    """A blocking channel to ``target`` (host:port) with both stubs."""
    channel = (
        grpc.secure_channel(target, channel_credentials(tls), OPTIONS) if tls else grpc.insecure_channel(target, OPTIONS)
    )
    control = controlplane_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]
    twin = twincluster_pb2_grpc.TwinClusterStub(channel)  # type: ignore[no-untyped-call]
    return Connection(channel, control, twin)


def connect_aio(target: str, tls: TlsFiles | None = None) -> grpc.aio.Channel:
    """An asyncio channel (agents' event loops); build stubs on it as with :func:`connect`."""
    if tls:
        return grpc.aio.secure_channel(target, channel_credentials(tls), OPTIONS)
    return grpc.aio.insecure_channel(target, OPTIONS)
