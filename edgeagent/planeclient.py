"""The agent's client of the control plane's agent link (the ``fedapi`` TwinCluster service's calls, without gRPC).

The agent speaks :mod:`fedapi.agentlink` (the service's messages as msgpack maps, on one
plain TCP connection), so neither gRPC nor protobuf is loaded on an edge node. Every failure —
unreachable server, deadline, malformed answer — surfaces as
:class:`edgeagent.clusters.ClusterUnavailable`, which the daemon retries with backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from edgeagent import linkcodec
from edgeagent.clusters import BindOutcome, BindResult, ClusterUnavailable, EvictOutcome, EvictResult, PodUpdate, UnknownNode
from fedapi.agentlink import LinkChannel, LinkError, Wire
from fedcore.nodes import Node


class PlaneClient:
    def __init__(self, address: str, cluster: str, timeout: float, tls: Any = None, token: str = "") -> None:
        """``tls``: an ``ssl.SSLContext`` for mutual TLS (:func:`fedapi.agentlink.tls_context`), None for plain TCP;
        ``token``: the agent's bearer token, shown first on each connection ("" = none)."""
        self.cluster = cluster
        self.timeout = timeout
        self.channel = LinkChannel(address, tls, token)

    async def watch(self) -> AsyncIterator[PodUpdate]:
        try:
            async for event in self.channel.watch("WatchPods", {"cluster": self.cluster}):
                yield linkcodec.update_from_wire(event)
        except LinkError as exc:
            raise ClusterUnavailable(f"watch: {exc}") from exc
        raise ClusterUnavailable("watch ended")

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> BindResult:
        request = {"cluster": self.cluster, "pod": pod, "node": node, "epoch": epoch, "gpus": list(gpus)}
        if reclaimed_milli:  # only when used: a plane that predates the field refuses it
            request["reclaimed_milli"] = reclaimed_milli
        return linkcodec.result_from_wire(await self._call("BindPod", request))

    async def evict(self, pod: str, epoch: int) -> EvictResult:
        """The twin cluster API stops a pod by completing it as failed, fenced by the epoch (as an evicted pod ends)."""
        request = {"cluster": self.cluster, "pod": pod, "epoch": epoch, "succeeded": False}
        result = linkcodec.result_from_wire(await self._call("CompletePod", request))
        if result.ok:
            return EvictResult(EvictOutcome.EVICTED)
        return EvictResult(EvictOutcome.STALE_EPOCH if result.outcome is BindOutcome.STALE_EPOCH else EvictOutcome.GONE,
                           result.reason)

    async def report_node(self, node: str, ready: bool) -> int:
        released = (await self._call("ReportNodeStatus", {"cluster": self.cluster, "node": node, "ready": ready})).get("pods_released")
        if not isinstance(released, int):
            raise ClusterUnavailable(f"malformed node-status answer from the cluster: {released!r:.40}")
        return released

    async def describe_node(self, node: str) -> Node:
        try:
            answer = await self.channel.call("DescribeNode", {"cluster": self.cluster, "node": node}, self.timeout)
        except LinkError as exc:
            if exc.code == "NOT_FOUND":
                raise UnknownNode(f"the back end does not know node {node!r} in cluster {self.cluster!r}: {exc.details}") from None
            raise ClusterUnavailable(str(exc)) from exc
        return linkcodec.node_from_wire(answer)

    async def close(self) -> None:
        await self.channel.close()

    async def _call(self, method: str, request: Wire) -> Wire:
        try:
            return await self.channel.call(method, request, self.timeout)
        except LinkError as exc:
            raise ClusterUnavailable(str(exc)) from exc
