"""The plane's experience inbox served to the regional trainers over the network, authenticated.

A region's trainer (a Flower SuperNode on a host of its own, :mod:`federated.flower.loopclient`) asks once per round
for the newest ``window`` rows of each of its region's agents: ``GET /v1/experience/<cluster>?window=N`` with
``Authorization: Bearer <token>``; the answer is the rows (:meth:`federated.runtime.experience.Row.encode`) as one
zlib-compressed msgpack list (:mod:`federated.flower.feed` reads it). Why HTTP beside the agents' link: a trainer is
no agent (it binds nothing and reports nothing), it pulls one bulk answer per round, and plain HTTP keeps gRPC and
the link's client out of the trainer's ClientApp.

Who may read: a credential of role ``agent`` for that cluster *without* a node (the region's trainer: an agent
credential bound to a node is a board, which must not read its peers' rows), or an operator. Anything else is 401
(no or unknown token) or 403, before a row is read.
"""

from __future__ import annotations

import collections
import re
import socketserver
import ssl
import threading
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgpack

from controlplane.auth import Authenticator, Principal, allows
from controlplane.experienceinbox import ExperienceInbox

PATH = re.compile(r"^/v1/experience/([A-Za-z0-9][A-Za-z0-9._-]{0,252})$")
MAX_WINDOW = 100_000
CONTENT_TYPE = "application/x-fedplane-experience"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        """Bind without :class:`HTTPServer`'s ``socket.getfqdn``: a reverse DNS lookup that can stall for seconds."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


def may_read(principal: Principal, cluster: str) -> bool:
    """The region's trainer (an agent credential for ``cluster`` naming no node) or an operator."""
    if principal.role == "agent":
        return principal.cluster == cluster and not principal.node
    return allows(principal, "operator")


class ExperienceFeed:
    """``inbox`` served on ``host:port`` (0: any free port) to the trainers ``auth`` admits; :meth:`start` returns the
    port. Threads, not the plane's event loop: a pull reads and compresses a few hundred rows per agent."""

    def __init__(self, inbox: ExperienceInbox, auth: Authenticator, host: str = "127.0.0.1", port: int = 0,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve HTTPS with this context (the plane's certificate), so a token never crosses a network in clear."""
        self.inbox, self.auth = inbox, auth
        self.served_bytes = 0
        self._lock = threading.Lock()
        self._server = _Server((host, port), _handler(self))
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name="experience-feed", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> int:
        self._thread.start()
        return self.port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, token: str, path: str) -> tuple[int, bytes]:
        """(HTTP status, body) for a GET of ``path`` with bearer ``token``."""
        url = urllib.parse.urlsplit(path)
        found = PATH.match(url.path)
        if found is None:
            return 404, b"not found: GET /v1/experience/<cluster>?window=N\n"
        principal = self.auth.authenticate(token) if token else None
        if principal is None:
            return 401, b"a bearer credential is needed (the region's trainer: an agent credential for its cluster, no node)\n"
        cluster = found.group(1)
        if not may_read(principal, cluster):
            return 403, f"this credential may not read cluster {cluster}'s experience\n".encode()
        try:
            window = int(urllib.parse.parse_qs(url.query).get("window", ["200"])[0])
        except ValueError:
            window = -1
        if not 1 <= window <= MAX_WINDOW:
            return 400, f"window must be an integer in 1..{MAX_WINDOW}\n".encode()
        rows = [row.encode() for c, node in self.inbox.agents() if c == cluster for row in _newest(self.inbox, c, node, window)]
        body = zlib.compress(msgpack.packb(rows), 6)
        with self._lock:
            self.served_bytes += len(body)
        return 200, body


def server_tls(cert: str, key: str) -> ssl.SSLContext:
    """The feed's HTTPS context from the plane's certificate and key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def _newest(inbox: ExperienceInbox, cluster: str, node: str, window: int) -> list[Any]:
    """The agent's newest ``window`` rows, read in one pass that holds no more than ``window`` of them at once."""
    return list(collections.deque(inbox.rows(cluster, node), maxlen=window))


def _handler(feed: ExperienceFeed) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            header = self.headers.get("Authorization", "")
            token = header[7:].strip() if header.startswith("Bearer ") else ""
            status, body = feed.answer(token, self.path)
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a pull per region per round is no news."""

    return Handler
