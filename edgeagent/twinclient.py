"""The agent's client of the twin cluster API (``fedapi`` TwinCluster over the twin link).

The agent speaks :mod:`fedapi.twinlink` (the same protobuf messages as over gRPC, on one
plain TCP connection), so no gRPC runtime is loaded on an edge node. Every failure —
unreachable server, deadline, malformed answer — surfaces as
:class:`edgeagent.clusters.ClusterUnavailable`, which the daemon retries with backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fedapi import twincluster_pb2 as pb
from fedapi.twinlink import LinkChannel, LinkError
from fedcore.nodes import Node

from edgeagent import twinwire
from edgeagent.clusters import BindResult, ClusterUnavailable, PodUpdate


class TwinClient:
    def __init__(self, address: str, cluster: str, timeout: float) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self._channel = LinkChannel(address)

    async def watch(self) -> AsyncIterator[PodUpdate]:
        try:
            async for event in self._channel.watch("WatchPods", pb.WatchPodsRequest(cluster=self.cluster)):
                yield twinwire.update_from_pb(event)
        except LinkError as exc:
            raise ClusterUnavailable(f"watch: {exc}") from exc
        raise ClusterUnavailable("watch ended")

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = ()) -> BindResult:
        request = pb.BindPodRequest(cluster=self.cluster, pod=pod, node=node, epoch=epoch, gpus=gpus)
        return twinwire.result_from_pb(await self._call("BindPod", request))

    async def report_node(self, node: str, ready: bool) -> int:
        request = pb.NodeStatusReport(cluster=self.cluster, node=node, ready=ready)
        return int((await self._call("ReportNodeStatus", request)).pods_released)

    async def describe_node(self, node: str) -> Node:
        request = pb.DescribeNodeRequest(cluster=self.cluster, node=node)
        return twinwire.node_from_pb(await self._call("DescribeNode", request))

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await self._channel.call(method, request, self.timeout)
        except LinkError as exc:
            raise ClusterUnavailable(str(exc)) from exc
