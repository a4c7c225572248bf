"""Kubernetes pods and nodes as fedplane reads them: one home for both adapters.

The control plane's back end (:mod:`fedcore.backends.kubernetes`) and the edge agent's
(:mod:`edgeagent.kube`) read the same API objects, so they read them here, from the
plain camelCase dicts the API serves (``ApiClient.sanitize_for_serialization`` turns
client models into these). What is read the way Kubernetes itself reads it:

* quantities: every suffix (``m``, ``k``..``E``, ``Ki``..``Ei``, exponents); requests
  round up, capacities round down, as the scheduler's milli values do;
* Koordinator's batch resources (``kubernetes.io/batch-cpu`` in millicores, ``batch-memory``
  in bytes) as CPU and memory, their part kept apart for the kubelet's admission rule;
* a pod's effective request, as kube-scheduler computes it: the larger of the regular
  containers plus restartable (sidecar) init containers, and the largest init step
  (an init container plus the sidecars started before it), plus the pod overhead;
* the architectures a pod may run on: ``kubernetes.io/arch`` in its nodeSelector and in
  the required node-affinity terms (terms are ORed, expressions within one ANDed);
* taints, tolerations (``Exists`` / ``Equal``), node readiness, the fencing epoch
  annotation and the workload label the control plane sets.

No ``kubernetes`` import: both adapters pass dicts, tests pass literals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, DecimalException
from typing import Any

from fedcore.nodes import Arch, Node, Taint, TaintEffect
from fedcore.pods import Pod, QoS, Toleration, qos_of
from fedcore.resources import MILLI, GpuRequest, Resources

EPOCH_ANNOTATION = "fedplane.io/epoch"
"""The fencing epoch a pod was created at (on the Deployment, its template and so its pods)."""
PRIORITY_ANNOTATION = "fedplane.io/priority"
"""A workload's priority for the agents (``spec.priority`` itself is set only through a PriorityClass)."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The GPU model of a node (NVIDIA's GPU feature discovery sets it); a pod that needs a model selects it."""
WORKLOAD_LABEL = "fedplane.io/workload"
QOS_LABEL = "fedplane.io/qos"
"""A fedplane pod's class (online, batch), Koordinator's ``koordinator.sh/qosClass`` in spirit."""
BATCH_PRIORITY_CLASS = "fedplane-batch"
"""The PriorityClass batch pods name (deploy/k8s/priorityclasses.yaml; Koordinator's koord-batch): below every unclassed pod,
never preempting. Online pods name none, so their ``spec.priority`` stays the workload's own (``fedplane.io/priority``)."""
SCHEDULER_NAME = "fedplane"
"""``spec.schedulerName`` of the pods edge agents place (kube-scheduler leaves them alone)."""
ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
GPU_RESOURCE = "nvidia.com/gpu"
BATCH_CPU_RESOURCE = "kubernetes.io/batch-cpu"
"""Koordinator's batch CPU, in millicores (a whole number): a batch pod asks it instead of ``cpu``, so kubelet classes the
pod BestEffort (its cgroup is the one the agent caps) and admits it against the node's advertised batch capacity."""
BATCH_MEMORY_RESOURCE = "kubernetes.io/batch-memory"
"""Koordinator's batch memory, in bytes (a whole number), asked instead of ``memory`` as :data:`BATCH_CPU_RESOURCE` is."""
MIB = 2**20

_ARCHS = {"amd64": Arch.AMD64, "x86_64": Arch.AMD64, "arm64": Arch.ARM64, "aarch64": Arch.ARM64,
          "arm": Arch.ARMV7, "armv7": Arch.ARMV7, "armv7l": Arch.ARMV7, "armhf": Arch.ARMV7}
_SUFFIXES = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity read (Kubernetes keeps values in an int64, and CPU's milli-values too): nothing larger is a real
request or capacity, and a number like ``1e400`` would later ask the scheduler for the impossible."""
MAX_EPOCH = 2**63 - 1
_EPOCH = re.compile(r"^[0-9]{1,19}$")
"""ASCII digits only: ``int()`` would also take ``1_000``, ``٣`` or surrounding spaces."""
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
"""``spec.priority`` is an int32 in the API."""


class KubeObjectError(ValueError):
    """An API object fedplane cannot read; the message names the object and the field."""


# ---- quantities ----------------------------------------------------------------------------------


def quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", "1.5", "1e3", "2T") as an exact non-negative number."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise KubeObjectError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        scale = _SUFFIXES[suffix] if suffix in _SUFFIXES else Decimal(10) ** int(suffix[1:])  # else an exponent
        amount = Decimal(number) * scale
    except (DecimalException, OverflowError, ValueError) as exc:
        raise KubeObjectError(f"not a Kubernetes quantity: {_short(value)}") from exc
    if amount < 0:
        raise KubeObjectError(f"negative quantity: {_short(value)}")
    if amount > MAX_QUANTITY:
        raise KubeObjectError(f"quantity {_short(value)} is over the largest Kubernetes keeps ({MAX_QUANTITY:.3e})")
    return amount


def _short(value: object) -> str:
    """A value for an error message, at most 40 characters of it."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def cpu_milli(value: str | int | float, up: bool = True) -> int:
    """CPU in millicores: requests round up (``0.0001`` asks for 1m), capacities round down."""
    milli = quantity(value) * MILLI
    if milli > MAX_QUANTITY:
        raise KubeObjectError(f"cpu {_short(value)} is over the largest Kubernetes keeps ({MAX_QUANTITY / MILLI:.3e} cores)")
    return int(math.ceil(milli) if up else math.floor(milli))


def memory_mib(value: str | int | float, up: bool = True) -> int:
    """Bytes as MiB: requests round up (a pod never gets less than it asked), capacities round down."""
    mib = quantity(value) / MIB
    return int(math.ceil(mib) if up else math.floor(mib))


def whole(value: str | int | float, what: str) -> int:
    """An extended resource (GPUs): Kubernetes allows only whole numbers of them."""
    amount = quantity(value)
    if amount != amount.to_integral_value():
        raise KubeObjectError(f"{what} must be a whole number, got {value!r}")
    return int(amount)


def batch_cpu_milli(value: str | int | float) -> int:
    """:data:`BATCH_CPU_RESOURCE`: already millicores, and whole (an extended resource)."""
    return whole(value, BATCH_CPU_RESOURCE)


def batch_memory_mib(value: str | int | float, up: bool = True) -> int:
    """:data:`BATCH_MEMORY_RESOURCE` (whole bytes) as MiB: requests round up, capacities round down."""
    size = whole(value, BATCH_MEMORY_RESOURCE)
    return -(-size // MIB) if up else size // MIB


@dataclass(frozen=True, slots=True)
class Requests:
    """What a pod needs on a node: CPU, memory, whole GPUs.

    ``cpu_milli`` and ``memory_mib`` are the pod's whole size, batch resources included, so whatever accounts pods sees
    a batch pod's real size; ``batch_cpu_milli`` and ``batch_memory_mib`` say how much of it was asked as
    :data:`BATCH_CPU_RESOURCE` / :data:`BATCH_MEMORY_RESOURCE`, which kubelet admits against the node's batch capacity
    instead of its ``cpu`` and ``memory`` (:func:`room_problem`).
    """

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    batch_cpu_milli: int = 0
    batch_memory_mib: int = 0

    @property
    def regular(self) -> tuple[int, int]:
        """``(cpu_milli, memory_mib)`` asked as ``cpu`` and ``memory``."""
        return self.cpu_milli - self.batch_cpu_milli, self.memory_mib - self.batch_memory_mib

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu_milli + other.cpu_milli, self.memory_mib + other.memory_mib, self.gpus + other.gpus,
                        self.batch_cpu_milli + other.batch_cpu_milli, self.batch_memory_mib + other.batch_memory_mib)

    def max(self, other: Requests) -> Requests:
        """The larger of each resource name, as kube-scheduler takes it (regular and batch apart)."""
        (cpu, mem), (other_cpu, other_mem) = self.regular, other.regular
        batch_cpu, batch_mem = max(self.batch_cpu_milli, other.batch_cpu_milli), max(self.batch_memory_mib, other.batch_memory_mib)
        return Requests(max(cpu, other_cpu) + batch_cpu, max(mem, other_mem) + batch_mem, max(self.gpus, other.gpus),
                        batch_cpu, batch_mem)

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu_milli, self.memory_mib, 0, self.gpus * MILLI)


def _requests(resources: Mapping[str, Any] | None, where: str) -> Requests:
    """A container's (or overhead's) requests; a limit without a request counts as the request, as in Kubernetes."""
    resources = resources or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    try:
        batch_cpu = batch_cpu_milli(wanted.get(BATCH_CPU_RESOURCE, 0))
        batch_mem = batch_memory_mib(wanted.get(BATCH_MEMORY_RESOURCE, 0))
        return Requests(cpu_milli(wanted.get("cpu", 0)) + batch_cpu, memory_mib(wanted.get("memory", 0)) + batch_mem,
                        whole(wanted.get(GPU_RESOURCE, 0), GPU_RESOURCE), batch_cpu, batch_mem)
    except KubeObjectError as exc:
        raise KubeObjectError(f"{where}: {exc}") from None


def effective_requests(spec: Mapping[str, Any], where: str = "pod") -> Requests:
    """The pod's request as kube-scheduler computes it (sidecars, init steps, overhead)."""
    total = Requests()
    for i, c in enumerate(spec.get("containers") or []):
        total = total + _requests(c.get("resources"), f"{where} container {c.get('name', i)}")
    sidecars = Requests()
    init_peak = Requests()
    for i, c in enumerate(spec.get("initContainers") or []):
        own = _requests(c.get("resources"), f"{where} init container {c.get('name', i)}")
        if c.get("restartPolicy") == "Always":  # a sidecar: runs alongside everything started after it
            total = total + own
            sidecars = sidecars + own
            step = sidecars
        else:
            step = own + sidecars
        init_peak = init_peak.max(step)
    total = total.max(init_peak)
    overhead = spec.get("overhead")
    if overhead:
        total = total + _requests({"requests": overhead}, f"{where} overhead")
    return total


# ---- architectures, taints, tolerations ------------------------------------------------------------


def arch_of(label: str | None) -> Arch | None:
    """A ``kubernetes.io/arch`` label value as fedplane's arch (``arm`` is armv7); None when unknown."""
    return _ARCHS.get((label or "").strip().lower())


def pod_archs(spec: Mapping[str, Any], where: str = "pod") -> frozenset[Arch]:
    """Architectures the pod may run on (empty: any), from nodeSelector and required node affinity."""
    allowed = set(Arch)
    selector = (spec.get("nodeSelector") or {}).get(ARCH_LABEL)
    if selector is not None:
        allowed &= _archs_in([selector], where)
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:  # terms are ORed; the expressions of one term are ANDed
        union: set[Arch] = set()
        for term in terms:
            here = set(Arch)
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") != ARCH_LABEL:
                    continue
                op, values = expr.get("operator"), expr.get("values") or []
                if op == "In":
                    here &= _archs_in(values, where, strict=False)
                elif op == "NotIn":
                    here -= _archs_in(values, where, strict=False)
                elif op == "DoesNotExist":
                    here = set()
            union |= here
        allowed &= union
    if not allowed:
        raise KubeObjectError(f"{where}: no architecture fedplane knows satisfies its arch constraints")
    return frozenset() if allowed == set(Arch) else frozenset(allowed)


def _archs_in(values: list[str], where: str, strict: bool = True) -> set[Arch]:
    found = {a for a in (arch_of(v) for v in values) if a is not None}
    if strict and not found:
        raise KubeObjectError(f"{where}: unknown architecture {values[0]!r} in nodeSelector")
    return found


def _effect(value: Any, where: str) -> TaintEffect | None:
    if not value:
        return None
    try:
        return TaintEffect(value)
    except ValueError:
        raise KubeObjectError(f"{where}: unknown taint effect {value!r}") from None


def tolerations(spec: Mapping[str, Any], where: str = "pod") -> tuple[Toleration, ...]:
    """``Exists`` tolerates any value; an empty key with ``Exists`` would tolerate every taint (kept as key "")."""
    out = []
    for t in spec.get("tolerations") or []:
        exists = t.get("operator") == "Exists"
        out.append(Toleration(t.get("key") or "", None if exists else (t.get("value") or ""), _effect(t.get("effect"), where)))
    return tuple(out)


def taints(spec: Mapping[str, Any], where: str = "node") -> tuple[Taint, ...]:
    out = []
    for t in spec.get("taints") or []:
        effect = _effect(t.get("effect"), where)
        if effect is None:
            raise KubeObjectError(f"{where}: a taint without an effect")
        out.append(Taint(t.get("key") or "", t.get("value") or "", effect))
    return tuple(out)


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


# ---- pods -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubePod:
    """One pod: identity, fencing epoch, where it is bound and what it needs."""

    namespace: str
    name: str
    workload: str
    epoch: int
    phase: str
    node: str
    scheduler_name: str
    ready: bool
    deleting: bool
    requests: Requests
    archs: frozenset[Arch] = frozenset()
    node_selector: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    uid: str = ""
    """``metadata.uid``: which incarnation of the name this is."""
    gpu_model: str = ""
    """The GPU model it selects (:data:`GPU_PRODUCT_LABEL`), "" for any."""
    qos: QoS = QoS.LATENCY_SENSITIVE
    """From :data:`QOS_LABEL` (online when absent: a pod nobody classed is never put on reclaimed capacity)."""

    @property
    def key(self) -> str:
        """``namespace/name~incarnation``: the agent's pod uid (see :func:`pod_key`)."""
        return pod_key(self.namespace, self.name, self.uid)

    def to_pod(self, uid: str | None = None) -> Pod:
        return Pod(uid or self.key, self.requests.cpu_milli, self.requests.memory_mib,
                   gpu=GpuRequest(self.requests.gpus, MILLI if self.requests.gpus else 0),
                   node_selector=dict(self.node_selector), archs=self.archs, tolerations=self.tolerations,
                   priority=self.priority, workload=self.workload, gpu_model=self.gpu_model, qos=self.qos)


INCARNATION = "~"
"""Separates a pod's name from its incarnation in the agent's uid (never in a DNS-1123 name)."""


def pod_key(namespace: str, name: str, uid: str = "") -> str:
    """The agent's pod uid: ``namespace/name``, with the first 8 characters of ``metadata.uid`` after a ``~``.

    A StatefulSet re-creates a pod under the same name; agents' placement claims are keyed by this uid and a
    claim that completed is over for good, so without the incarnation the new pod would never be placed.
    """
    return f"{namespace}/{name}{INCARNATION}{uid[:8]}" if uid else f"{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)`` of an agent's pod uid (:func:`pod_key`)."""
    namespace, _, rest = key.partition("/")
    return namespace, rest.partition(INCARNATION)[0]


def epoch_of(meta: Mapping[str, Any], where: str) -> int:
    raw = (meta.get("annotations") or {}).get(EPOCH_ANNOTATION, "1")
    text = str(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) else ""
    if not _EPOCH.match(text.strip()) or not 1 <= int(text) <= MAX_EPOCH:
        raise KubeObjectError(f"{where}: annotation {EPOCH_ANNOTATION}={_short(raw)} must be an integer in 1..{MAX_EPOCH}")
    return int(text)


def _names(meta: Any) -> tuple[str, str]:
    """``(namespace, name)`` of an object, whatever shape its metadata has ("" where unreadable)."""
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not isinstance(namespace, str):
        return "", ""
    return namespace, name


def read_pod(obj: Mapping[str, Any]) -> KubePod:
    """A pod dict as fedplane sees it; raises :class:`KubeObjectError` naming the pod and field, and nothing else
    (a field of the wrong shape — a list where a map belongs, a number where a string does — included)."""
    namespace, name = _names(obj.get("metadata") if isinstance(obj, Mapping) else None)
    if not name:
        raise KubeObjectError("a pod without a readable metadata.name")
    where = f"pod {namespace}/{name}"
    try:
        return _read_pod(obj, namespace, name, where)
    except (AttributeError, TypeError, ArithmeticError) as exc:
        raise KubeObjectError(f"{where}: a field has the wrong shape ({type(exc).__name__})") from None


def _read_pod(obj: Mapping[str, Any], namespace: str, name: str, where: str) -> KubePod:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    selector = {k: str(v) for k, v in (spec.get("nodeSelector") or {}).items() if k != ARCH_LABEL}
    gpu_model = selector.pop(GPU_PRODUCT_LABEL, "")
    phase = status.get("phase") or "Pending"
    if phase not in _PHASES:
        raise KubeObjectError(f"{where}: unknown phase {phase!r}")
    priority = spec.get("priority")
    if priority is None:  # no PriorityClass: the workload's own priority, if fedplane created it
        priority = annotated_priority(meta)
    if not isinstance(priority, int) or isinstance(priority, bool) or not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise KubeObjectError(f"{where}: spec.priority {_short(priority)} is not a 32-bit integer")
    return KubePod(
        namespace, name, (meta.get("labels") or {}).get(WORKLOAD_LABEL, ""), epoch_of(meta, where), phase,
        spec.get("nodeName") or "", spec.get("schedulerName") or "default-scheduler", _condition(status, "Ready"),
        bool(meta.get("deletionTimestamp")), effective_requests(spec, where), pod_archs(spec, where), selector,
        tolerations(spec, where), priority, str(meta.get("uid") or ""), gpu_model, qos_of(qos_class(meta, where)),
    )


def qos_class(meta: Mapping[str, Any], where: str) -> str:
    """The :data:`QOS_LABEL` class name (``online`` when absent); an unknown class is an error naming the object."""
    value = (meta.get("labels") or {}).get(QOS_LABEL) or "online"
    try:
        qos_of(value)
    except ValueError as exc:
        raise KubeObjectError(f"{where}: label {QOS_LABEL}: {exc}") from None
    return str(value)


def annotated_priority(meta: Mapping[str, Any]) -> int:
    """``fedplane.io/priority`` as an integer (0 when absent or unreadable: a priority never stops a pod)."""
    raw = str((meta.get("annotations") or {}).get(PRIORITY_ANNOTATION, "0")).strip()
    digits = raw[1:] if raw[:1] == "-" else raw
    value = int(raw) if digits.isascii() and digits.isdigit() and len(digits) <= 10 else 0
    return value if PRIORITY_RANGE[0] <= value <= PRIORITY_RANGE[1] else 0


# ---- nodes ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeNode:
    """One node: allocatable resources, arch (None: a label fedplane does not know), readiness, taints.

    ``problem`` says why fedplane cannot place on it (unknown arch, Windows, unreadable or
    missing allocatable); such a node is reported, never placed on, never a crash.
    """

    name: str
    capacity: Resources
    arch: Arch | None
    arch_label: str
    ready: bool
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    taints: tuple[Taint, ...] = ()
    problem: str = ""
    batch: Requests = Requests()
    """The batch capacity the node advertises (:data:`BATCH_CPU_RESOURCE`, :data:`BATCH_MEMORY_RESOURCE`; the agent
    sets it), in ``batch_cpu_milli`` / ``batch_memory_mib``: what kubelet admits batch pods against (absent: zero)."""

    def to_node(self) -> Node:
        if self.problem or self.arch is None:
            raise KubeObjectError(f"node {self.name}: {self.problem or f'unknown architecture {self.arch_label!r}'}")
        return Node(self.name, self.capacity.cpu_milli, self.capacity.memory_mib, gpus=self.capacity.gpu_milli // MILLI,
                    gpu_model=self.labels.get(GPU_PRODUCT_LABEL, ""), arch=self.arch, labels=dict(self.labels), taints=self.taints)


def read_node(obj: Mapping[str, Any]) -> KubeNode:
    """A node dict; a node fedplane cannot place on comes back with ``problem`` set, never an exception (a field of
    the wrong shape included)."""
    _, name = _names(obj.get("metadata") if isinstance(obj, Mapping) else None)
    try:
        return _read_node(obj, name)
    except (AttributeError, TypeError, ArithmeticError, KubeObjectError) as exc:
        return KubeNode(name, Resources(), None, "", False, problem=f"a field has the wrong shape ({type(exc).__name__})")


def _read_node(obj: Mapping[str, Any], name: str) -> KubeNode:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    arch_label = labels.get(ARCH_LABEL, "")
    arch = arch_of(arch_label) if arch_label else Arch.AMD64  # no label: the kubelet default
    ready = _condition(status, "Ready") or not status.get("conditions")
    problems = []
    if arch is None:
        problems.append(f"unknown architecture {arch_label!r}")
    if labels.get(OS_LABEL, "linux").lower() != "linux":
        problems.append(f"{labels[OS_LABEL]} node (fedplane places Linux pods)")
    alloc = status.get("allocatable") or status.get("capacity") or {}
    capacity, batch = Resources(), Requests()
    if not alloc:
        problems.append("no allocatable or capacity in its status")
    else:
        try:
            capacity = Resources(cpu_milli(alloc.get("cpu", 0), up=False), memory_mib(alloc.get("memory", 0), up=False),
                                 0, whole(alloc.get(GPU_RESOURCE, 0), GPU_RESOURCE) * MILLI)
            batch_cpu = batch_cpu_milli(alloc.get(BATCH_CPU_RESOURCE, 0))
            batch_mem = batch_memory_mib(alloc.get(BATCH_MEMORY_RESOURCE, 0), up=False)
            batch = Requests(batch_cpu, batch_mem, 0, batch_cpu, batch_mem)
        except KubeObjectError as exc:
            problems.append(f"unreadable allocatable: {exc}")
    try:
        node_taints = taints(spec, f"node {name}")
    except KubeObjectError as exc:
        node_taints = ()
        problems.append(str(exc))
    if spec.get("unschedulable"):
        node_taints += (Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE),)
    return KubeNode(name, capacity, arch, arch_label, ready, labels, node_taints, "; ".join(problems), batch)


def room_problem(node: KubeNode, on_node: list[Mapping[str, Any]], pod: Requests, name: str) -> str:
    """Why ``pod`` cannot be bound to ``node`` now ("" when it fits), as kubelet admits it: each resource name the pod
    asks against the node's allocatable of that name, less what every unfinished pod bound there asks of it (pods of
    other schedulers and DaemonSets included). So batch resources are held against the node's batch capacity, not
    its ``cpu`` and ``memory``."""
    if node.problem:
        return f"node {node.name}: {node.problem}"
    if not node.ready:
        return f"node {node.name} is not ready"
    used = Requests()
    for other in on_node:
        meta = other.get("metadata") or {}
        if meta.get("name") == name or (other.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            used = used + effective_requests(other.get("spec") or {})
        except KubeObjectError:
            continue  # the API server admitted it; a request we cannot read is not ours to refuse
    (cpu, mem), (used_cpu, used_mem) = pod.regular, used.regular
    rows = (("cpu", cpu, node.capacity.cpu_milli - used_cpu, "m"), ("memory", mem, node.capacity.memory_mib - used_mem, "Mi"),
            ("gpus", pod.gpus, node.capacity.gpu_milli // MILLI - used.gpus, ""),
            (BATCH_CPU_RESOURCE, pod.batch_cpu_milli, node.batch.batch_cpu_milli - used.batch_cpu_milli, "m"),
            (BATCH_MEMORY_RESOURCE, pod.batch_memory_mib, node.batch.batch_memory_mib - used.batch_memory_mib, "Mi"))
    short = [f"{what}: needs {want}{unit}, free {have}{unit}" for what, want, have, unit in rows if want > 0 and want > have]
    if short:
        return f"node {node.name} has no room ({'; '.join(short)})"
    return ""
