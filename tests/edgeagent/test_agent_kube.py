"""The Kubernetes back end through the real client over HTTP against kmock, plus a binding handler.

kmock emulates the API but lacks the pods/binding subresource; :class:`BindingKube` adds
it with the API server's rule: a pod that already has ``spec.nodeName`` answers 409.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

kmock = pytest.importorskip("kmock")
kubernetes = pytest.importorskip("kubernetes")

import aiohttp.web  # noqa: E402
import attrs  # noqa: E402
from kmock._internal import rendering  # noqa: E402

from edgeagent.clusters import BindOutcome, Phase, PodUpdate  # noqa: E402
from edgeagent.kube import KubeCluster  # noqa: E402

PODS = kmock.resource("", "v1", "pods")
NODES = kmock.resource("", "v1", "nodes")


@attrs.define(kw_only=True)
class BindingKube(kmock.KubernetesEmulator):
    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.method.value == "POST" and request.resource == PODS and request.url.path.endswith("/binding"):
            name = request.url.path.split("/")[-2]
            key = (PODS, request.namespace, name)
            async with self._lock:
                if key not in self.objects or self.objects[key].deleted:
                    raise kmock.KubernetesObjectNotFoundError()
                if self.objects[key].get("spec", {}).get("nodeName"):
                    raise kmock.KubernetesError(409, "Conflict", f"pod {name} is already assigned")
                self.objects[key].patch({"spec": {"nodeName": request.data["target"]["name"]}})
            return aiohttp.web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)
        return await super()._handle(request)


class Double:
    """kmock on a loopback port, in its own thread (the client is synchronous)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.handler: BindingKube | None = None
        self.url = ""
        self.stop_event: asyncio.Event | None = None
        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self.stop_event = asyncio.Event()
        async with BindingKube() as handler, kmock.Server(handler) as server:
            handler.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"binding"})
            handler.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
            self.handler, self.url = handler, str(server.url).rstrip("/")
            self.ready.set()
            await self.stop_event.wait()

    def put(self, res: Any, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        async def go() -> None:
            assert self.handler is not None
            obj.setdefault("metadata", {}).update({"name": name, **({"namespace": ns} if ns else {})})
            self.handler.objects[res, ns, name] = obj

        asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def node_name_of(self, ns: str, name: str) -> str:
        async def go() -> str:
            assert self.handler is not None
            return str(self.handler.objects[PODS, ns, name].raw.get("spec", {}).get("nodeName", ""))

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)


@pytest.fixture()
def kube() -> Iterator[Double]:
    double = Double()
    double.thread.start()
    assert double.ready.wait(10)
    yield double
    assert double.stop_event is not None
    double.loop.call_soon_threadsafe(double.stop_event.set)
    double.thread.join(5)


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"fedplane.io/epoch": "2"}},
            "spec": {"schedulerName": scheduler, "nodeSelector": {"kubernetes.io/arch": "arm64"},
                     "containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


@pytest.mark.integration
def test_watch_binding_and_fencing_against_kmock(kube: Double) -> None:
    kube.put(NODES, None, "edge-1", {"apiVersion": "v1", "kind": "Node", "metadata": {"labels": {"kubernetes.io/arch": "arm64"}},
                                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})
    kube.put(PODS, "default", "ours", pod("ours", "fedplane"))
    kube.put(PODS, "default", "theirs", pod("theirs", "default-scheduler"))
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.url
    api = kubernetes.client.ApiClient(cfg)

    async def scenario() -> tuple[list[PodUpdate], Any, list[BindOutcome]]:
        cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=api)
        node = await cluster.describe_node("edge-1")
        seen: list[PodUpdate] = []

        async def collect() -> None:
            async for update in cluster.watch():
                seen.append(update)

        watcher = asyncio.create_task(collect())
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.05)
        outcomes = [(await cluster.bind("default/ours", "edge-1", 2)).outcome,
                    (await cluster.bind("default/ours", "edge-1", 2)).outcome,
                    (await cluster.bind("default/ours", "edge-2", 2)).outcome,
                    (await cluster.bind("default/ours", "edge-1", 1)).outcome]
        watcher.cancel()
        return seen, node, outcomes

    seen, node, outcomes = asyncio.run(scenario())
    assert node.capacity.cpu_milli == 4000 and node.gpus == 1 and node.arch.value == "arm64"
    assert [u.pod.uid for u in seen] == ["default/ours"], "only pods with our schedulerName"
    first = seen[0]
    assert first.phase is Phase.PENDING and first.epoch == 2 and first.pod.gpu.count == 1
    assert first.pod.cpu_milli == 500 and {a.value for a in first.pod.archs} == {"arm64"}
    assert outcomes == [BindOutcome.BOUND, BindOutcome.ALREADY_BOUND, BindOutcome.DUPLICATE, BindOutcome.STALE_EPOCH]
    assert kube.node_name_of("default", "ours") == "edge-1"
