"""The server side of the twin link: protobuf servicers served to agents as msgpack maps.

See :mod:`fedapi.agentlink` for the frames. This side converts each request map to the
service's protobuf request (``json_format.ParseDict``: unknown fields and wrong types are
refused with INVALID_ARGUMENT) and each reply to a map of *every* field, defaults
included, so the agent reads fields without knowing proto3's defaults.

With a :class:`Gate` (the control plane's credentials) a connection's first frame must be AUTH with a token the
gate knows, else the server answers one ERROR on call 0 (UNAUTHENTICATED) and hangs up; the principal is bound to
the connection and each call is checked against it (its role, cluster and node: PERMISSION_DENIED).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NoReturn, Protocol

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from fedapi import twincluster_pb2, wireparsing
from fedapi.agentlink import (
    METHODS,
    WATCHES,
    Frame,
    Kind,
    ProtocolError,
    Wire,
    decode,
    encode,
    error_body,
    pack,
    read_frame,
)

log = logging.getLogger(__name__)

_SERVICE = twincluster_pb2.DESCRIPTOR.services_by_name["TwinCluster"]
_TYPES = {m.name: (GetMessageClass(m.input_type), m.name in WATCHES) for m in _SERVICE.methods}


def to_wire(message: Message) -> Wire:
    """Every field of ``message`` by name: scalars and enum numbers as they are, messages as maps."""
    return {field.name: _value(field, getattr(message, field.name)) for field in message.DESCRIPTOR.fields}


def _value(field: FieldDescriptor, value: Any) -> Any:
    kind = field.message_type
    if kind is not None and kind.GetOptions().map_entry:
        nested = kind.fields_by_name["value"].message_type is not None
        return {k: to_wire(v) if nested else v for k, v in value.items()}
    if field.is_repeated:
        return [to_wire(v) for v in value] if kind is not None else list(value)
    return to_wire(value) if kind is not None else value


def from_wire(message: Wire, kind: type[Message]) -> Message:
    """The protobuf message of a request map; raises ``json_format.ParseError`` for unknown fields or bad values
    (:func:`fedapi.wireparsing.parse`: ``ParseDict``'s answer, built by the constructor when exactly typed)."""
    return wireparsing.parse(message, kind)


class Gate(Protocol):
    """Who may use the link: the control plane's :class:`controlplane.auth.Authenticator` fits."""

    async def admit(self, token: str) -> Any:
        """The principal ``token`` speaks for, None when unknown."""
        ...

    def refusal(self, principal: Any, method: str, request: Message) -> str | None:
        """Why ``principal`` may not call ``method`` (a full gRPC path) with ``request``; None when it may."""
        ...


class _Abort(Exception):
    def __init__(self, code: str, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context(Protocol):
    """What a TwinCluster servicer may use of its context; ``grpc.aio.ServicerContext`` fits too."""

    async def abort(self, code: Any, details: str = "") -> NoReturn: ...


class _Context:
    """``abort`` as gRPC's: ends the call with a status code (an enum member or its name) and details."""

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        raise _Abort(getattr(code, "name", str(code)), details)


class _Served:
    """One client connection: its calls run as tasks; replies are written in order per call."""

    def __init__(self, servicer: object, writer: asyncio.StreamWriter, gate: Gate | None = None, principal: Any = None) -> None:
        self.servicer = servicer
        self.writer = writer
        self.gate, self.principal = gate, principal
        self.calls: dict[int, asyncio.Task[None]] = {}
        self._context = _Context()

    def start(self, frame: Frame) -> None:
        if frame.kind is Kind.AUTH:
            return  # the connection's credential is read once, before any call (LinkServer._admit)
        if frame.kind is Kind.CANCEL:
            task = self.calls.pop(frame.call, None)
            if task is not None:
                task.cancel()
            return
        if frame.kind not in (Kind.CALL, Kind.WATCH):
            raise ProtocolError(f"a client may not send {frame.kind.name}")
        task = asyncio.get_running_loop().create_task(self._serve(frame))
        self.calls[frame.call] = task
        task.add_done_callback(lambda _: self.calls.pop(frame.call, None))

    async def _serve(self, frame: Frame) -> None:
        try:
            if frame.tag >= len(METHODS):
                raise _Abort("UNIMPLEMENTED", f"no method number {frame.tag}")
            name = METHODS[frame.tag]
            request_type, streaming = _TYPES[name]
            if streaming != (frame.kind is Kind.WATCH):
                raise _Abort("INVALID_ARGUMENT", f"{name} is {'a watch' if streaming else 'a unary call'}")
            try:
                request = from_wire(decode(frame.body), request_type)
            except (ValueError, json_format.ParseError) as exc:
                raise _Abort("INVALID_ARGUMENT", f"{name}: bad request: {exc}") from exc
            why = self.gate.refusal(self.principal, f"/{_SERVICE.full_name}/{name}", request) if self.gate is not None else None
            if why is not None:
                raise _Abort("PERMISSION_DENIED", why)
            method = getattr(self.servicer, name, None)
            if method is None:  # a servicer of an older schema (a test harness): the client learns it, no traceback
                raise _Abort("UNIMPLEMENTED", f"this server does not serve {name}")
            if streaming:
                async for item in method(request, self._context):
                    self._send(Kind.ITEM, frame.call, encode(to_wire(item)))
                    await self.writer.drain()
                self._send(Kind.END, frame.call)
            else:
                self._send(Kind.REPLY, frame.call, encode(to_wire(await method(request, self._context))))
        except _Abort as exc:
            self._send(Kind.ERROR, frame.call, error_body(exc.code, exc.details))
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away or cancelled: nobody to answer
        except Exception as exc:  # a servicer fault answers this call, never the connection
            log.exception("twin link: call %d failed", frame.call)
            self._send(Kind.ERROR, frame.call, error_body("INTERNAL", repr(exc)[:500]))

    def _send(self, kind: Kind, call: int, body: bytes = b"") -> None:
        if not self.writer.is_closing():
            self.writer.write(pack(kind, call, 0, body))

    def close(self) -> None:
        for task in list(self.calls.values()):
            task.cancel()
        self.writer.close()


class LinkServer:
    """Serves a TwinCluster servicer (the control plane's, or a test harness's) over the link."""

    def __init__(self, servicer: object, host: str = "127.0.0.1", port: int = 0, tls: Any = None, gate: Gate | None = None) -> None:
        """``tls``: an ``ssl.SSLContext`` (:func:`fedapi.agentlink.tls_context`, server side) for mutual TLS;
        ``gate``: who may call (None: anyone who connects)."""
        self.servicer, self.host, self.port, self.tls, self.gate = servicer, host, port, tls, gate
        self._server: asyncio.Server | None = None
        self._open: set[_Served] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._server = await asyncio.start_server(self._connection, self.host, self.port, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop listening, hang up on every client and wait until each connection's handler has ended."""
        if self._server is not None:
            self._server.close()
            for served in list(self._open):
                served.close()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = _Served(self.servicer, writer, self.gate)
        self._open.add(served)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            if self.gate is not None:
                served.principal = await self._admit(reader, writer, self.gate)
                if served.principal is None:
                    return
            while True:
                served.start(await read_frame(reader))
        except ProtocolError as exc:
            log.warning("twin link: dropping %s: %s", writer.get_extra_info("peername"), exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(served)
            self._handlers.discard(handler)
            served.close()

    @staticmethod
    async def _admit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> Any:
        """The principal of the connection's first frame (AUTH), or None once the client was told why not."""
        first = await read_frame(reader)
        token = first.body.decode("ascii", "replace") if first.kind is Kind.AUTH else ""
        try:
            principal = await gate.admit(token) if token else None
        except Exception as exc:  # the credential store cannot answer now: the agent retries
            log.warning("twin link: cannot check a credential: %s", exc)
            writer.write(pack(Kind.ERROR, 0, 0, error_body("UNAVAILABLE", f"cannot check credentials now: {exc}")))
            return None
        if principal is None:
            why = "unknown credential (not issued by this control plane)" if token else "no credential on this connection"
            writer.write(pack(Kind.ERROR, 0, 0, error_body("UNAUTHENTICATED", f"{why}: give the agent backend.credentials "
                                                                              "(a file from 'fedplane controlplane credentials --role agent')")))
        return principal
