"""The Kubernetes back end: :class:`edgeagent.clusters.ClusterAPI` through the official client.

The agent places only pods whose ``spec.schedulerName`` is ours, and binds them
with a ``Binding`` (the pods/binding subresource, as kube-scheduler does); the API
server refuses a second binding with 409, which is the fence. A pod's uid here is
``namespace/name``; its epoch is the ``fedplane.io/epoch`` annotation (1 if absent).
The client is synchronous, so every call runs in a worker thread; the watch runs in
one thread feeding the event loop. Node status belongs to the kubelet and eviction
of a dead node's pods to the node lifecycle controller, so ``report_node`` changes
nothing here (the agent's RBAC does not allow it either).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, Toleration
from fedcore.resources import MILLI, GpuRequest

from edgeagent.clusters import BindOutcome, BindResult, ClusterUnavailable, Phase, PodUpdate

log = logging.getLogger("edgeagent.kube")

EPOCH_ANNOTATION = "fedplane.io/epoch"
GPU_RESOURCE = "nvidia.com/gpu"
WATCH_SECONDS = 300
_PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}
_UNITS = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, "Ti": 1024.0**2, "k": 1000 / 2**20, "M": 10**6 / 2**20,
          "G": 10**9 / 2**20, "T": 10**12 / 2**20}


def cpu_milli(quantity: str | int | float) -> int:
    text = str(quantity)
    return int(float(text[:-1])) if text.endswith("m") else int(float(text) * MILLI)


def memory_mib(quantity: str | int | float) -> int:
    text = str(quantity)
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * _UNITS[suffix])
    return int(float(text) / 2**20)


def pod_from_k8s(obj: Any) -> PodUpdate:
    """A client ``V1Pod`` as the agent sees it; raises ValueError on a request it cannot read."""
    meta, spec = obj.metadata, obj.spec
    cpu = memory = gpus = 0
    for container in spec.containers or []:
        requests = (container.resources.requests if container.resources else None) or {}
        cpu += cpu_milli(requests.get("cpu", 0))
        memory += memory_mib(requests.get("memory", 0))
        gpus += int(requests.get(GPU_RESOURCE, 0))
    selector = dict(spec.node_selector or {})
    archs = frozenset({Arch(selector.pop("kubernetes.io/arch"))}) if "kubernetes.io/arch" in selector else frozenset()
    tolerations = tuple(
        Toleration(t.key or "", t.value or None, TaintEffect(t.effect) if t.effect else None) for t in spec.tolerations or []
    )
    pod = Pod(f"{meta.namespace}/{meta.name}", cpu, memory, gpu=GpuRequest(gpus, MILLI if gpus else 0),
              node_selector=selector, archs=archs, tolerations=tolerations, priority=spec.priority or 0)
    epoch = int((meta.annotations or {}).get(EPOCH_ANNOTATION, 1))
    phase = _PHASES.get((obj.status.phase if obj.status else None) or "Pending", Phase.PENDING)
    return PodUpdate(pod, epoch, phase, spec.node_name or "")


def node_from_k8s(obj: Any) -> Node:
    labels = dict(obj.metadata.labels or {})
    alloc = (obj.status.allocatable if obj.status else None) or {}
    taints = tuple(Taint(t.key, t.value or "", TaintEffect(t.effect)) for t in ((obj.spec.taints if obj.spec else None) or []))
    arch = labels.get("kubernetes.io/arch", "amd64")
    return Node(obj.metadata.name, cpu_milli(alloc.get("cpu", 0)), memory_mib(alloc.get("memory", 0)),
                gpus=int(alloc.get(GPU_RESOURCE, 0)), arch=Arch(arch if arch != "arm" else "armv7"),
                labels=labels, taints=taints)


class KubeCluster:
    def __init__(self, kubeconfig: str, scheduler_name: str, timeout: float, api_client: Any = None) -> None:
        import kubernetes

        self.k8s = kubernetes
        if api_client is None:
            if kubeconfig:
                api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
            else:
                kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
                api_client = kubernetes.client.ApiClient()
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.scheduler_name = scheduler_name
        self.timeout = timeout

    async def watch(self) -> AsyncIterator[PodUpdate]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[PodUpdate | Exception] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                watcher = self.k8s.watch.Watch()
                for event in watcher.stream(self.core.list_pod_for_all_namespaces, timeout_seconds=WATCH_SECONDS):
                    if stop.is_set():
                        watcher.stop()
                        return
                    obj = event["object"]
                    if obj.spec.scheduler_name != self.scheduler_name:
                        continue
                    try:
                        update = pod_from_k8s(obj)
                    except (ValueError, TypeError, AttributeError) as exc:
                        log.warning("skipping pod %s: %s", obj.metadata.name, exc)
                        continue
                    if event["type"] == "DELETED":
                        update = PodUpdate(update.pod, update.epoch, Phase.DELETED, update.node)
                    loop.call_soon_threadsafe(queue.put_nowait, update)
                loop.call_soon_threadsafe(queue.put_nowait, ClusterUnavailable("watch expired"))
            except Exception as exc:  # the client raises many types; all mean "reconnect"
                loop.call_soon_threadsafe(queue.put_nowait, ClusterUnavailable(f"watch: {exc!r:.200}"))

        thread = threading.Thread(target=pump, name="kube-watch", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = ()) -> BindResult:
        """A Binding names no devices: on Kubernetes the kubelet's device plugin assigns them."""
        namespace, _, name = pod.partition("/")
        client = self.k8s.client
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
        current = await self._read(namespace, name)
        if current.epoch != epoch:
            return BindResult(BindOutcome.STALE_EPOCH, current.node, current.epoch, f"pod is at epoch {current.epoch}")
        if current.node:
            outcome = BindOutcome.ALREADY_BOUND if current.node == node else BindOutcome.DUPLICATE
            return BindResult(outcome, current.node, epoch)
        try:
            await asyncio.to_thread(self.core.create_namespaced_pod_binding, name, namespace, body,
                                    _preload_content=False, _request_timeout=self.timeout)
        except self.k8s.client.ApiException as exc:
            if exc.status == 409:
                holder = (await self._read(namespace, name)).node
                outcome = BindOutcome.ALREADY_BOUND if holder == node else BindOutcome.DUPLICATE
                return BindResult(outcome, holder, epoch, "conflict")
            if exc.status in (400, 403, 404, 422):
                return BindResult(BindOutcome.REJECTED, node, epoch, f"{exc.status} {exc.reason}")
            raise ClusterUnavailable(f"bind {pod}: {exc.status} {exc.reason}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"bind {pod}: {exc!r:.200}") from exc
        return BindResult(BindOutcome.BOUND, node, epoch)

    async def report_node(self, node: str, ready: bool) -> int:
        """The kubelet owns node status; a dead node's pods are evicted by the node lifecycle controller."""
        return 0

    async def describe_node(self, node: str) -> Node:
        try:
            obj = await asyncio.to_thread(self.core.read_node, node, _request_timeout=self.timeout)
            return node_from_k8s(obj)
        except ValueError as exc:
            raise ClusterUnavailable(f"node {node}: unreadable description: {exc}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"read node {node}: {exc!r:.200}") from exc

    async def close(self) -> None:
        """Nothing to close: the client's pool dies with the process."""

    async def _read(self, namespace: str, name: str) -> PodUpdate:
        try:
            obj = await asyncio.to_thread(self.core.read_namespaced_pod, name, namespace, _request_timeout=self.timeout)
            return pod_from_k8s(obj)
        except ValueError as exc:
            raise ClusterUnavailable(f"pod {namespace}/{name}: unreadable: {exc}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"read pod {namespace}/{name}: {exc!r:.200}") from exc
