"""The Kubernetes back end: workloads as Deployments through the official ``kubernetes`` client.

One instance per kubeconfig context and namespace. The fencing epoch rides as the annotation
``fedplane.io/epoch`` on the Deployment and its pod template; pods are found by the label
``fedplane.io/workload``. Client exceptions are mapped to the back-end error taxonomy so callers
retry 409/5xx/timeouts and stop on 4xx. This is the only module that imports ``kubernetes``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fedcore import kubeobjects
from fedcore.backends import errors, fencing
from fedcore.backends.model import (
    BindOutcome, BindResult, EventKind, EvictOutcome, EvictResult, NodeState, Phase, PodEvent, PodState, Workload, WorkloadSpec, check_name,
)
from fedcore.kubeobjects import EPOCH_ANNOTATION, GPU_RESOURCE, WORKLOAD_LABEL, KubeObjectError

T = TypeVar("T")
TIMEOUT_S = 5.0


def _client() -> Any:
    try:
        import kubernetes
    except ImportError as exc:  # pragma: no cover - the 'full' extra
        raise RuntimeError("the Kubernetes back end needs the client: pip install 'fedplane[full]'") from exc
    return kubernetes


def _contexts(kubeconfig: str | None) -> list[dict[str, Any]]:
    k8s = _client()
    try:
        found, _active = k8s.config.list_kube_config_contexts(config_file=kubeconfig)
    except (k8s.config.ConfigException, OSError) as exc:
        raise ValueError(f"cannot read kubeconfig {kubeconfig or '$KUBECONFIG'}: {exc}") from exc
    return list(found)


def contexts(kubeconfig: str | None = None) -> list[str]:
    """Context names in a kubeconfig (each becomes one cluster)."""
    return [c["name"] for c in _contexts(kubeconfig)]


class KubernetesCluster:
    """One Kubernetes cluster (context) as a :class:`fedcore.backends.contract.ClusterBackend`."""

    def __init__(self, name: str, api_client: Any, namespace: str = "default") -> None:
        check_name("cluster", name)
        k8s = _client()
        self.name = name
        self.namespace = namespace
        self.k8s = k8s
        self.apps = k8s.client.AppsV1Api(api_client)
        self.core = k8s.client.CoreV1Api(api_client)

    @classmethod
    def from_kubeconfig(cls, context: str, kubeconfig: str | None = None, namespace: str | None = None, name: str | None = None) -> KubernetesCluster:
        """One context of a kubeconfig; the namespace is the argument, else the context's, else ``default``."""
        k8s = _client()
        entry = next((c for c in _contexts(kubeconfig) if c["name"] == context), None)
        if entry is None:
            raise errors.UnknownCluster(context, f"no context {context!r} in {kubeconfig or '$KUBECONFIG'}")
        api = k8s.config.new_client_from_config(config_file=kubeconfig, context=context)
        return cls(name or context, api, namespace or entry["context"].get("namespace") or "default")

    # -- ClusterBackend ------------------------------------------------------------------------
    def create_workload(self, spec: WorkloadSpec) -> Workload:
        body = self.manifest(spec)
        return self._workload(self._call(lambda: self.apps.create_namespaced_deployment(self.namespace, body, _request_timeout=TIMEOUT_S)))

    def get_workload(self, name: str) -> Workload:
        return self._workload(self._call(lambda: self.apps.read_namespaced_deployment(name, self.namespace, _request_timeout=TIMEOUT_S)))

    def list_workloads(self) -> list[Workload]:
        found = self._call(lambda: self.apps.list_namespaced_deployment(
            self.namespace, label_selector=WORKLOAD_LABEL, _request_timeout=TIMEOUT_S))
        return [self._workload(d) for d in found.items if WORKLOAD_LABEL in (d.metadata.labels or {})]

    def scale_workload(self, name: str, replicas: int) -> Workload:
        if replicas < 0:
            raise errors.InvalidRequest(self.name, f"replicas must be >= 0, got {replicas}")
        self._call(lambda: self.apps.patch_namespaced_deployment_scale(
            name, self.namespace, {"spec": {"replicas": replicas}}, _request_timeout=TIMEOUT_S))
        return self.get_workload(name)

    def delete_workload(self, name: str, orphan_pods: bool = False) -> None:
        """Delete the Deployment; ``orphan_pods`` keeps its pods (and ReplicaSets), for eviction one by one."""
        policy = "Orphan" if orphan_pods else "Background"
        self._call(lambda: self.apps.delete_namespaced_deployment(name, self.namespace, propagation_policy=policy,
                                                                  _request_timeout=TIMEOUT_S))
        if orphan_pods:  # a live ReplicaSet would replace every pod we evict
            sets = self._call(lambda: self.apps.list_namespaced_replica_set(
                self.namespace, label_selector=f"{WORKLOAD_LABEL}={name}", _request_timeout=TIMEOUT_S))
            for rs in sets.items:
                try:
                    self._call(lambda: self.apps.delete_namespaced_replica_set(
                        rs.metadata.name, self.namespace, propagation_policy="Orphan", _request_timeout=TIMEOUT_S))
                except errors.NotFound:
                    pass

    def list_pods(self, workload: str | None = None) -> list[PodState]:
        selector = f"{WORKLOAD_LABEL}={workload}" if workload else WORKLOAD_LABEL
        found = self._call(lambda: self.core.list_namespaced_pod(self.namespace, label_selector=selector, _preload_content=False,
                                                                 _request_timeout=TIMEOUT_S))
        states = [self._pod(p) for p in json.loads(found.data).get("items") or []]
        # Filter again on our side: the selector is a request, and API doubles may ignore it.
        return [s for s in states if s.workload and (workload is None or s.workload == workload)]

    def list_nodes(self) -> list[NodeState]:
        found = self._call(lambda: self.core.list_node(_preload_content=False, _request_timeout=TIMEOUT_S))
        return [self._node(n) for n in json.loads(found.data).get("items") or []]

    def bind_pod(self, pod: str, node: str, epoch: int) -> BindResult:
        """A Binding for a pod with ``schedulerName: fedplane``, fenced by the pod's epoch annotation."""
        state = self._read_pod(pod)
        refused = fencing.fence(pod, node, epoch, None if state is None else fencing.Seen(state.epoch, state.node, state.phase.value))
        if refused is not None:
            return refused
        assert state is not None
        problem = self._room(node, pod)
        if problem:
            return BindResult(BindOutcome.REJECTED, node, state.epoch, problem)
        body = self.k8s.client.V1Binding(
            metadata=self.k8s.client.V1ObjectMeta(name=pod, namespace=self.namespace),
            target=self.k8s.client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self._call(lambda: self.core.create_namespaced_pod_binding(pod, self.namespace, body, _preload_content=False, _request_timeout=TIMEOUT_S))
        except errors.Conflict:  # bound meanwhile: by whom decides the answer
            after = self._read_pod(pod)
            holder = after.node if after is not None else ""
            return BindResult(BindOutcome.ALREADY_BOUND if holder == node else BindOutcome.DUPLICATE, holder, state.epoch, "conflict")
        except (errors.NotFound, errors.InvalidRequest) as exc:
            return BindResult(BindOutcome.REJECTED, node, state.epoch, str(exc))
        return BindResult(BindOutcome.BOUND, node, state.epoch)

    def evict_pod(self, pod: str, epoch: int) -> EvictResult:
        """The Eviction API (PodDisruptionBudgets apply: 429 is BLOCKED), only while the pod is at ``epoch``."""
        raw = self._read_raw(pod)
        if raw is None:
            return EvictResult(EvictOutcome.GONE, f"pod {pod} does not exist")
        state = self._pod(raw)
        if state.phase in (Phase.SUCCEEDED, Phase.FAILED):
            return EvictResult(EvictOutcome.GONE, f"pod {pod} is {state.phase.value}")
        if epoch != state.epoch:
            return EvictResult(EvictOutcome.STALE_EPOCH, f"pod is at epoch {state.epoch}, not {epoch}")
        client = self.k8s.client
        uid = (raw.get("metadata") or {}).get("uid")
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod, namespace=self.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None)
        try:
            self.core.create_namespaced_pod_eviction(pod, self.namespace, body, _preload_content=False, _request_timeout=TIMEOUT_S)
        except self.k8s.client.ApiException as exc:
            if exc.status == 404:
                return EvictResult(EvictOutcome.GONE, "deleted meanwhile")
            if exc.status == 409:
                return EvictResult(EvictOutcome.STALE_EPOCH, "the pod was replaced meanwhile")
            if exc.status == 429:
                return EvictResult(EvictOutcome.BLOCKED, "a PodDisruptionBudget forbids it now")
            raise self._error(exc) from exc
        except Exception as exc:
            if self._is_network_error(exc):
                raise errors.Unreachable(self.name, f"API server unreachable: {type(exc).__name__}: {exc}") from exc
            raise
        return EvictResult(EvictOutcome.EVICTED)

    def watch_pods(self, timeout_s: float) -> Iterator[PodEvent]:
        watch = self.k8s.watch.Watch()
        try:
            for raw in watch.stream(self.core.list_namespaced_pod, self.namespace, label_selector=WORKLOAD_LABEL,
                                    timeout_seconds=max(1, int(timeout_s)), _request_timeout=timeout_s + 1):
                state = self._pod(raw["object"])
                if state.workload:
                    yield PodEvent(EventKind(raw["type"]), state)
        except self.k8s.client.ApiException as exc:
            raise self._error(exc) from exc
        except Exception as exc:  # urllib3 read timeouts end a watch like its timeout does
            if not self._is_network_error(exc):
                raise
        finally:
            watch.stop()

    # -- mapping -------------------------------------------------------------------------------
    def manifest(self, spec: WorkloadSpec) -> dict[str, Any]:
        """The Deployment for a workload spec (plain dict, so it can be validated and shown)."""
        labels = {WORKLOAD_LABEL: spec.name}
        annotations = {EPOCH_ANNOTATION: str(spec.epoch)}
        if spec.priority:
            annotations[kubeobjects.PRIORITY_ANNOTATION] = str(spec.priority)
        pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": spec.image, "resources": self._resources(spec)}]}
        if spec.scheduler_name:
            pod_spec["schedulerName"] = spec.scheduler_name
        if spec.qos == "batch":
            pod_spec["priorityClassName"] = kubeobjects.BATCH_PRIORITY_CLASS
        selector = {**spec.node_selector, **({kubeobjects.GPU_PRODUCT_LABEL: spec.gpu_model} if spec.gpu_model else {})}
        if selector:
            pod_spec["nodeSelector"] = selector
        if spec.archs:
            term = {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": sorted(spec.archs)}]}
            pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        if spec.tolerations:
            pod_spec["tolerations"] = [
                {"key": k, "operator": "Equal" if v else "Exists", **({"value": v} if v else {}), **({"effect": e} if e else {})}
                for k, v, e in spec.tolerations
            ]
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": spec.name, "namespace": self.namespace, "labels": labels, "annotations": annotations},
            "spec": {
                "replicas": spec.replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": {**labels, kubeobjects.QOS_LABEL: spec.qos}, "annotations": annotations}, "spec": pod_spec},
            },
        }

    @staticmethod
    def _resources(spec: WorkloadSpec) -> dict[str, Any]:
        """The container's resources. A batch workload asks Koordinator's batch resources, in requests and limits, and
        no ``cpu``/``memory``: kubelet classes its pods BestEffort (the cgroup the agent caps) and admits them against
        the node's batch capacity the agent advertises, not the CPU online pods are admitted against."""
        if spec.qos != "batch":
            requests = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}
            return {"requests": {**requests, **({GPU_RESOURCE: str(spec.gpus)} if spec.gpus else {})}}
        batch = {kubeobjects.BATCH_CPU_RESOURCE: str(spec.cpu_milli), kubeobjects.BATCH_MEMORY_RESOURCE: str(spec.memory_mib * kubeobjects.MIB),
                 **({GPU_RESOURCE: str(spec.gpus)} if spec.gpus else {})}
        return {"requests": batch, "limits": dict(batch)}  # extended resources need the limit equal to the request

    def _workload(self, d: Any) -> Workload:
        d = self._dict(d)
        meta, spec = d.get("metadata", {}), d.get("spec", {})
        template = spec.get("template", {}).get("spec", {})
        where = f"deployment {self.namespace}/{meta.get('name')}"
        try:
            requests = kubeobjects.effective_requests(template, where)
            epoch = kubeobjects.epoch_of(meta, where)
            qos = kubeobjects.qos_class(spec.get("template", {}).get("metadata", {}), where)
            archs = tuple(sorted(a.value for a in kubeobjects.pod_archs(template, where)))
            tolerations = tuple((x.key, x.value or "", x.effect.value if x.effect else "") for x in kubeobjects.tolerations(template, where))
        except KubeObjectError as exc:
            raise errors.InvalidRequest(self.name, str(exc)) from None
        selector = {k: v for k, v in (template.get("nodeSelector") or {}).items() if k != kubeobjects.ARCH_LABEL}
        gpu_model = selector.pop(kubeobjects.GPU_PRODUCT_LABEL, "")
        ws = WorkloadSpec(
            meta["name"], int(spec.get("replicas", 0)), requests.cpu_milli, requests.memory_mib, requests.gpus, epoch,
            ((template.get("containers") or [{}])[0]).get("image", ""), template.get("schedulerName", ""), selector,
            gpu_model=gpu_model, archs=archs, tolerations=tolerations, priority=kubeobjects.annotated_priority(meta), qos=qos,
        )
        return Workload(ws, int((d.get("status") or {}).get("readyReplicas") or 0))

    def _pod(self, p: Any) -> PodState:
        """A pod; one we cannot read is reported with what we could read (never placed by us, never a crash)."""
        p = self._dict(p)
        try:
            pod = kubeobjects.read_pod(p)
        except KubeObjectError:
            meta = p.get("metadata") or {}
            return PodState(meta.get("name", ""), (meta.get("labels") or {}).get(WORKLOAD_LABEL, ""), 1, Phase.PENDING)
        phase = Phase(pod.phase) if pod.phase != "Unknown" else Phase.PENDING
        return PodState(pod.name, pod.workload, pod.epoch, phase, pod.ready, pod.node, pod.requests.resources, pod.to_pod())

    def _node(self, n: Any) -> NodeState:
        node = kubeobjects.read_node(self._dict(n))
        return NodeState(node.name, node.capacity, node.ready, node.arch.value if node.arch else node.arch_label,
                         node.labels, node.problem, None if node.problem or node.arch is None else node.to_node())

    def _read_raw(self, pod: str) -> dict[str, Any] | None:
        try:
            resp = self._call(lambda: self.core.read_namespaced_pod(pod, self.namespace, _preload_content=False, _request_timeout=TIMEOUT_S))
        except errors.NotFound:
            return None
        raw: dict[str, Any] = json.loads(resp.data)
        return raw

    def _room(self, node: str, pod: str) -> str:
        """Why the pod cannot go to the node now ("" if it fits), as the scheduler would count it."""
        try:
            raw_node = json.loads(self._call(lambda: self.core.read_node(node, _preload_content=False, _request_timeout=TIMEOUT_S)).data)
        except errors.NotFound:
            return f"node {node} does not exist"
        raw_pod = self._read_raw(pod) or {}
        on_node = json.loads(self._call(lambda: self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False, _request_timeout=TIMEOUT_S)).data).get("items") or []
        try:
            wants = kubeobjects.effective_requests(raw_pod.get("spec") or {}, f"pod {pod}")
        except KubeObjectError as exc:
            return str(exc)
        return kubeobjects.room_problem(kubeobjects.read_node(raw_node), on_node, wants, pod)

    def _read_pod(self, pod: str) -> PodState | None:
        raw = self._read_raw(pod)
        return None if raw is None else self._pod(raw)

    def _dict(self, obj: Any) -> dict[str, Any]:
        """Client models and watch payloads both as camelCase dicts."""
        if isinstance(obj, dict):
            return obj
        out: dict[str, Any] = self.apps.api_client.sanitize_for_serialization(obj)
        return out

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except self.k8s.client.ApiException as exc:
            raise self._error(exc) from exc
        except Exception as exc:
            if self._is_network_error(exc):
                raise errors.Unreachable(self.name, f"API server unreachable: {type(exc).__name__}: {exc}") from exc
            raise

    def _error(self, exc: Any) -> errors.BackendError:
        status, reason = int(exc.status or 0), f"{exc.status} {exc.reason}"
        if status == 409:
            return errors.Conflict(self.name, reason)
        if status == 404:
            return errors.NotFound(self.name, reason)
        if status in (400, 422):
            return errors.InvalidRequest(self.name, f"{reason}: {str(exc.body)[:300]}")
        if status == 0 or status >= 500 or status == 429:
            return errors.ServerError(self.name, reason)
        return errors.InvalidRequest(self.name, reason)

    @staticmethod
    def _is_network_error(exc: Exception) -> bool:
        import urllib3

        return isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError))

