"""Who may call what: bearer credentials with roles, kept in the plane's store, checked on every gRPC call and
every call on the agents' link.

Roles: ``admin`` ⊇ ``operator`` ⊇ ``viewer``, and ``agent`` beside them. admin registers clusters and issues
credentials; operator submits, migrates, deletes, autoscales and runs drills; viewer reads; an agent reports
and binds for its own cluster only (and, when its credential names a node, binds and reports as that node only).
:data:`NEEDS` names the roles each method accepts; a method missing from it is refused (fail closed), and a
test holds it to every method of every service the server registers, so a new RPC cannot ship unguarded.

Why bearer tokens (over optional mTLS) and not mTLS alone: the plane already speaks mTLS (:mod:`fedapi.tls`,
``--tls-*``), which proves *which* machine is calling, but a certificate carries no role unless the plane
runs a CA that encodes one (its issuance, rotation and revocation, and every client's key handling); the web
console's browsers cannot present a client certificate per user at all. A token names a role, a cluster and
a node, works unchanged as the console's ``Authorization: Bearer`` header, and the two compose: under
``--tls-*`` tokens travel encrypted on a mutually authenticated channel. Without TLS a token crosses the
network in clear, so beyond loopback run both.

Tokens are ``secrets.token_urlsafe(32)`` (256 random bits); the store keeps only their SHA-256 (a fast hash is
enough for random tokens: there is no password to guess) with role, cluster and node, so every replicated
member accepts what any member issued, and a restart forgets none. Lookups are by digest and the stored digest
is compared with :func:`hmac.compare_digest`. Known tokens are cached in memory (credentials are never changed
once issued), so a call costs one hash and a dict lookup.

The console's check, kept stable: ``Authenticator.authenticate(token) -> Principal | None`` and
``allows(principal, role) -> bool``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from controlplane.store import Store, StoreError
from fedapi.credentials import HINT, MAX_TOKEN, METADATA_KEY, ROLES, token_of

KEY_PREFIX = "credentials/"
RANKS = {"viewer": 1, "operator": 2, "admin": 3}
"""The nested roles: each allows what every lower one does."""
CACHE_MAX = 10_000
MAX_NAME = 253

PUBLIC: tuple[str, ...] = ()
"""Answered without a credential: liveness probes and the API's schema."""
_CP, _TW, _AS = "/fedplane.v1.ControlPlane/", "/fedplane.v1.TwinCluster/", "/fedplane.v1.Autoscaler/"
_AGENT_READS = ("agent", "viewer")
NEEDS: dict[str, tuple[str, ...]] = {
    _CP + "RegisterCluster": ("admin",),
    _CP + "IssueCredential": ("admin",),
    _CP + "SubmitWorkload": ("operator",),
    _CP + "StartMigration": ("operator",),
    _CP + "CancelMigration": ("operator",),
    _CP + "DeleteWorkload": ("operator",),
    _CP + "RunDrill": ("operator",),
    _CP + "ListClusters": ("viewer",),
    _CP + "GetPlacements": ("viewer",),
    _CP + "ListMigrations": ("viewer",),
    _CP + "ListDecisions": ("viewer",),
    _CP + "GetLeader": ("viewer",),
    _CP + "ListAgents": ("viewer",),
    _CP + "ReportAgent": ("agent",),
    _AS + "EnableAutoscale": ("operator",),
    _AS + "DisableAutoscale": ("operator",),
    _AS + "GetAutoscale": ("viewer",),
    _TW + "WatchPods": _AGENT_READS,
    _TW + "ListNodes": _AGENT_READS,
    _TW + "DescribeNode": _AGENT_READS,
    _TW + "GetSafety": _AGENT_READS,
    _TW + "BindPod": ("agent",),
    _TW + "ReportNodeStatus": ("agent",),
    _TW + "CompletePod": ("agent",),
    _TW + "ReportAgent": ("agent",),
    _TW + "FetchModel": ("agent",),
    _TW + "ShipExperience": ("agent",),
    "/grpc.health.v1.Health/Check": PUBLIC,
    "/grpc.health.v1.Health/Watch": PUBLIC,
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": PUBLIC,
}
"""Every method the server answers -> the roles that may call it (any one suffices; ``PUBLIC``: no credential)."""
NODE_SCOPED = frozenset({_CP + "ReportAgent", _TW + "ReportAgent", _TW + "BindPod", _TW + "ReportNodeStatus", _TW + "FetchModel", _TW + "ShipExperience"})
"""An agent whose credential names a node reports as and binds to that node only; it may still report a peer's
node *not* ready (the back end's half of re-placing a dead peer's pods)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a credential speaks for."""

    role: str
    cluster: str = ""
    node: str = ""


def allows(principal: Principal, role: str) -> bool:
    """Whether ``principal`` holds ``role`` (an admin is an operator and a viewer; an agent is only an agent)."""
    if role == "agent" or principal.role == "agent":
        return principal.role == role
    return RANKS.get(principal.role, 0) >= RANKS[role]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def loopback(host: str) -> bool:
    """Whether ``host`` (a --host value) binds to this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Insecure:
    """Authentication off (``serve --insecure``, tests): every caller may call everything. Loopback only."""


INSECURE = Insecure()


class Authenticator:
    """Issues credentials into ``store`` and answers who holds a token (see the module's docstring)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self._known: dict[str, Principal] = {}

    def issue(self, role: str, cluster: str = "", node: str = "") -> str:
        """A new token of ``role`` (an agent's for ``cluster``, and ``node`` if given); raises ValueError on bad input."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role[:40]!r}")
        if role == "agent" and not cluster:
            raise ValueError("an agent credential needs the cluster it acts for (--cluster)")
        if role != "agent" and (cluster or node):
            raise ValueError(f"a {role} credential is not bound to a cluster or node: those are for role agent")
        for what, name in (("cluster", cluster), ("node", node)):
            if len(name) > MAX_NAME or not name.isprintable() or " " in name:
                raise ValueError(f"{what} must be at most {MAX_NAME} printable characters without spaces")
        token = secrets.token_urlsafe(32)
        key = digest(token)
        with self.store.tx() as t:
            t.put(KEY_PREFIX + key, {"sha256": key, "role": role, "cluster": cluster, "node": node, "issued_at": self.clock()})
        self._remember(key, Principal(role, cluster, node))
        return token

    def authenticate(self, token: str) -> Principal | None:
        """Who ``token`` speaks for, None when the plane never issued it. Reads the store on a cache miss (it may
        block: call it off an event loop, or use :meth:`admit`); store errors propagate."""
        if not token or len(token) > MAX_TOKEN:
            return None
        key = digest(token)
        found = self._known.get(key)
        if found is not None:
            return found
        with self.store.tx() as t:
            doc = t.get(KEY_PREFIX + key)
        if doc is None or not hmac.compare_digest(str(doc.get("sha256", "")), key) or doc.get("role") not in ROLES:
            return None
        principal = Principal(str(doc["role"]), str(doc.get("cluster", "")), str(doc.get("node", "")))
        self._remember(key, principal)
        return principal

    async def admit(self, token: str) -> Principal | None:
        """:meth:`authenticate` for an event loop: a cached token at once, the store in a worker thread."""
        if not token or len(token) > MAX_TOKEN:
            return None
        return self._known.get(digest(token)) or await asyncio.to_thread(self.authenticate, token)

    def refusal(self, principal: Principal, method: str, request: Any) -> str | None:
        """:func:`refusal`, as the agents' link server asks it (:class:`fedapi.linkserver.Gate`)."""
        return refusal(principal, method, request)

    def _remember(self, key: str, principal: Principal) -> None:
        if len(self._known) >= CACHE_MAX:
            self._known.clear()
        self._known[key] = principal


def refusal(principal: Principal, method: str, request: Any) -> str | None:
    """Why ``principal`` may not call ``method`` (a full gRPC path) with ``request``; None when it may."""
    needs = NEEDS.get(method)
    if needs is None:
        return f"{method} is in no role's table: nobody may call it"
    if needs and not any(allows(principal, role) for role in needs):
        return f"{method.rsplit('/', 1)[-1]} needs role {' or '.join(needs)}; this credential is {principal.role}"
    if principal.role != "agent":
        return None
    cluster = str(getattr(request, "cluster", ""))
    if cluster != principal.cluster:
        return f"this agent credential acts for cluster {principal.cluster!r} only, not {cluster[:80]!r}"
    node = str(getattr(request, "node", ""))
    reports_peer_down = method.endswith("/ReportNodeStatus") and not getattr(request, "ready", True)
    if principal.node and method in NODE_SCOPED and node != principal.node and not reports_peer_down:
        return f"this agent credential acts for node {principal.node!r} only, not {node[:80]!r}"
    return None


class Gate(grpc.aio.ServerInterceptor):
    """The gRPC side: every call not :data:`PUBLIC` shows a bearer token of a role :data:`NEEDS` names, or ends
    UNAUTHENTICATED (no or an unknown token) or PERMISSION_DENIED (naming the role needed) before its handler runs."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]], details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = str(details.method)  # type: ignore[attr-defined]
        if handler is None or NEEDS.get(method, None) == PUBLIC:
            return handler
        check = self._check
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await check(method, request, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            stream = handler.unary_stream

            async def watch(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                await check(method, request, context)
                async for item in stream(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(watch, handler.request_deserializer, handler.response_serializer)

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:  # a client-streaming method: none is guarded
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{method}: no role may call a client-streaming method")

        return grpc.unary_unary_rpc_method_handler(refuse)

    async def _check(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        values = [str(v) for k, v in (context.invocation_metadata() or ()) if k == METADATA_KEY]
        token = token_of(values[0]) if values else ""
        if not token:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"no credentials: {HINT}")
        try:
            principal = await self.auth.admit(token)
        except StoreError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot check credentials now: {exc}")
        if principal is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"unknown credential (not issued by this control plane): {HINT}")
        why = refusal(principal, method, request)
        if why is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
