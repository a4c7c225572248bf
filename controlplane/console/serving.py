"""The console's HTTP shell (aiohttp, in the plane's event loop): sign-in, the pages, ``/events``, two static files.

Every page and the event stream need a viewer's credentials or better, checked on each request by the injected
``authorize(token) -> Awaitable[bool]`` (it may read the store for a token it has not seen): an ``Authorization:
Bearer`` header, or the session cookie the sign-in form sets (HttpOnly, SameSite=Strict, Secure under TLS; the
token stays on the server, so a session ends with its token). Without them: 401 and the sign-in form. Nothing is
fetched from elsewhere: the Content-Security-Policy allows this origin only.

Live updates: one :class:`Feed` takes a snapshot every ``poll_s`` while anyone listens (off the loop: the plane's
lock may be held by a tick); each ``/events`` stream renders its page from it and sends the regions whose HTML
changed, so a verdict reaches an open page within a poll plus a render.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources

from aiohttp import web

from controlplane import auth
from controlplane.campaigning import Leadership
from controlplane.console import markup, pages, snapshots
from controlplane.console.snapshots import Snapshot
from controlplane.runtime import ControlPlane
from controlplane.store import StoreError
from fedapi.tls import TlsFiles

log = logging.getLogger(__name__)
COOKIE = "fedplane_session"
SESSIONS_KEPT = 1000
"""Sign-ins remembered at once; the oldest is forgotten first (its browser signs in again)."""
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
}
"""Referrer-Policy same-origin, not no-referrer: under no-referrer a browser posts forms with ``Origin: null``, and the
sign-in form's origin check (:meth:`Console._same_origin`) needs the page's own origin."""
STATIC = {"live.js": "text/javascript", "console.css": "text/css"}


class Feed:
    """The newest snapshot for every listener, taken only while someone listens."""

    def __init__(self, take: Callable[[], Snapshot], poll_s: float) -> None:
        self.take, self.poll_s = take, poll_s
        self.latest: Snapshot | None = None
        self.version = 0
        self.listeners = 0
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while self.listeners:
            try:
                snap = await asyncio.to_thread(self.take)
            except Exception:  # a failed read (a store hiccup) skips one update; the page keeps its last state
                log.exception("console snapshot failed")
            else:
                async with self.changed:
                    self.latest, self.version = snap, self.version + 1
                    self.changed.notify_all()
            await asyncio.sleep(self.poll_s)
        self.task = None

    async def subscribe(self) -> AsyncIterator[Snapshot]:
        self.listeners += 1
        if self.task is None:
            self.task = asyncio.create_task(self._run())
        seen = 0
        try:
            while True:
                async with self.changed:
                    await self.changed.wait_for(lambda seen=seen: self.version != seen and self.latest is not None)  # type: ignore[misc]
                    seen, snap = self.version, self.latest
                assert snap is not None
                yield snap
        finally:
            self.listeners -= 1

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


@dataclass(slots=True)
class Console:
    """The console's handlers; ``take`` copies the plane (blocking), ``authorize`` says whether a token may read."""

    take: Callable[[], Snapshot]
    authorize: Callable[[str], Awaitable[bool]]
    poll_s: float = 0.5
    secure: bool = False
    """Served over HTTPS: the session cookie is marked Secure (never sent in clear)."""
    feed: Feed = field(init=False)
    sessions: OrderedDict[str, str] = field(default_factory=OrderedDict)
    streams: set[asyncio.Task[object]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.feed = Feed(self.take, self.poll_s)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/static/{name}", self.static)
        app.router.add_get("/login", self.login_form)
        app.router.add_post("/login", self.login)
        app.router.add_post("/logout", self.logout)
        app.router.add_get("/events", self.events)
        app.router.add_get("/{path:.*}", self.page)
        return app

    def _token(self, request: web.Request) -> str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return self.sessions.get(request.cookies.get(COOKIE, ""), "")

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], object]) -> web.StreamResponse:
        public = request.path.startswith("/static/") or request.path == "/login"
        if not public and not await self.authorize(self._token(request)):
            return self._respond(web.Response(status=401, text=markup.login_page("Sign in to see the control plane."),
                                              content_type="text/html", headers={"WWW-Authenticate": 'Bearer realm="fedplane"'}))
        response = await handler(request)  # type: ignore[misc]
        assert isinstance(response, web.StreamResponse)
        return response if response.prepared else self._respond(response)

    @staticmethod
    def _respond(response: web.StreamResponse) -> web.StreamResponse:
        response.headers.update(HEADERS)
        return response

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        body = resources.files("controlplane.console").joinpath("static", name).read_bytes()
        return web.Response(body=body, content_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    async def login_form(self, request: web.Request) -> web.Response:
        return web.Response(text=markup.login_page(), content_type="text/html")

    @staticmethod
    def _same_origin(request: web.Request) -> None:
        """A form posted from another site (sign-in or sign-out forced on a browser) is refused; browsers name its origin."""
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise web.HTTPForbidden(text="cross-site form refused")

    async def login(self, request: web.Request) -> web.Response:
        self._same_origin(request)
        form = await request.post()
        token = str(form.get("token", "")).strip()
        if not token or not await self.authorize(token):
            return web.Response(status=401, text=markup.login_page("That token is not valid for a viewer or above."), content_type="text/html")
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = token
        while len(self.sessions) > SESSIONS_KEPT:
            self.sessions.popitem(last=False)
        response = web.HTTPSeeOther("/")
        response.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/", secure=self.secure)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        self._same_origin(request)
        self.sessions.pop(request.cookies.get(COOKIE, ""), None)
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response

    async def page(self, request: web.Request) -> web.Response:
        snap = await asyncio.to_thread(self.take)
        page = pages.render(snap, request.path)
        if page is None:
            return web.Response(status=404, text=markup.document("Not found", "", (("missing", markup.tag("p", f"No page at {request.path}.")),)),
                                content_type="text/html")
        return web.Response(text=page.html(), content_type="text/html")

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-Sent Events for one page (``?path=``): every region at first, then those whose HTML changed."""
        path = request.query.get("path", "/")
        response = self._respond(web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}))
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        self.streams.add(task)
        sent: dict[str, str] = {}
        try:
            await response.write(b"retry: 1000\n\n")
            async for snap in self.feed.subscribe():
                page = pages.render(snap, path)
                changed = {name: html for name, html in (page.regions if page else ()) if sent.get(name) != html}
                sent.update(changed)
                message = {"clock": markup.clock(snap.taken), "regions": changed}
                await response.write(f"data: {json.dumps(message)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.streams.discard(task)
        return response

    async def close(self) -> None:
        """End open event streams (a browser reconnects to whoever serves next) and the feed."""
        for task in list(self.streams):
            task.cancel()
        await self.feed.stop()


@dataclass(slots=True)
class Served:
    console: Console
    runner: web.AppRunner
    port: int

    async def stop(self) -> None:
        await self.console.close()
        await self.runner.cleanup()


async def start(console: Console, host: str, port: int, tls: TlsFiles | None = None) -> Served:
    """Serve ``console`` on host:port (0: any free port); with ``tls``, over HTTPS with the plane's certificate (browsers
    show no client certificate: the token authenticates them, TLS keeps it secret)."""
    runner = web.AppRunner(console.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(tls.cert), str(tls.key))
    site = web.TCPSite(runner, host, port, ssl_context=context)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return Served(console, runner, int(runner.addresses[0][1]))


def viewers(gate: auth.Authenticator | auth.Insecure) -> Callable[[str], Awaitable[bool]]:
    """The console's check on the plane's credentials: a viewer or better reads; with authentication off
    (``serve --insecure``, loopback only) anyone does, as on the gRPC port."""
    async def check(token: str) -> bool:
        if isinstance(gate, auth.Insecure):
            return True
        try:
            principal = await gate.admit(token)
        except StoreError as exc:
            raise web.HTTPServiceUnavailable(text=f"cannot check credentials now: {exc}") from None
        return principal is not None and auth.allows(principal, "viewer")
    return check


async def serve_plane(plane: ControlPlane, leadership: Leadership, authorize: Callable[[str], Awaitable[bool]], host: str, port: int,
                      tls: TlsFiles | None = None, wall: Callable[[], float] = time.time) -> Served:
    """The console of ``plane`` on host:port, beside its gRPC API in the same event loop."""
    console = Console(lambda: snapshots.take(plane, leadership, wall), authorize, secure=tls is not None)
    return await start(console, host, port, tls)
