"""A Kubernetes API double on a real loopback port: kmock plus what it lacks, for tests and ``bench kube``.

kmock (0.8) serves the API over HTTP to the real ``kubernetes`` client but has no controllers
and no subresources. Added here, with the API server's rules:

* ``pods/NAME/binding`` sets ``spec.nodeName`` (409 when already bound) and, playing the kubelet,
  marks the pod Running and Ready; who bound it (the request's User-Agent) is recorded;
* ``pods/NAME/eviction`` honours PodDisruptionBudgets (``minAvailable``/``maxUnavailable`` as
  integers; 429 when the eviction would break one) and the uid precondition (409), then deletes;
* ``nodes/NAME/status`` takes a merge patch, as the agent sends its batch capacity (kmock merges it);
* label selectors (``key``, ``key=value``) and the ``spec.nodeName=`` field selector on lists;
  PUT as a full update;
* with ``controllers=True``, the Deployment/ReplicaSet controller: pods from the template
  (fresh names, a uid, owner reference), scale up and down (pending pods first), cascade or
  orphan deletion, ``status.readyReplicas``; evicted pods of a live Deployment are replaced;
* faults: the next N requests answer a status, or the whole API goes ``dark`` (503 to everything,
  controllers paused: the cluster is cut off; its pods keep their state).

Runs in its own thread and event loop because the ``kubernetes`` client is synchronous.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering

from fedcore.kubeobjects import WORKLOAD_LABEL

PODS = kmock.resource("", "v1", "pods")
NODES = kmock.resource("", "v1", "nodes")
DEPLOYMENTS = kmock.resource("apps", "v1", "deployments")
REPLICASETS = kmock.resource("apps", "v1", "replicasets")
PDBS = kmock.resource("policy", "v1", "poddisruptionbudgets")


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value.lstrip("=")):
            return False
    return True


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "code": code, "status": "Failure",
                                      "reason": reason, "message": message}, status=code)


@attrs.define(kw_only=True)
class FedKube(kmock.KubernetesEmulator):
    """kmock's emulator plus binding, eviction with budgets, selectors, PUT, a controller and faults."""

    controllers: bool = False
    fail_next: int = 0
    fail_status: int = 503
    fail_method: str = ""  # only fail requests with this HTTP method ("" = any)
    dark: bool = False
    binders: dict[tuple[str, str], str] = attrs.field(factory=dict)
    """(namespace, pod) -> User-Agent of whoever bound it."""
    bound_at: dict[tuple[str, str], float] = attrs.field(factory=dict)
    created_at: dict[tuple[str, str], float] = attrs.field(factory=dict)
    evicted: list[tuple[str, str]] = attrs.field(factory=list)
    blocked_evictions: int = 0
    _serial: Iterator[int] = attrs.field(factory=itertools.count)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # kmock keeps every request for assertions and matches each new one by scanning them all
        # (quadratic: 45 ms per request after a few hundred, 300 ms after a few thousand); this
        # double asserts on objects, not requests, so it keeps only the one being served.
        del self._requests[:-1]
        if self.dark:
            return _status(503, "ServiceUnavailable", "the cluster is dark")
        if self.fail_next > 0 and request.resource is not None and self.fail_method in ("", request.method.value):
            self.fail_next -= 1
            return _status(self.fail_status, "Injected", "injected failure")
        path = request.url.path
        method = request.method.value
        if method == "POST" and request.resource == PODS and path.endswith("/binding"):
            return await self._bind(request, path.split("/")[-2])
        if method == "POST" and request.resource == PODS and path.endswith("/eviction"):
            return await self._evict(request, path.split("/")[-2])
        sub = getattr(request, "subresource", None) or path.rsplit("/", 1)[-1]
        if method == "PUT" and request.resource is not None and request.name and sub != "scale":
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self.objects or self.objects[key].deleted:
                    raise kmock.KubernetesObjectNotFoundError()
                self.objects[key].create(request.data)
                raw = self.objects[key].raw
            return aiohttp.web.json_response(raw)
        labels, fields = request.params.get("labelSelector"), request.params.get("fieldSelector")
        if (labels or fields) and request.action == kmock.action.LIST:
            async with self._lock:
                items = [
                    obj.raw for (res, ns, _), obj in self.objects.items()
                    if res == request.resource and not obj.deleted and (request.namespace in (None, ns))
                    and _matches(labels or "", obj.raw.get("metadata", {}).get("labels") or {})
                    and _fields(fields or "", obj.raw)
                ]
            return aiohttp.web.json_response({"metadata": {"resourceVersion": "1"}, "items": items})
        orphan = request.resource == DEPLOYMENTS and request.action == kmock.action.DELETE and "Orphan" in (
            request.params.get("propagationPolicy"), isinstance(request.data, dict) and request.data.get("propagationPolicy"))
        response = await super()._handle(request)
        if self.controllers and request.resource == DEPLOYMENTS and request.action in (
                kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE):
            async with self._lock:
                await self._reconcile(orphan_of=request.name if orphan else None)
        return response

    # -- subresources ----------------------------------------------------------------------------
    async def _bind(self, request: rendering.Request, name: str) -> aiohttp.web.StreamResponse:
        key = (PODS, request.namespace, name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                raise kmock.KubernetesObjectNotFoundError()
            if self.objects[key].get("spec", {}).get("nodeName"):
                return _status(409, "Conflict", f"pod {name} is already assigned to node "
                                                f"{self.objects[key]['spec']['nodeName']}")
            node = request.data["target"]["name"]
            self.objects[key].patch({"spec": {"nodeName": node}, "status": {  # the kubelet starts it at once
                "phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp()},
                                                   {"type": "Ready", "status": "True", "lastTransitionTime": _stamp()}]}})
            self.binders[(request.namespace or "", name)] = request.headers.get("User-Agent", "")
            self.bound_at[(request.namespace or "", name)] = time.monotonic()
            await self._buses[PODS].put({"type": "MODIFIED", "object": self.objects[key].raw})
            if self.controllers:
                await self._reconcile()
        return aiohttp.web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)

    async def _evict(self, request: rendering.Request, name: str) -> aiohttp.web.StreamResponse:
        ns = request.namespace or "default"
        key = (PODS, ns, name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                raise kmock.KubernetesObjectNotFoundError()
            pod = self.objects[key].raw
            want_uid = (((request.data or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if want_uid and want_uid != pod.get("metadata", {}).get("uid"):
                return _status(409, "Conflict", f"precondition failed: uid {want_uid} is not pod {name}'s")
            for budget in self._budgets(ns, pod):
                if not budget:
                    self.blocked_evictions += 1
                    return _status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
            self.objects[key].delete()
            self.evicted.append((ns, name))
            await self._buses[PODS].put({"type": "DELETED", "object": pod})
            if self.controllers:
                await self._reconcile()
        return aiohttp.web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)

    def _budgets(self, ns: str, pod: dict[str, Any]) -> Iterator[int]:
        """Disruptions each PodDisruptionBudget covering ``pod`` allows now (as the disruption controller counts)."""
        labels = pod.get("metadata", {}).get("labels") or {}
        for (res, bns, _), obj in list(self.objects.items()):
            if res != PDBS or bns != ns or obj.deleted:
                continue
            spec = obj.raw.get("spec") or {}
            selector = ((spec.get("selector") or {}).get("matchLabels")) or {}
            if not all(labels.get(k) == v for k, v in selector.items()):
                continue
            covered = [o.raw for (r, n, _), o in self.objects.items() if r == PODS and n == ns and not o.deleted
                       and all((o.raw.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in selector.items())]
            healthy = sum(1 for p in covered if _ready(p))
            if "minAvailable" in spec:
                yield max(0, healthy - int(spec["minAvailable"]))
            elif "maxUnavailable" in spec:
                yield max(0, int(spec["maxUnavailable"]) - (len(covered) - healthy))

    # -- the Deployment/ReplicaSet controller ----------------------------------------------------------
    async def _reconcile(self, orphan_of: str | None = None) -> None:
        """Make every Deployment own exactly ``replicas`` pods; caller holds the lock."""
        deployments = {(ns, name): obj.raw for (res, ns, name), obj in self.objects.items() if res == DEPLOYMENTS and not obj.deleted}
        owned: dict[tuple[str, str], list[tuple[Any, dict[str, Any]]]] = {}
        for key, obj in self.objects.items():
            if key[0] != PODS or obj.deleted:
                continue
            owner = next((r.get("name") for r in obj.raw.get("metadata", {}).get("ownerReferences") or []
                          if r.get("kind") == "Deployment"), None)
            if owner is not None:
                owned.setdefault((key[1] or "default", owner), []).append((key, obj.raw))
        for (ns, name), pods in owned.items():
            if (ns, name) not in deployments:  # its Deployment is gone: cascade, or let the pods go (orphan)
                for key, raw in pods:
                    if name == orphan_of:
                        self.objects[key].patch({"metadata": {"ownerReferences": None}})
                        await self._buses[PODS].put({"type": "MODIFIED", "object": self.objects[key].raw})
                    else:
                        self.objects[key].delete()
                        await self._buses[PODS].put({"type": "DELETED", "object": raw})
        for (ns, name), d in deployments.items():
            pods = [(k, p) for k, p in owned.get((ns, name), []) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
            want = int(d.get("spec", {}).get("replicas") or 0)
            for _ in range(want - len(pods)):
                await self._create_pod(ns, name, d)
            if len(pods) > want:  # the ReplicaSet deletes unscheduled pods first, then the newest
                pods.sort(key=lambda kp: (bool(kp[1].get("spec", {}).get("nodeName")), -self._age(kp[1])))
                for key, raw in pods[: len(pods) - want]:
                    self.objects[key].delete()
                    await self._buses[PODS].put({"type": "DELETED", "object": raw})
            ready = sum(1 for (_k, p) in owned.get((ns, name), []) if _ready(p) and not self.objects[_k].deleted)
            if int((d.get("status") or {}).get("readyReplicas") or 0) != ready or "replicas" not in (d.get("status") or {}):
                dkey = (DEPLOYMENTS, ns, name)
                self.objects[dkey].patch({"status": {"readyReplicas": ready, "replicas": want}})
                await self._buses[DEPLOYMENTS].put({"type": "MODIFIED", "object": self.objects[dkey].raw})

    def _age(self, pod: dict[str, Any]) -> float:
        meta = pod.get("metadata", {})
        return self.created_at.get((meta.get("namespace", ""), meta.get("name", "")), 0.0)

    async def _create_pod(self, ns: str, deployment: str, d: dict[str, Any]) -> None:
        template = copy.deepcopy(d.get("spec", {}).get("template") or {})
        meta = template.get("metadata") or {}
        name = f"{deployment}-{next(self._serial):05d}"
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {**meta, "name": name, "namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _stamp(),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment,
                                              "uid": d.get("metadata", {}).get("uid", ""), "controller": True}]},
            "spec": template.get("spec") or {},
            "status": {"phase": "Pending"},
        }
        self.objects[PODS, ns, name] = pod
        self.created_at[(ns, name)] = time.monotonic()
        await self._buses[PODS].put({"type": "ADDED", "object": self.objects[PODS, ns, name].raw})


def _stamp() -> str:
    """A timestamp as the API server writes them (RFC 3339, UTC; the double keeps microseconds)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions") or [])


def _fields(selector: str, obj: dict[str, Any]) -> bool:
    for term in filter(None, selector.split(",")):
        path, _, value = term.partition("=")
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if (current or "") != value.lstrip("="):
            return False
    return True


class KubeDouble:
    """The API double running in a background thread: ``url``, object helpers and fault knobs."""

    def __init__(self, controllers: bool = False) -> None:
        self.controllers = controllers
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.handler: FedKube | None = None
        self.url = ""
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="kube-double", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:  # open watch streams are still being served: end them before the loop goes
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with FedKube(controllers=self.controllers) as handler, kmock.Server(handler) as server:
            handler.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"binding", "status", "eviction"})
            handler.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, subresources={"status"})
            handler.resources[DEPLOYMENTS] = kmock.ResourceInfo(kind="Deployment", namespaced=True, subresources={"scale"})
            handler.resources[REPLICASETS] = kmock.ResourceInfo(kind="ReplicaSet", namespaced=True)
            handler.resources[PDBS] = kmock.ResourceInfo(kind="PodDisruptionBudget", namespaced=True)
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self.ready.set()
            await self._stop.wait()

    def start(self) -> KubeDouble:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the Kubernetes API double did not start")
        return self

    def stop(self) -> None:
        """Stop serving. Several doubles must stop in the reverse order of their start (kmock chains a resolver)."""
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(5)

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def put(self, res: Any, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        """Store an object as if created through the API (watchers see ADDED)."""
        async def go() -> None:
            assert self.handler is not None
            obj.setdefault("metadata", {}).update({"name": name, **({"namespace": ns} if ns else {})})
            self.handler.objects[res, ns, name] = obj
            await self.handler._buses[res].put({"type": "ADDED", "object": self.handler.objects[res, ns, name].raw})
        self.run(go())

    def get(self, res: Any, ns: str | None, name: str) -> dict[str, Any] | None:
        async def go() -> dict[str, Any] | None:
            assert self.handler is not None
            key = (res, ns, name)
            if key not in self.handler.objects or self.handler.objects[key].deleted:
                return None
            return json.loads(json.dumps(self.handler.objects[key].raw))
        result: dict[str, Any] | None = self.run(go())
        return result

    def items(self, res: Any) -> list[dict[str, Any]]:
        """Every live object of a resource (a copy)."""
        async def go() -> list[dict[str, Any]]:
            assert self.handler is not None
            async with self.handler._lock:
                return [json.loads(json.dumps(o.raw)) for (r, _ns, _n), o in self.handler.objects.items() if r == res and not o.deleted]
        found: list[dict[str, Any]] = self.run(go())
        return found

    def fail(self, count: int, status: int = 503, method: str = "") -> None:
        """The next ``count`` API requests (of ``method``, if given) answer ``status``."""
        assert self.handler is not None
        self.handler.fail_status = status
        self.handler.fail_method = method
        self.handler.fail_next = count

    def set_dark(self, dark: bool) -> None:
        """Cut the whole API off (503 to everything, controllers paused) or bring it back."""
        assert self.handler is not None
        self.handler.dark = dark

    def client(self, user_agent: str = "") -> Any:
        import kubernetes

        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        cfg.retries = False
        api = kubernetes.client.ApiClient(cfg)
        if user_agent:
            api.user_agent = user_agent
        return api


def workload_of(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get(WORKLOAD_LABEL, ""))


@contextmanager
def kube_double(controllers: bool = False) -> Iterator[KubeDouble]:
    double = KubeDouble(controllers).start()
    try:
        yield double
    finally:
        double.stop()
