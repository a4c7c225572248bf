"""Opening a connection to the control plane: one channel, both service stubs.

Agents and the CLI use this instead of building channels themselves, so TLS, the
credential (``authorization: Bearer`` metadata on every call) and the keepalive settings
stay the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from fedapi import controlplane_pb2_grpc, twincluster_pb2_grpc
from fedapi.credentials import bearer
from fedapi.tls import TlsFiles, channel_credentials

OPTIONS = [("grpc.keepalive_time_ms", 10_000), ("grpc.max_receive_message_length", 16 * 1024 * 1024)]


@dataclass(slots=True)
class Connection:
    channel: grpc.Channel
    control: controlplane_pb2_grpc.ControlPlaneStub
    twin: twincluster_pb2_grpc.TwinClusterStub

    def close(self) -> None:
        self.channel.close()


def _with_token(details: Any, token: str) -> Any:
    """``details`` (a client call's) with the bearer token added to its metadata."""
    return details._replace(metadata=[*(details.metadata or ()), bearer(token)])


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self.token = token

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(_with_token(details, self.token), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(_with_token(details, self.token), request)


class _AioBearer(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self.token), request)

    async def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self.token), request)


def connect(target: str, tls: TlsFiles | None = None, token: str = "") -> Connection:
    """A blocking channel to ``target`` (host:port) with both stubs, showing ``token`` on every call ("" = none)."""
    channel = (
        grpc.secure_channel(target, channel_credentials(tls), OPTIONS) if tls else grpc.insecure_channel(target, OPTIONS)
    )
    if token:
        channel = grpc.intercept_channel(channel, _Bearer(token))
    control = controlplane_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]
    twin = twincluster_pb2_grpc.TwinClusterStub(channel)  # type: ignore[no-untyped-call]
    return Connection(channel, control, twin)


def connect_aio(target: str, tls: TlsFiles | None = None, token: str = "") -> grpc.aio.Channel:
    """An asyncio channel (agents' event loops); build stubs on it as with :func:`connect`."""
    interceptors = [_AioBearer(token)] if token else None
    if tls:
        return grpc.aio.secure_channel(target, channel_credentials(tls), OPTIONS, interceptors=interceptors)
    return grpc.aio.insecure_channel(target, OPTIONS, interceptors=interceptors)
