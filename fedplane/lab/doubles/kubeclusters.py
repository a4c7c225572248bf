"""The clusters ``bench kube`` and its tests run the scenario on: API doubles, or real contexts.

A :class:`ClusterHandle` gives the scenario what it needs of one cluster: API clients (each
caller names itself in its User-Agent), the nodes agents run for, a switch that makes the whole
API go dark and come back, the pods of fedplane's workloads, who bound each, how long each waited.

* :class:`DoubleCluster`: :mod:`fedplane.lab.doubles.kubedouble` with its Deployment controller; ``dark``
  answers 503 to everything; the double records binders and timings exactly.
* :class:`RealCluster`: one kubeconfig context (kind, k3d, any cluster whose API certificate names
  127.0.0.1, as local clusters' do). Every client reaches it through :class:`TcpGate`, a loopback
  TCP relay; ``dark`` closes the relay's connections and refuses new ones (TLS passes through
  untouched). Pods with ``schedulerName: fedplane`` are bound only by agents (no other scheduler
  takes them); wait times come from the pods' creation and PodScheduled timestamps (1 s resolution).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import urllib.parse
from typing import Any, Protocol

from fedcore.kubeobjects import SCHEDULER_NAME, WORKLOAD_LABEL
from fedplane.lab.doubles.kubedouble import NODES, PDBS, PODS, KubeDouble


class ClusterHandle(Protocol):
    name: str
    namespace: str

    def client(self, user_agent: str) -> Any: ...

    def nodes(self) -> list[str]: ...

    def set_dark(self, dark: bool) -> None: ...

    def pods(self) -> list[dict[str, Any]]:
        """Live pods of fedplane's workloads (raw API dicts)."""
        ...

    def binder(self, pod: dict[str, Any]) -> str: ...

    def waits(self) -> list[float]:
        """Seconds each bound pod waited from creation to binding."""
        ...

    def add_budget(self, workload: str, max_unavailable: int) -> None: ...

    def close(self) -> None: ...


class DoubleCluster:
    def __init__(self, name: str, nodes: dict[str, dict[str, Any]], namespace: str = "default") -> None:
        self.name, self.namespace = name, namespace
        self.double = KubeDouble(controllers=True).start()
        self._nodes = list(nodes)
        for node, obj in nodes.items():
            self.double.put(NODES, None, node, obj)

    def client(self, user_agent: str) -> Any:
        return self.double.client(user_agent)

    def nodes(self) -> list[str]:
        return list(self._nodes)

    def set_dark(self, dark: bool) -> None:
        self.double.set_dark(dark)

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in self.double.items(PODS) if WORKLOAD_LABEL in ((p.get("metadata") or {}).get("labels") or {})]

    def binder(self, pod: dict[str, Any]) -> str:
        assert self.double.handler is not None
        meta = pod.get("metadata") or {}
        return self.double.handler.binders.get((meta.get("namespace", ""), meta.get("name", "")), "")

    def waits(self) -> list[float]:
        h = self.double.handler
        assert h is not None
        return [h.bound_at[k] - h.created_at[k] for k in h.bound_at if k in h.created_at]

    def add_budget(self, workload: str, max_unavailable: int) -> None:
        self.double.put(PDBS, self.namespace, f"{workload}-pdb", _budget(workload, max_unavailable))

    def close(self) -> None:
        self.double.stop()


def _budget(workload: str, max_unavailable: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"{workload}-pdb"},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {WORKLOAD_LABEL: workload}}}}


class TcpGate:
    """A loopback TCP relay to ``host:port`` that can be cut (``dark``) and restored, in its own thread."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.local_port = 0
        self.dark = False
        self.loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="tcp-gate", daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the TCP gate did not start")

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve())
        finally:  # relays still piping: hang up and let them end before the loop goes
            for w in list(self._writers):
                w.close()
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.local_port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.dark:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def set_dark(self, dark: bool) -> None:
        def apply() -> None:
            self.dark = dark
            if dark:
                for w in list(self._writers):
                    w.close()
        self.loop.call_soon_threadsafe(apply)

    def close(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(5)


class RealCluster:
    """One kubeconfig context, reached through a :class:`TcpGate` so it can be made dark."""

    def __init__(self, name: str, context: str, kubeconfig: str | None = None, namespace: str = "default") -> None:
        import kubernetes

        self.name, self.namespace, self.k8s = name, namespace, kubernetes
        self.config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=self.config)
        url = urllib.parse.urlsplit(self.config.host)
        self.gate = TcpGate(url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80))
        self._scheme = url.scheme
        self.core = kubernetes.client.CoreV1Api(self.client("fedplane-bench"))

    def client(self, user_agent: str) -> Any:
        import copy

        cfg = copy.copy(self.config)
        cfg.host = f"{self._scheme}://127.0.0.1:{self.gate.local_port}"
        api = self.k8s.client.ApiClient(cfg)
        api.user_agent = user_agent
        return api

    def nodes(self) -> list[str]:
        """Ready nodes that take ordinary pods (a NoSchedule/NoExecute taint, e.g. the control plane's, excludes one)."""
        found = json.loads(self.core.list_node(_preload_content=False).data).get("items") or []
        return [n["metadata"]["name"] for n in found
                if not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in (n.get("spec") or {}).get("taints") or [])]

    def set_dark(self, dark: bool) -> None:
        self.gate.set_dark(dark)

    def pods(self) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(self.namespace, label_selector=WORKLOAD_LABEL, _preload_content=False)
        return list(json.loads(resp.data).get("items") or [])

    def binder(self, pod: dict[str, Any]) -> str:
        """Only agents bind pods with our schedulerName; anything else was bound by another scheduler."""
        ours = (pod.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
        return "fedplane-agent" if ours else str((pod.get("spec") or {}).get("schedulerName", ""))

    def waits(self) -> list[float]:
        out = []
        for p in self.pods():
            created = (p.get("metadata") or {}).get("creationTimestamp")
            scheduled = next((c.get("lastTransitionTime") for c in (p.get("status") or {}).get("conditions") or []
                              if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
            if created and scheduled:
                out.append((_when(scheduled) - _when(created)).total_seconds())
        return out

    def add_budget(self, workload: str, max_unavailable: int) -> None:
        policy = self.k8s.client.PolicyV1Api(self.client("fedplane-bench"))
        try:
            policy.create_namespaced_pod_disruption_budget(self.namespace, _budget(workload, max_unavailable))
        except self.k8s.client.ApiException as exc:
            if exc.status != 409:
                raise

    def remove_leftovers(self, workloads: list[str]) -> None:
        """Delete what the scenario created (Deployments, budgets), so a rerun starts clean."""
        apps, policy = self.k8s.client.AppsV1Api(self.client("fedplane-bench")), self.k8s.client.PolicyV1Api(self.client("fedplane-bench"))
        for w in workloads:
            for delete in (lambda: apps.delete_namespaced_deployment(w, self.namespace),
                           lambda: policy.delete_namespaced_pod_disruption_budget(f"{w}-pdb", self.namespace)):
                try:
                    delete()
                except self.k8s.client.ApiException:
                    pass

    def close(self) -> None:
        self.gate.close()


def _when(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
