"""The Kubernetes back end: :class:`edgeagent.clusters.ClusterAPI` through the official client.

The agent places only pods whose ``spec.schedulerName`` is ours, and binds them
with a ``Binding`` (the pods/binding subresource, as kube-scheduler does); the API
server refuses a second binding with 409, which is the fence. A pod's uid here is
``namespace/name``; its epoch is the ``fedplane.io/epoch`` annotation (1 if absent).
The client is synchronous, so every call runs in a worker thread; the watch runs in
one thread feeding the event loop. Objects are read by :mod:`fedcore.kubeobjects`, the
model the control plane's adapter reads them with too. ``evict`` goes through the
Eviction API, so PodDisruptionBudgets are respected (429: blocked, retry later).
Node readiness belongs to the kubelet and eviction of a dead node's pods to the node
lifecycle controller, so ``report_node`` changes nothing here. The one part of node
status the agent writes is the batch capacity (``advertise_batch``, see
:mod:`edgeagent.batchadvertising`): Koordinator's extended resources, which the kubelet
keeps but never sets (the agent's RBAC allows ``nodes/status`` ``patch`` for it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fedcore.backends import fencing
from fedcore import kubeobjects
from fedcore.backends.model import EvictOutcome, EvictResult
from fedcore.kubeobjects import KubeObjectError
from fedcore.nodes import Node

from edgeagent.batchadvertising import batch_capacity
from edgeagent.clusters import BindOutcome, BindResult, ClusterUnavailable, Phase, PodUpdate, UnknownNode

log = logging.getLogger("edgeagent.kube")

WATCH_SECONDS = 300
NODE_TTL_S = 5.0
_PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}


def _recreated(current: str, claimed: str) -> bool:
    """Whether the pod now under the claimed pod's name is another incarnation (a key without one matches any)."""
    return kubeobjects.INCARNATION in claimed and current != claimed


def pod_update(obj: dict[str, Any]) -> PodUpdate:
    """A pod dict as the agent sees it; raises KubeObjectError on one it cannot read."""
    pod = kubeobjects.read_pod(obj)
    phase = Phase.DELETED if pod.deleting else _PHASES.get(pod.phase, Phase.PENDING)
    return PodUpdate(pod.to_pod(), pod.epoch, phase, pod.node)


def raw_watch(kubernetes: Any) -> Any:
    """A client Watch yielding the API's dicts: skips building client models only to turn them back into dicts."""

    class RawWatch(kubernetes.watch.Watch):  # type: ignore[misc,name-defined]
        def get_return_type(self, func: Any) -> None:
            return None

    return RawWatch()


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
        self._nodes: dict[str, tuple[float, kubeobjects.KubeNode]] = {}
        """Nodes as last read (allocatable, readiness, taints), kept NODE_TTL_S for the pre-bind room check."""

    async def watch(self) -> AsyncIterator[PodUpdate]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[PodUpdate | Exception] = asyncio.Queue()
        stop = threading.Event()

        def put(item: PodUpdate | Exception) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed under us: nobody is listening any more
                stop.set()

        def pump() -> None:
            try:
                watcher = raw_watch(self.k8s)
                for event in watcher.stream(self.core.list_pod_for_all_namespaces, timeout_seconds=WATCH_SECONDS):
                    if stop.is_set():
                        watcher.stop()
                        return
                    obj = event["raw_object"]
                    if (obj.get("spec") or {}).get("schedulerName") != self.scheduler_name:
                        continue
                    try:
                        update = pod_update(obj)
                    except KubeObjectError as exc:
                        log.warning("skipping a pod: %s", exc)
                        continue
                    if event["type"] == "DELETED":
                        update = PodUpdate(update.pod, update.epoch, Phase.DELETED, update.node)
                    put(update)
                put(ClusterUnavailable("watch expired"))
            except Exception as exc:  # the client raises many types; all mean "reconnect"
                put(ClusterUnavailable(f"watch: {exc!r:.200}"))

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

    async def bind(self, pod: str, node: str, epoch: int, gpus: tuple[int, ...] = (), reclaimed_milli: int = 0) -> BindResult:
        """A Binding names no devices: on Kubernetes the kubelet's device plugin assigns them; nor reclaimed CPU (a batch pod asks the
        node's batch capacity, which :meth:`advertise_batch` keeps above what the agents place, and runs in the
        BestEffort cgroup the agent caps)."""
        namespace, name = kubeobjects.split_key(pod)
        client = self.k8s.client
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
        raw = await self._read_raw(namespace, name)
        try:
            current = None if raw is None else pod_update(raw)
            wants = kubeobjects.effective_requests((raw or {}).get("spec") or {}, f"pod {pod}")
        except KubeObjectError as exc:
            raise ClusterUnavailable(f"pod {pod}: unreadable: {exc}") from exc
        gone = current is None or _recreated(current.pod.uid, pod)
        refused = fencing.fence(pod, node, epoch, None if gone else fencing.Seen(current.epoch, current.node, current.phase.value))
        if refused is not None:
            return refused
        problem = await self._room(node, name, wants)
        if problem:
            return BindResult(BindOutcome.REJECTED, node, epoch, problem)
        try:
            await asyncio.to_thread(self.core.create_namespaced_pod_binding, name, namespace, body,
                                    _preload_content=False, _request_timeout=self.timeout)
        except self.k8s.client.ApiException as exc:
            if exc.status == 409:
                after = await self._read(namespace, name)
                holder = after.node if after is not None else ""
                outcome = BindOutcome.ALREADY_BOUND if holder == node else BindOutcome.DUPLICATE
                return BindResult(outcome, holder, epoch, "conflict")
            if exc.status in (400, 403, 404, 422):
                return BindResult(BindOutcome.REJECTED, node, epoch, f"{exc.status} {exc.reason}")
            raise ClusterUnavailable(f"bind {pod}: {exc.status} {exc.reason}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"bind {pod}: {exc!r:.200}") from exc
        return BindResult(BindOutcome.BOUND, node, epoch)

    async def evict(self, pod: str, epoch: int) -> EvictResult:
        """Stop the pod through the Eviction API (PodDisruptionBudgets apply), only while it is at ``epoch``."""
        namespace, name = kubeobjects.split_key(pod)
        raw = await self._read_raw(namespace, name)
        if raw is None:
            return EvictResult(EvictOutcome.GONE, f"pod {pod} does not exist")
        try:
            current = pod_update(raw)
        except KubeObjectError as exc:
            raise ClusterUnavailable(f"pod {pod}: unreadable: {exc}") from exc
        if _recreated(current.pod.uid, pod):
            return EvictResult(EvictOutcome.GONE, f"pod {pod} was re-created under its name")
        if current.phase.finished:
            return EvictResult(EvictOutcome.GONE, f"pod {pod} is {current.phase.value}")
        if current.epoch != epoch:
            return EvictResult(EvictOutcome.STALE_EPOCH, f"pod is at epoch {current.epoch}, not {epoch}")
        client = self.k8s.client
        uid = (raw.get("metadata") or {}).get("uid")
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None)
        try:
            await asyncio.to_thread(self.core.create_namespaced_pod_eviction, name, namespace, body,
                                    _preload_content=False, _request_timeout=self.timeout)
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                return EvictResult(EvictOutcome.GONE, "deleted meanwhile")
            if exc.status == 409:  # the uid precondition failed: a new pod under the same name
                return EvictResult(EvictOutcome.STALE_EPOCH, "the pod was replaced meanwhile")
            if exc.status == 429:
                return EvictResult(EvictOutcome.BLOCKED, "a PodDisruptionBudget forbids it now")
            raise ClusterUnavailable(f"evict {pod}: {exc.status} {exc.reason}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"evict {pod}: {exc!r:.200}") from exc
        return EvictResult(EvictOutcome.EVICTED)

    async def report_node(self, node: str, ready: bool) -> int:
        """The kubelet owns node status; a dead node's pods are evicted by the node lifecycle controller."""
        return 0

    async def advertise_batch(self, node: str, reclaimed_milli: int) -> tuple[int, int]:
        """Set the node's batch capacity in its status (capacity and allocatable) by the rule of
        :func:`edgeagent.batchadvertising.batch_capacity`; returns ``(batch-cpu millicores, batch-memory bytes)``."""
        try:
            resp = await asyncio.to_thread(self.core.read_node, node, _preload_content=False, _request_timeout=self.timeout)
            read = kubeobjects.read_node(json.loads(resp.data))
            if read.problem:
                raise ClusterUnavailable(f"node {node}: {read.problem}")
            cpu, memory = batch_capacity(read.capacity, reclaimed_milli)
            values = {kubeobjects.BATCH_CPU_RESOURCE: str(cpu), kubeobjects.BATCH_MEMORY_RESOURCE: str(memory)}
            await asyncio.to_thread(self.core.patch_node_status, node, {"status": {"capacity": values, "allocatable": values}},
                                    _preload_content=False, _request_timeout=self.timeout)
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                raise UnknownNode(f"the API server has no node {node!r}") from None
            raise ClusterUnavailable(f"patch node {node} status: {exc.status} {exc.reason}") from exc
        except (ClusterUnavailable, UnknownNode):
            raise
        except Exception as exc:
            raise ClusterUnavailable(f"patch node {node} status: {exc!r:.200}") from exc
        self._nodes.pop(node, None)  # the room check reads the new batch capacity
        return cpu, memory

    async def describe_node(self, node: str) -> Node:
        try:
            resp = await asyncio.to_thread(self.core.read_node, node, _preload_content=False, _request_timeout=self.timeout)
            return kubeobjects.read_node(json.loads(resp.data)).to_node()
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                raise UnknownNode(f"the API server has no node {node!r}") from None
            raise ClusterUnavailable(f"read node {node}: {exc.status} {exc.reason}") from exc
        except KubeObjectError as exc:
            raise ClusterUnavailable(f"node {node}: {exc}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"read node {node}: {exc!r:.200}") from exc

    async def close(self) -> None:
        """Nothing to close: the client's pool dies with the process."""

    async def _room(self, node: str, name: str, wants: kubeobjects.Requests) -> str:
        """Why the pod cannot go to the node now ("" if it fits), counting every pod bound there
        (other schedulers' and DaemonSets' too): a bind the kubelet would refuse is not made (a batch pod's
        batch resources are held against the node's advertised batch capacity, as the kubelet holds them)."""
        try:
            cached = self._nodes.get(node)
            if cached is None or time.monotonic() - cached[0] > NODE_TTL_S:
                resp = await asyncio.to_thread(self.core.read_node, node, _preload_content=False, _request_timeout=self.timeout)
                cached = self._nodes[node] = (time.monotonic(), kubeobjects.read_node(json.loads(resp.data)))
            on_node = await asyncio.to_thread(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}",
                                              _preload_content=False, _request_timeout=self.timeout)
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                return f"node {node} does not exist"
            raise ClusterUnavailable(f"read node {node}: {exc.status} {exc.reason}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"read node {node}: {exc!r:.200}") from exc
        problem = kubeobjects.room_problem(cached[1], json.loads(on_node.data).get("items") or [], wants, name)
        if problem:
            self._nodes.pop(node, None)  # read it afresh next time: it may have grown or become ready
        return problem

    async def _read_raw(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as a dict; None when it does not exist."""
        try:
            resp = await asyncio.to_thread(self.core.read_namespaced_pod, name, namespace, _preload_content=False,
                                           _request_timeout=self.timeout)
            obj: dict[str, Any] = json.loads(resp.data)
            return obj
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise ClusterUnavailable(f"read pod {namespace}/{name}: {exc.status} {exc.reason}") from exc
        except Exception as exc:
            raise ClusterUnavailable(f"read pod {namespace}/{name}: {exc!r:.200}") from exc

    async def _read(self, namespace: str, name: str) -> PodUpdate | None:
        raw = await self._read_raw(namespace, name)
        if raw is None:
            return None
        try:
            return pod_update(raw)
        except KubeObjectError as exc:
            raise ClusterUnavailable(f"pod {namespace}/{name}: unreadable: {exc}") from exc
