"""A tiny asyncio HTTP/1.0 server for /metrics, /healthz and /pods (no web framework).

One request per connection, GET only, bounded header size and time: enough for a
Prometheus scraper, a kubelet liveness probe and the drill's ground-truth check.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from edgeagent.metrics import CONTENT_TYPE, AgentMetrics

log = logging.getLogger("edgeagent.serving")
READ_TIMEOUT = 5.0
MAX_HEADER = 8192


class StatusServer:
    def __init__(self, metrics: AgentMetrics, health: Callable[[], str | None], pods: Callable[[], dict[str, int]]) -> None:
        """``health`` returns None when healthy, else the reason; ``pods`` maps pods running here to their epochs."""
        self.metrics = metrics
        self.health = health
        self.pods = pods
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``."""
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.metrics.render()
        if path == "/healthz":
            problem = self.health()
            return (200, "text/plain", b"ok\n") if problem is None else (503, "text/plain", problem.encode() + b"\n")
        if path == "/pods":
            return 200, "application/json", json.dumps(self.pods()).encode()
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            parts = head[:MAX_HEADER].split(b"\r\n", 1)[0].split()
            if len(parts) != 3 or parts[0] != b"GET":
                status, ctype, body = 405, "text/plain", b"GET only\n"
            else:
                status, ctype, body = self.respond(parts[1].decode("latin-1").split("?", 1)[0])
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}[status]
            writer.write(f"HTTP/1.0 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            log.debug("http: dropped a request: %r", exc)
        finally:
            writer.close()
