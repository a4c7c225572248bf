"""A kmock Kubernetes API double on a real loopback port, with the handlers kmock lacks.

Added: pod binding (``POST .../pods/NAME/binding`` sets ``spec.nodeName``), PUT/replace (as a
full update), label selectors on lists (``key`` and ``key=value``), and a fault switch that makes
the server answer 5xx (or 409) for a number of requests. It runs in its own thread and event loop
because the ``kubernetes`` client is synchronous.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering

PODS = kmock.resource("", "v1", "pods")
NODES = kmock.resource("", "v1", "nodes")
DEPLOYMENTS = kmock.resource("apps", "v1", "deployments")


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


@attrs.define(kw_only=True)
class FedKube(kmock.KubernetesEmulator):
    """kmock's emulator plus binding, PUT, label selectors and injected failures."""

    fail_next: int = 0
    fail_status: int = 503
    fail_method: str = ""  # only fail requests with this HTTP method ("" = any)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if self.fail_next > 0 and request.resource is not None and self.fail_method in ("", request.method.value):
            self.fail_next -= 1
            return aiohttp.web.json_response(
                {"kind": "Status", "apiVersion": "v1", "code": self.fail_status, "status": "Failure",
                 "reason": "Injected", "message": "injected failure"}, status=self.fail_status)
        sub = getattr(request, "subresource", None) or request.url.path.rsplit("/", 1)[-1]
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
        if request.method.value == "PUT" and request.resource is not None and request.name and sub != "scale":
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self.objects or self.objects[key].deleted:
                    raise kmock.KubernetesObjectNotFoundError()
                self.objects[key].create(request.data)
                raw = self.objects[key].raw
            return aiohttp.web.json_response(raw)
        selector = request.params.get("labelSelector")
        if selector and request.action == kmock.action.LIST:
            async with self._lock:
                items = [
                    obj.raw for (res, ns, _), obj in self.objects.items()
                    if res == request.resource and not obj.deleted and (request.namespace in (None, ns))
                    and _matches(selector, obj.raw.get("metadata", {}).get("labels") or {})
                ]
            return aiohttp.web.json_response({"metadata": {"resourceVersion": "1"}, "items": items})
        return await super()._handle(request)


class KubeDouble:
    """The API double running in a background thread: ``url``, object helpers and fault knobs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.handler: FedKube | None = None
        self.url = ""
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with FedKube() as handler, kmock.Server(handler) as server:
            handler.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"binding", "status"})
            handler.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
            handler.resources[DEPLOYMENTS] = kmock.ResourceInfo(kind="Deployment", namespaced=True, subresources={"scale"})
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self.ready.set()
            await self._stop.wait()

    def start(self) -> KubeDouble:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("kmock did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(5)

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def put(self, res: Any, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        async def go() -> None:
            assert self.handler is not None
            obj.setdefault("metadata", {}).update({"name": name, **({"namespace": ns} if ns else {})})
            self.handler.objects[res, ns, name] = obj
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

    def fail(self, count: int, status: int = 503, method: str = "") -> None:
        """The next ``count`` API requests (of ``method``, if given) answer ``status``."""
        assert self.handler is not None
        self.handler.fail_status = status
        self.handler.fail_method = method
        self.handler.fail_next = count

    def client(self) -> Any:
        import kubernetes

        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        cfg.retries = False
        return kubernetes.client.ApiClient(cfg)


@contextmanager
def kube_double() -> Iterator[KubeDouble]:
    double = KubeDouble().start()
    try:
        yield double
    finally:
        double.stop()
