"""The agent's client of the twin cluster API (``fedapi`` TwinCluster over gRPC).

Every failure — unreachable server, deadline, malformed answer — surfaces as
:class:`edgeagent.clusters.ClusterUnavailable`, which the daemon retries with backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from fedapi import client as fedapi_client, twincluster_pb2 as pb, twincluster_pb2_grpc
from fedcore.nodes import Node

from edgeagent import twinwire
from edgeagent.clusters import BindResult, ClusterUnavailable, PodUpdate


class TwinClient:
    def __init__(self, address: str, cluster: str, timeout: float) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self._channel = fedapi_client.connect_aio(address)
        self._stub = twincluster_pb2_grpc.TwinClusterStub(self._channel)  # type: ignore[no-untyped-call]

    async def watch(self) -> AsyncIterator[PodUpdate]:
        try:
            async for event in self._stub.WatchPods(pb.WatchPodsRequest(cluster=self.cluster)):
                yield twinwire.update_from_pb(event)
        except grpc.aio.AioRpcError as exc:
            raise ClusterUnavailable(f"watch: {exc.code().name}: {exc.details()}") from exc
        raise ClusterUnavailable("watch ended")

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = ()) -> BindResult:
        request = pb.BindPodRequest(cluster=self.cluster, pod=pod, node=node, epoch=epoch, gpus=gpus)
        return twinwire.result_from_pb(await self._call(self._stub.BindPod, request))

    async def report_node(self, node: str, ready: bool) -> int:
        request = pb.NodeStatusReport(cluster=self.cluster, node=node, ready=ready)
        return int((await self._call(self._stub.ReportNodeStatus, request)).pods_released)

    async def describe_node(self, node: str) -> Node:
        request = pb.DescribeNodeRequest(cluster=self.cluster, node=node)
        return twinwire.node_from_pb(await self._call(self._stub.DescribeNode, request))

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method: grpc.aio.UnaryUnaryMultiCallable, request: object) -> Any:
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise ClusterUnavailable(f"{exc.code().name}: {exc.details()}") from exc
