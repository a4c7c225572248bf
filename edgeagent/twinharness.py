"""TEST HARNESS — fedapi's TwinCluster service over an :class:`InMemoryCluster`, for the bench and drills.

The real twin cluster API is served by the control plane process (which the agent
package may not import); this double serves the same messages on the same twin link
(:mod:`fedapi.twinlink`), so the agents under test use their production client
(:mod:`edgeagent.twinclient`). The bench runs it in
its own process and drives pods on the cluster object directly (submit, finish),
which is also its ground truth: decision latencies, refused binds, over-commits.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

from fedapi import twincluster_pb2 as pb
from fedapi.twinlink import Context, LinkServer

from edgeagent import twinwire
from edgeagent.clusters import ClusterUnavailable, PodUpdate
from edgeagent.memcluster import InMemoryCluster

@functools.lru_cache(maxsize=4096)
def _encoded(update: PodUpdate) -> pb.PodEvent:
    """One message per change, shared by every watcher (each watch would otherwise rebuild it)."""
    return twinwire.update_to_pb(update)


class _Servicer:
    def __init__(self, cluster: InMemoryCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name

    async def WatchPods(self, request: pb.WatchPodsRequest, context: Context) -> AsyncIterator[pb.PodEvent]:  # noqa: N802
        await self._check(request.cluster, context)
        try:
            async for update in self.cluster.watch():
                yield _encoded(update)
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))

    async def BindPod(self, request: pb.BindPodRequest, context: Context) -> pb.BindPodResponse:  # noqa: N802
        await self._check(request.cluster, context)
        try:
            return twinwire.result_to_pb(await self.cluster.bind(request.pod, request.node, request.epoch,
                                                                         tuple(request.gpus)))
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))
            raise

    async def ReportNodeStatus(self, request: pb.NodeStatusReport, context: Context) -> pb.NodeStatusAck:  # noqa: N802
        await self._check(request.cluster, context)
        try:
            return pb.NodeStatusAck(pods_released=await self.cluster.report_node(request.node, request.ready))
        except ClusterUnavailable as exc:
            await context.abort("UNAVAILABLE", str(exc))
            raise

    async def CompletePod(self, request: pb.CompletePodRequest, context: Context) -> pb.BindPodResponse:  # noqa: N802
        await self._check(request.cluster, context)
        result = await self.cluster.complete(request.pod, request.epoch, request.succeeded)
        return twinwire.result_to_pb(result)

    async def DescribeNode(self, request: pb.DescribeNodeRequest, context: Context) -> pb.Node:  # noqa: N802
        await self._check(request.cluster, context)
        try:
            return twinwire.node_to_pb(await self.cluster.describe_node(request.node))
        except ClusterUnavailable as exc:
            await context.abort("NOT_FOUND", str(exc))
            raise

    async def _check(self, cluster: str, context: Context) -> None:
        if cluster != self.name:
            await context.abort("NOT_FOUND", f"no cluster {cluster!r} here (this is {self.name!r})")


class TwinHarness:
    """Serves one in-memory cluster to agent processes."""

    def __init__(self, cluster: InMemoryCluster, name: str = "c0", bind: str = "127.0.0.1:0") -> None:
        self.cluster = cluster
        self.name = name
        host, _, port = bind.rpartition(":")
        self._server = LinkServer(_Servicer(cluster, name), host, int(port))

    async def start(self) -> str:
        """Listen; returns ``host:port``."""
        port = await self._server.start()
        return f"{self._server.host}:{port}"

    async def stop(self) -> None:
        self.cluster.close_watches()
        await self._server.stop()
