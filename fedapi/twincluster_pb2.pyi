# mypy: ignore-errors
from fedapi import common_pb2 as _common_pb2
from fedapi import controlplane_pb2 as _controlplane_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PodPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POD_PHASE_UNSPECIFIED: _ClassVar[PodPhase]
    POD_PENDING: _ClassVar[PodPhase]
    POD_RUNNING: _ClassVar[PodPhase]
    POD_SUCCEEDED: _ClassVar[PodPhase]
    POD_FAILED: _ClassVar[PodPhase]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_ADDED: _ClassVar[EventType]
    EVENT_MODIFIED: _ClassVar[EventType]
    EVENT_DELETED: _ClassVar[EventType]

class BindOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BIND_OUTCOME_UNSPECIFIED: _ClassVar[BindOutcome]
    BIND_BOUND: _ClassVar[BindOutcome]
    BIND_ALREADY_BOUND: _ClassVar[BindOutcome]
    BIND_STALE_EPOCH: _ClassVar[BindOutcome]
    BIND_DUPLICATE: _ClassVar[BindOutcome]
    BIND_REJECTED: _ClassVar[BindOutcome]
POD_PHASE_UNSPECIFIED: PodPhase
POD_PENDING: PodPhase
POD_RUNNING: PodPhase
POD_SUCCEEDED: PodPhase
POD_FAILED: PodPhase
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_ADDED: EventType
EVENT_MODIFIED: EventType
EVENT_DELETED: EventType
BIND_OUTCOME_UNSPECIFIED: BindOutcome
BIND_BOUND: BindOutcome
BIND_ALREADY_BOUND: BindOutcome
BIND_STALE_EPOCH: BindOutcome
BIND_DUPLICATE: BindOutcome
BIND_REJECTED: BindOutcome

class PodSpec(_message.Message):
    __slots__ = ("gpu_count", "gpu_milli_each", "gpu_model", "archs", "node_selector", "tolerations", "max_per_node", "priority", "qos")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_EACH_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    ARCHS_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    gpu_count: int
    gpu_milli_each: int
    gpu_model: str
    archs: _containers.RepeatedScalarFieldContainer[str]
    node_selector: _containers.ScalarMap[str, str]
    tolerations: _containers.RepeatedCompositeFieldContainer[_common_pb2.Toleration]
    max_per_node: int
    priority: int
    qos: str
    def __init__(self, gpu_count: _Optional[int] = ..., gpu_milli_each: _Optional[int] = ..., gpu_model: _Optional[str] = ..., archs: _Optional[_Iterable[str]] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., tolerations: _Optional[_Iterable[_Union[_common_pb2.Toleration, _Mapping]]] = ..., max_per_node: _Optional[int] = ..., priority: _Optional[int] = ..., qos: _Optional[str] = ...) -> None: ...

class Pod(_message.Message):
    __slots__ = ("name", "workload", "epoch", "phase", "ready", "node", "requests", "spec")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    name: str
    workload: str
    epoch: int
    phase: PodPhase
    ready: bool
    node: str
    requests: _common_pb2.ResourceVector
    spec: PodSpec
    def __init__(self, name: _Optional[str] = ..., workload: _Optional[str] = ..., epoch: _Optional[int] = ..., phase: _Optional[_Union[PodPhase, str]] = ..., ready: _Optional[bool] = ..., node: _Optional[str] = ..., requests: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., spec: _Optional[_Union[PodSpec, _Mapping]] = ...) -> None: ...

class PodEvent(_message.Message):
    __slots__ = ("type", "pod")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    type: EventType
    pod: Pod
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., pod: _Optional[_Union[Pod, _Mapping]] = ...) -> None: ...

class WatchPodsRequest(_message.Message):
    __slots__ = ("cluster", "pending_only")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PENDING_ONLY_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    pending_only: bool
    def __init__(self, cluster: _Optional[str] = ..., pending_only: _Optional[bool] = ...) -> None: ...

class BindPodRequest(_message.Message):
    __slots__ = ("cluster", "pod", "node", "epoch", "gpus", "reclaimed_milli")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RECLAIMED_MILLI_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    pod: str
    node: str
    epoch: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    reclaimed_milli: int
    def __init__(self, cluster: _Optional[str] = ..., pod: _Optional[str] = ..., node: _Optional[str] = ..., epoch: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., reclaimed_milli: _Optional[int] = ...) -> None: ...

class BindPodResponse(_message.Message):
    __slots__ = ("outcome", "node", "epoch", "reason")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    outcome: BindOutcome
    node: str
    epoch: int
    reason: str
    def __init__(self, outcome: _Optional[_Union[BindOutcome, str]] = ..., node: _Optional[str] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeStatusReport(_message.Message):
    __slots__ = ("cluster", "node", "ready")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    node: str
    ready: bool
    def __init__(self, cluster: _Optional[str] = ..., node: _Optional[str] = ..., ready: _Optional[bool] = ...) -> None: ...

class NodeStatusAck(_message.Message):
    __slots__ = ("pods_released",)
    PODS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    pods_released: int
    def __init__(self, pods_released: _Optional[int] = ...) -> None: ...

class CompletePodRequest(_message.Message):
    __slots__ = ("cluster", "pod", "epoch", "succeeded")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    pod: str
    epoch: int
    succeeded: bool
    def __init__(self, cluster: _Optional[str] = ..., pod: _Optional[str] = ..., epoch: _Optional[int] = ..., succeeded: _Optional[bool] = ...) -> None: ...

class Taint(_message.Message):
    __slots__ = ("key", "value", "effect")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    effect: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., effect: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "capacity", "ready", "arch", "labels", "gpus", "gpu_model", "cluster", "zone", "region", "taints")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    TAINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    capacity: _common_pb2.ResourceVector
    ready: bool
    arch: str
    labels: _containers.ScalarMap[str, str]
    gpus: int
    gpu_model: str
    cluster: str
    zone: str
    region: str
    taints: _containers.RepeatedCompositeFieldContainer[Taint]
    def __init__(self, name: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., ready: _Optional[bool] = ..., arch: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., cluster: _Optional[str] = ..., zone: _Optional[str] = ..., region: _Optional[str] = ..., taints: _Optional[_Iterable[_Union[Taint, _Mapping]]] = ...) -> None: ...

class DescribeNodeRequest(_message.Message):
    __slots__ = ("cluster", "node")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    node: str
    def __init__(self, cluster: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class GetSafetyRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class SafetyCounters(_message.Message):
    __slots__ = ("duplicate_binds", "stale_binds")
    DUPLICATE_BINDS_FIELD_NUMBER: _ClassVar[int]
    STALE_BINDS_FIELD_NUMBER: _ClassVar[int]
    duplicate_binds: int
    stale_binds: int
    def __init__(self, duplicate_binds: _Optional[int] = ..., stale_binds: _Optional[int] = ...) -> None: ...

class SignedModel(_message.Message):
    __slots__ = ("version", "sha256", "size", "signature")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    version: str
    sha256: str
    size: int
    signature: bytes
    def __init__(self, version: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., signature: _Optional[bytes] = ...) -> None: ...

class FetchModelRequest(_message.Message):
    __slots__ = ("cluster", "node", "want", "offset")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    node: str
    want: str
    offset: int
    def __init__(self, cluster: _Optional[str] = ..., node: _Optional[str] = ..., want: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class ModelOffer(_message.Message):
    __slots__ = ("current", "canary", "canary_weight", "signer", "chunk", "offset")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CANARY_FIELD_NUMBER: _ClassVar[int]
    CANARY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SIGNER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    current: SignedModel
    canary: SignedModel
    canary_weight: float
    signer: bytes
    chunk: bytes
    offset: int
    def __init__(self, current: _Optional[_Union[SignedModel, _Mapping]] = ..., canary: _Optional[_Union[SignedModel, _Mapping]] = ..., canary_weight: _Optional[float] = ..., signer: _Optional[bytes] = ..., chunk: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class ExperienceBatch(_message.Message):
    __slots__ = ("cluster", "node", "first_seq", "frames", "body")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    node: str
    first_seq: int
    frames: int
    body: bytes
    def __init__(self, cluster: _Optional[str] = ..., node: _Optional[str] = ..., first_seq: _Optional[int] = ..., frames: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class ExperienceAck(_message.Message):
    __slots__ = ("next_seq",)
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    next_seq: int
    def __init__(self, next_seq: _Optional[int] = ...) -> None: ...
