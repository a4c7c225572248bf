"""The agent's client of the twin cluster API (gRPC): :class:`edgeagent.clusters.ClusterAPI` over a channel.

Every failure — unreachable server, deadline, malformed answer — surfaces as
:class:`edgeagent.clusters.ClusterUnavailable`, which the daemon retries with backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from fedcore.nodes import Node

from edgeagent import twinwire
from edgeagent.clusters import BindResult, ClusterUnavailable, PodUpdate


class TwinClient:
    def __init__(self, address: str, timeout: float) -> None:
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(address)
        self._calls = {
            name: self._channel.unary_unary(
                f"/{twinwire.SERVICE}/{name}", request_serializer=twinwire.pack, response_deserializer=twinwire.unpack)
            for name in ("Bind", "ReportNode", "Complete", "DescribeNode")
        }
        self._watch = self._channel.unary_stream(
            f"/{twinwire.SERVICE}/Watch", request_serializer=twinwire.pack, response_deserializer=twinwire.unpack)

    async def watch(self) -> AsyncIterator[PodUpdate]:
        try:
            async for item in self._watch({}):
                yield twinwire.update_from_wire(item)
        except grpc.aio.AioRpcError as exc:
            raise ClusterUnavailable(f"watch: {exc.code().name}: {exc.details()}") from exc
        raise ClusterUnavailable("watch ended")

    async def bind(self, pod: str, node: str, epoch: int) -> BindResult:
        return twinwire.result_from_wire(await self._call("Bind", {"pod": pod, "node": node, "epoch": epoch}))

    async def report_node(self, node: str, ready: bool) -> int:
        answer = await self._call("ReportNode", {"node": node, "ready": ready})
        freed = answer.get("freed") if isinstance(answer, dict) else None
        if not isinstance(freed, int):
            raise ClusterUnavailable(f"malformed ReportNode answer: {answer!r:.100}")
        return freed

    async def complete(self, pod: str, epoch: int, succeeded: bool) -> BindResult:
        return twinwire.result_from_wire(await self._call("Complete", {"pod": pod, "epoch": epoch, "succeeded": succeeded}))

    async def describe_node(self, node: str) -> Node:
        return twinwire.node_from_wire(await self._call("DescribeNode", {"node": node}))

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, name: str, request: dict[str, Any]) -> Any:
        try:
            return await self._calls[name](request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise ClusterUnavailable(f"{name}: {exc.code().name}: {exc.details()}") from exc
