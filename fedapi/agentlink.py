"""The agents' link to the control plane: the TwinCluster API's calls over one plain TCP connection, without gRPC.

Why a second transport: gRPC's runtime (~10 MiB of resident memory, poller threads) and
protobuf's (~2 MiB) are a large share of an edge agent's footprint, while an agent needs
four calls of one service. The link keeps the *schema* of ``fedplane.v1.TwinCluster``: a
body is a msgpack map of a message's fields by their proto names (every field present,
enums as their numbers, nested messages as maps), and the server side
(:mod:`fedapi.linkserver`) converts to and from the protobuf messages and drives the same
servicer objects as gRPC, so the two transports cannot drift apart.

A frame is ``length:u32 | kind:u8 | call:u32 | method:u8 | body`` (big-endian; ``length``
counts everything after itself). Many calls share a connection; a watch is a call whose
ITEM frames keep coming until END, ERROR or the client's CANCEL. A client with a credential sends it first, as
one AUTH frame (the token as its body, call 0) on each connection; a server that checks credentials answers a
missing or unknown one with an ERROR on call 0 and hangs up, which fails every call on that connection. With mTLS on (``tls_context``) the
connection is TLS and each side proves itself with a certificate the other side's CA signed. Lengths are never
trusted: a frame over :data:`MAX_FRAME` or of an unknown kind ends the connection, and
every call on it fails with :class:`LinkError`; a call the server cannot serve gets an
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
from typing import Any

import msgpack

from fedapi.linkmembers import Members, split

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IBIB")
HEADER_BYTES = _HEADER.size
_PREFIX = 4
CONNECT_TIMEOUT = 3.0
"""Seconds a connection attempt may take (a cut link drops SYNs silently: the OS would wait minutes)."""
MAX_FRAME = 16 * 1024 * 1024
"""The largest frame either side accepts (the gRPC channel's receive limit)."""

METHODS: tuple[str, ...] = ("WatchPods", "BindPod", "ReportNodeStatus", "CompletePod", "ListNodes", "DescribeNode", "GetSafety", "ReportAgent", "FetchModel", "ShipExperience")
"""Method numbers on the wire are positions in the service's declaration (append-only in the proto; a test checks)."""
WATCHES = frozenset({"WatchPods"})
"""The server-streaming methods."""

Wire = dict[str, Any]
"""A message on the link: its fields by proto name."""


class Kind(IntEnum):
    CALL = 1
    WATCH = 2
    CANCEL = 3
    AUTH = 4
    REPLY = 17
    ITEM = 18
    END = 19
    ERROR = 20


class LinkError(Exception):
    """A call failed: ``code`` is a gRPC status name (UNAVAILABLE, NOT_FOUND, DEADLINE_EXCEEDED...)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


def tls_context(cert: str, key: str, ca: str, server: bool) -> Any:
    """An ``ssl.SSLContext`` for mutual TLS on the link: our certificate and key, the CA that signs the other side
    (a server demands a client certificate). Raises ValueError naming the file that cannot be used. ``ssl`` (and
    OpenSSL) is imported only here: an agent without TLS never loads it."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS certificate {cert} / key {key}: {exc}") from exc
    try:
        context.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS CA {ca}: {exc}") from exc
    context.verify_mode = ssl.CERT_REQUIRED
    return context


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


# ---------------------------------------------------------------------------------- client


class LinkChannel:
    """A client's connection, opened on first use and again after it breaks."""

    def __init__(self, address: str, tls: Any = None, token: str = "") -> None:
        """``tls``: an ``ssl.SSLContext`` from :func:`tls_context` (None: plain TCP); ``token``: the bearer token
        shown first on every connection ("" = none)."""
        self.tls, self.token = tls, token
        self.members = Members(address)
        """Where the link goes: ``address`` may list several control-plane members; it follows the leader."""
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._calls: dict[int, Callable[[Frame | LinkError], None]] = {}
        self._ids = itertools.count(1)

    @property
    def host(self) -> str:
        return split(self.members.current)[0]

    @property
    def port(self) -> int:
        return split(self.members.current)[1]

    async def call(self, method: str, request: Wire, timeout: float) -> Wire:
        """One unary call; raises :class:`LinkError` (``DEADLINE_EXCEEDED`` after ``timeout`` seconds). A standby's
        answer that names the leader sends the call there, once."""
        try:
            return await self._call(method, request, timeout)
        except LinkError as exc:
            if not self._followed(exc):
                raise
        return await self._call(method, request, timeout)

    async def _call(self, method: str, request: Wire, timeout: float) -> Wire:
        reply: asyncio.Future[Frame | LinkError] = asyncio.get_running_loop().create_future()

        def deliver(outcome: Frame | LinkError) -> None:
            if not reply.done():
                reply.set_result(outcome)

        call = await self._open(Kind.CALL, method, request, deliver)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel that races a reply
                outcome = await reply
        except TimeoutError:
            self._cancel(call)
            raise LinkError("DEADLINE_EXCEEDED", f"{method}: no answer in {timeout:g}s") from None
        finally:
            self._calls.pop(call, None)
        return _decode(outcome, method)

    async def watch(self, method: str, request: Wire) -> AsyncIterator[Wire]:
        """A server stream's messages until it ends; raises :class:`LinkError` if it fails or breaks. Refused before
        its first message by a standby that names the leader, it starts again there, once."""
        started = False
        try:
            async for item in self._watch(method, request):
                started = True
                yield item
            return
        except LinkError as exc:
            if started or not self._followed(exc):
                raise
        async for item in self._watch(method, request):
            yield item

    def _followed(self, exc: LinkError) -> bool:
        """Whether ``exc`` moved the link to a named leader (worth one more try now); any move drops the connection."""
        moved = self.members.follow(exc.code, exc.details)
        if moved is not None:
            log.info("twin link: %s: now at %s", exc, self.members.current)
            self.reset()
        return bool(moved)

    async def _watch(self, method: str, request: Wire) -> AsyncIterator[Wire]:
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

    def reset(self) -> None:
        """Drop the connection (a call timed out on it: it may be dead); every call on it fails, the next reconnects."""
        if self._writer is not None:
            self._writer.transport.abort()

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        self._broken(LinkError("CANCELLED", "channel closed"))

    async def _open(self, kind: Kind, method: str, request: Wire, deliver: Callable[[Frame | LinkError], None]) -> int:
        if method not in METHODS or (kind is Kind.WATCH) != (method in WATCHES):
            raise LinkError("UNIMPLEMENTED", f"no {kind.name.lower()} method {method!r}")
        writer = await self._connected()
        call = next(self._ids)
        self._calls[call] = deliver
        writer.write(pack(kind, call, METHODS.index(method), encode(request)))
        return call

    async def _connected(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                for left in range(len(self.members.addresses) - 1, -1, -1):  # each member once, from the current one
                    try:
                        reader, self._writer = await self._connect(self.host, self.port)
                        break
                    except LinkError:
                        self.members.next()
                        if not left:
                            raise
                if self.token:
                    self._writer.write(pack(Kind.AUTH, 0, 0, self.token.encode()))
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, self._writer))
            return self._writer

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            # Not wait_for: on 3.11 a cancel that lands as the connect fails is lost (the connect's
            # error is raised instead), and a caller's retry loop then never stops (an agent hung on SIGTERM).
            async with asyncio.timeout(CONNECT_TIMEOUT):
                return await asyncio.open_connection(host, port, ssl=self.tls, server_hostname=host if self.tls is not None else None)
        except TimeoutError:
            raise LinkError("UNAVAILABLE", f"cannot connect to {host}:{port}: no answer in {CONNECT_TIMEOUT:g}s") from None
        except OSError as exc:
            raise LinkError("UNAVAILABLE", f"cannot connect to {host}:{port}: {exc}") from exc

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "connection closed by the server"
        refused: LinkError | None = None
        try:
            while True:
                frame = await read_frame(reader)
                if frame.call == 0 and frame.kind is Kind.ERROR:  # the connection itself was refused (its credential)
                    refused = parse_error(frame.body)
                    log.warning("twin link %s:%d: %s", self.host, self.port, refused)
                    break
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
            self._broken(refused or LinkError("UNAVAILABLE", reason))

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


def _decode(outcome: Frame | LinkError, method: str) -> Wire:
    """The reply's message; a body that is not one is the server's fault, reported as INTERNAL."""
    try:
        return decode(_body(outcome, method))
    except ValueError as exc:
        raise LinkError("INTERNAL", f"{method}: undecodable reply: {exc}") from exc


def encode(message: Wire) -> bytes:
    return msgpack.packb(message, use_bin_type=True)  # type: ignore[no-any-return]


def decode(body: bytes) -> Wire:
    """A message map from a body; raises ValueError for anything else (garbage, a bare value, non-str keys)."""
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"not msgpack: {exc}") from exc
    if not isinstance(message, dict):
        raise ValueError(f"expected a message map, got {type(message).__name__}")  # noqa: TRY004 (ValueError is the decode contract)
    return message
