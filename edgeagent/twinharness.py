"""TEST HARNESS — a minimal twin cluster API server over gRPC, hosting an :class:`InMemoryCluster`.

Stands in for the real twin cluster API that ``fedapi`` / the control plane will host;
the agent talks to it only through :class:`edgeagent.clusters.ClusterAPI` (client:
:mod:`edgeagent.twinclient`), so switching to the real one changes one adapter.
The bench and the drill run it in their own process and drive pods directly on the
cluster object (submit, finish), which is also their ground truth.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from edgeagent import twinwire
from edgeagent.clusters import ClusterUnavailable
from edgeagent.memcluster import InMemoryCluster

MAX_CONCURRENT_RPCS = 256
"""Bounded concurrency: thousands of simultaneous calls get CANCELLED otherwise (see STACK.md)."""


class TwinHarness:
    """Serves one in-memory cluster to agent processes."""

    def __init__(self, cluster: InMemoryCluster, bind: str = "127.0.0.1:0") -> None:
        self.cluster = cluster
        self.bind = bind
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> str:
        """Listen; returns ``host:port``."""
        server = grpc.aio.server(maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        unary = {
            "Bind": self._bind, "ReportNode": self._report_node, "Complete": self._complete,
            "DescribeNode": self._describe_node,
        }
        handlers: dict[str, grpc.RpcMethodHandler] = {
            name: grpc.unary_unary_rpc_method_handler(
                _guard(fn), request_deserializer=twinwire.unpack, response_serializer=twinwire.pack)
            for name, fn in unary.items()
        }
        handlers["Watch"] = grpc.unary_stream_rpc_method_handler(
            self._watch, request_deserializer=twinwire.unpack, response_serializer=twinwire.pack)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(twinwire.SERVICE, handlers),))
        self.port = server.add_insecure_port(self.bind)
        await server.start()
        self._server = server
        return f"{self.bind.rpartition(':')[0]}:{self.port}"

    async def stop(self) -> None:
        self.cluster.close_watches()
        if self._server is not None:
            await self._server.stop(grace=0.5)

    async def _watch(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[dict[str, Any]]:
        try:
            async for update in self.cluster.watch():
                yield twinwire.update_to_wire(update)
        except ClusterUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

    async def _bind(self, req: dict[str, Any]) -> dict[str, Any]:
        return twinwire.result_to_wire(await self.cluster.bind(str(req["pod"]), str(req["node"]), int(req["epoch"])))

    async def _report_node(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"freed": await self.cluster.report_node(str(req["node"]), bool(req["ready"]))}

    async def _complete(self, req: dict[str, Any]) -> dict[str, Any]:
        result = await self.cluster.complete(str(req["pod"]), int(req["epoch"]), bool(req["succeeded"]))
        return twinwire.result_to_wire(result)

    async def _describe_node(self, req: dict[str, Any]) -> dict[str, Any]:
        return twinwire.node_to_wire(await self.cluster.describe_node(str(req["node"])))


def _guard(fn: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Bad requests and an unreachable cluster become gRPC status codes, not tracebacks."""

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> dict[str, Any]:
        try:
            if not isinstance(request, dict):
                raise TypeError("request must be a map")
            return await fn(request)
        except ClusterUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad request: {exc!r}")
        raise AssertionError("unreachable: abort raises")

    return handler

