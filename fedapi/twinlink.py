"""The TwinCluster API over one plain TCP connection: what edge agents speak, without gRPC.

Why a second transport: gRPC's runtime costs an edge agent ~10 MiB of resident memory and
its own poller threads, while an agent needs four calls of one service. The link carries
the *same* protobuf messages as ``fedplane.v1.TwinCluster`` over gRPC (one schema), and the
server side drives the same servicer objects, so the two transports cannot drift apart.

A frame is ``length:u32 | kind:u8 | call:u32 | method-or-code:u8 | body`` (big-endian;
``length`` counts everything after itself). Many calls share a connection; a watch is a
call whose ITEM frames keep coming until END, ERROR or the client's CANCEL. Lengths are
never trusted: a frame over :data:`MAX_FRAME` or of an unknown kind ends the connection,
and every call on it fails with :class:`LinkError`; a call the server cannot serve gets an
ERROR frame (``CODE: details``) and the connection carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NoReturn, Protocol

from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from fedapi import twincluster_pb2

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IBIB")
HEADER_BYTES = _HEADER.size
_PREFIX = 4
MAX_FRAME = 16 * 1024 * 1024
"""The largest frame either side accepts (the gRPC channel's receive limit)."""

_SERVICE = twincluster_pb2.DESCRIPTOR.services_by_name["TwinCluster"]
METHODS: tuple[str, ...] = tuple(m.name for m in _SERVICE.methods)
"""Method numbers on the wire are positions in the service's declaration (append-only in the proto)."""
_TYPES = {m.name: (GetMessageClass(m.input_type), GetMessageClass(m.output_type), m.server_streaming) for m in _SERVICE.methods}

class Kind(IntEnum):
    CALL = 1
    WATCH = 2
    CANCEL = 3
    REPLY = 17
    ITEM = 18
    END = 19
    ERROR = 20


class LinkError(Exception):
    """A call failed: ``code`` is a gRPC status name (UNAVAILABLE, NOT_FOUND, DEADLINE_EXCEEDED...)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


class ProtocolError(ValueError):
    """The peer sent something that is not a frame: the connection cannot be trusted further."""


@dataclass(frozen=True, slots=True)
class Frame:
    kind: Kind
    call: int
    tag: int
    """The method number on requests; unused (0) on replies."""
    body: bytes


def pack(kind: Kind, call: int, tag: int = 0, body: bytes = b"") -> bytes:
    return _HEADER.pack(HEADER_BYTES - _PREFIX + len(body), kind, call, tag) + body


def unpack_header(header: bytes) -> tuple[int, Kind, int, int]:
    """``(body length, kind, call, tag)`` of a frame header; raises :class:`ProtocolError`."""
    length, kind, call, tag = _HEADER.unpack(header)
    if not HEADER_BYTES - _PREFIX <= length <= MAX_FRAME:
        raise ProtocolError(f"frame length {length} outside [{HEADER_BYTES - _PREFIX}, {MAX_FRAME}]")
    try:
        return length - (HEADER_BYTES - _PREFIX), Kind(kind), call, tag
    except ValueError:
        raise ProtocolError(f"unknown frame kind {kind}") from None


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    """The next frame; raises :class:`ProtocolError`, or ``asyncio.IncompleteReadError`` at end of stream."""
    size, kind, call, tag = unpack_header(await reader.readexactly(HEADER_BYTES))
    return Frame(kind, call, tag, await reader.readexactly(size))


def error_body(code: str, details: str) -> bytes:
    return f"{code}: {details}".encode()


def parse_error(body: bytes) -> LinkError:
    code, _, details = body.decode("utf-8", "replace").partition(": ")
    return LinkError(code or "UNKNOWN", details)


# ---------------------------------------------------------------------------------- server


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

    def __init__(self, servicer: object, writer: asyncio.StreamWriter) -> None:
        self.servicer = servicer
        self.writer = writer
        self.calls: dict[int, asyncio.Task[None]] = {}
        self._context = _Context()

    def start(self, frame: Frame) -> None:
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
            request_type, _, streaming = _TYPES[name]
            if streaming != (frame.kind is Kind.WATCH):
                raise _Abort("INVALID_ARGUMENT", f"{name} is {'a watch' if streaming else 'a unary call'}")
            try:
                request = request_type.FromString(frame.body)
            except DecodeError as exc:
                raise _Abort("INVALID_ARGUMENT", f"{name}: undecodable request: {exc}") from exc
            method = getattr(self.servicer, name)
            if streaming:
                async for item in method(request, self._context):
                    self._send(Kind.ITEM, frame.call, item.SerializeToString())
                    await self.writer.drain()
                self._send(Kind.END, frame.call)
            else:
                self._send(Kind.REPLY, frame.call, (await method(request, self._context)).SerializeToString())
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

    def __init__(self, servicer: object, host: str = "127.0.0.1", port: int = 0) -> None:
        self.servicer, self.host, self.port = servicer, host, port
        self._server: asyncio.Server | None = None
        self._open: set[_Served] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
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
        served = _Served(self.servicer, writer)
        self._open.add(served)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            while True:
                served.start(await read_frame(reader))
        except ProtocolError as exc:
            log.warning("twin link: dropping %s: %s", writer.get_extra_info("peername"), exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(served)
            self._handlers.discard(handler)  # type: ignore[arg-type]
            served.close()


# ---------------------------------------------------------------------------------- client


class LinkChannel:
    """A client's connection, opened on first use and again after it breaks."""

    def __init__(self, address: str) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"expected host:port, got {address!r}")
        self.host, self.port = host.strip("[]"), int(port)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._calls: dict[int, Callable[[Frame | LinkError], None]] = {}
        self._ids = itertools.count(1)

    async def call(self, method: str, request: Message, timeout: float) -> Any:
        """One unary call; raises :class:`LinkError` (``DEADLINE_EXCEEDED`` after ``timeout`` seconds)."""
        reply: asyncio.Future[Frame | LinkError] = asyncio.get_running_loop().create_future()

        def deliver(outcome: Frame | LinkError) -> None:
            if not reply.done():
                reply.set_result(outcome)

        call = await self._open(Kind.CALL, method, request, deliver)
        try:
            outcome = await asyncio.wait_for(reply, timeout)
        except asyncio.TimeoutError:
            self._cancel(call)
            raise LinkError("DEADLINE_EXCEEDED", f"{method}: no answer in {timeout:g}s") from None
        finally:
            self._calls.pop(call, None)
        return _decode(outcome, method)

    async def watch(self, method: str, request: Message) -> AsyncIterator[Any]:
        """A server stream's messages until it ends; raises :class:`LinkError` if it fails or breaks."""
        queue: asyncio.Queue[Frame | LinkError] = asyncio.Queue()
        call = await self._open(Kind.WATCH, method, request, queue.put_nowait)
        ended = False
        try:
            while True:
                frame = await queue.get()
                ended = not isinstance(frame, Frame) or frame.kind in (Kind.END, Kind.ERROR)
                if isinstance(frame, Frame) and frame.kind is Kind.END:
                    return
                yield _decode(frame, method)
        finally:
            if self._calls.pop(call, None) is not None and not ended:
                self._cancel(call)  # the consumer stopped early: the server stops sending

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        self._broken(LinkError("CANCELLED", "channel closed"))

    async def _open(self, kind: Kind, method: str, request: Message, deliver: Callable[[Frame | LinkError], None]) -> int:
        if method not in _TYPES:
            raise LinkError("UNIMPLEMENTED", f"no method {method!r}")
        writer = await self._connected()
        call = next(self._ids)
        self._calls[call] = deliver
        writer.write(pack(kind, call, METHODS.index(method), request.SerializeToString()))
        return call

    async def _connected(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                try:
                    reader, self._writer = await asyncio.open_connection(self.host, self.port)
                except OSError as exc:
                    raise LinkError("UNAVAILABLE", f"cannot connect to {self.host}:{self.port}: {exc}") from exc
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, self._writer))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "connection closed by the server"
        try:
            while True:
                frame = await read_frame(reader)
                deliver = self._calls.get(frame.call)
                if deliver is not None:
                    deliver(frame)
        except ProtocolError as exc:
            reason = f"bad frame from the server: {exc}"
            log.warning("twin link %s:%d: %s", self.host, self.port, reason)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            reason = f"connection lost: {exc!r}"
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            self._broken(LinkError("UNAVAILABLE", reason))

    def _broken(self, error: LinkError) -> None:
        calls, self._calls = self._calls, {}
        for deliver in calls.values():
            deliver(error)

    def _cancel(self, call: int) -> None:
        if self._writer is not None and not self._writer.is_closing():
            with contextlib.suppress(ConnectionError):
                self._writer.write(pack(Kind.CANCEL, call))


def _body(outcome: Frame | LinkError, method: str) -> bytes:
    if isinstance(outcome, LinkError):
        raise outcome
    if outcome.kind is Kind.ERROR:
        raise parse_error(outcome.body)
    if outcome.kind not in (Kind.REPLY, Kind.ITEM):
        raise LinkError("INTERNAL", f"{method}: unexpected {outcome.kind.name} frame")
    return outcome.body


def _decode(outcome: Frame | LinkError, method: str) -> Any:
    """The reply's message; a body that is not one is the server's fault, reported as INTERNAL."""
    body = _body(outcome, method)
    try:
        return _TYPES[method][1].FromString(body)
    except DecodeError as exc:
        raise LinkError("INTERNAL", f"{method}: undecodable reply: {exc}") from exc
