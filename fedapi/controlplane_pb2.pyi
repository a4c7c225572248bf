# mypy: ignore-errors
from fedapi import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_UNSPECIFIED: _ClassVar[Backend]
    BACKEND_TWIN: _ClassVar[Backend]
    BACKEND_KUBERNETES: _ClassVar[Backend]

class Health(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_UNSPECIFIED: _ClassVar[Health]
    HEALTH_HEALTHY: _ClassVar[Health]
    HEALTH_DEGRADED: _ClassVar[Health]
    HEALTH_AGENTS_SILENT: _ClassVar[Health]
    HEALTH_PARTITIONED: _ClassVar[Health]
    HEALTH_DOWN: _ClassVar[Health]
    HEALTH_UNKNOWN: _ClassVar[Health]

class PeerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PEER_STATE_UNSPECIFIED: _ClassVar[PeerState]
    PEER_ALIVE: _ClassVar[PeerState]
    PEER_SUSPECT: _ClassVar[PeerState]
    PEER_DEAD: _ClassVar[PeerState]
    PEER_LEFT: _ClassVar[PeerState]

class Spread(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPREAD_NONE: _ClassVar[Spread]
    SPREAD_CLUSTERS: _ClassVar[Spread]
    SPREAD_REGIONS: _ClassVar[Spread]

class MigrationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MIGRATION_STATE_UNSPECIFIED: _ClassVar[MigrationState]
    MIGRATION_PLANNED: _ClassVar[MigrationState]
    MIGRATION_TARGET_CREATED: _ClassVar[MigrationState]
    MIGRATION_TARGET_READY: _ClassVar[MigrationState]
    MIGRATION_DONE: _ClassVar[MigrationState]
    MIGRATION_FAILED: _ClassVar[MigrationState]
    MIGRATION_CANCELLED: _ClassVar[MigrationState]
    MIGRATION_SOURCE_FENCED: _ClassVar[MigrationState]
    MIGRATION_CHECKPOINTED: _ClassVar[MigrationState]
    MIGRATION_RESTORED: _ClassVar[MigrationState]
BACKEND_UNSPECIFIED: Backend
BACKEND_TWIN: Backend
BACKEND_KUBERNETES: Backend
HEALTH_UNSPECIFIED: Health
HEALTH_HEALTHY: Health
HEALTH_DEGRADED: Health
HEALTH_AGENTS_SILENT: Health
HEALTH_PARTITIONED: Health
HEALTH_DOWN: Health
HEALTH_UNKNOWN: Health
PEER_STATE_UNSPECIFIED: PeerState
PEER_ALIVE: PeerState
PEER_SUSPECT: PeerState
PEER_DEAD: PeerState
PEER_LEFT: PeerState
SPREAD_NONE: Spread
SPREAD_CLUSTERS: Spread
SPREAD_REGIONS: Spread
MIGRATION_STATE_UNSPECIFIED: MigrationState
MIGRATION_PLANNED: MigrationState
MIGRATION_TARGET_CREATED: MigrationState
MIGRATION_TARGET_READY: MigrationState
MIGRATION_DONE: MigrationState
MIGRATION_FAILED: MigrationState
MIGRATION_CANCELLED: MigrationState
MIGRATION_SOURCE_FENCED: MigrationState
MIGRATION_CHECKPOINTED: MigrationState
MIGRATION_RESTORED: MigrationState

class ClusterSpec(_message.Message):
    __slots__ = ("name", "region", "backend", "kube_context", "kubeconfig", "labels", "twin_nodes", "twin_node_capacity", "placer")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    KUBE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KUBECONFIG_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TWIN_NODES_FIELD_NUMBER: _ClassVar[int]
    TWIN_NODE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    PLACER_FIELD_NUMBER: _ClassVar[int]
    name: str
    region: str
    backend: Backend
    kube_context: str
    kubeconfig: str
    labels: _containers.ScalarMap[str, str]
    twin_nodes: int
    twin_node_capacity: _common_pb2.ResourceVector
    placer: str
    def __init__(self, name: _Optional[str] = ..., region: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ..., kube_context: _Optional[str] = ..., kubeconfig: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., twin_nodes: _Optional[int] = ..., twin_node_capacity: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., placer: _Optional[str] = ...) -> None: ...

class RegisterClusterRequest(_message.Message):
    __slots__ = ("cluster", "force")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    cluster: ClusterSpec
    force: bool
    def __init__(self, cluster: _Optional[_Union[ClusterSpec, _Mapping]] = ..., force: _Optional[bool] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ("health", "reasons", "since_ms")
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    health: Health
    reasons: _containers.RepeatedCompositeFieldContainer[_common_pb2.Reason]
    since_ms: int
    def __init__(self, health: _Optional[_Union[Health, str]] = ..., reasons: _Optional[_Iterable[_Union[_common_pb2.Reason, _Mapping]]] = ..., since_ms: _Optional[int] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("spec", "verdict", "capacity", "allocated", "load", "load_forecast", "taints", "nodes", "agents_reporting", "context")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    LOAD_FORECAST_FIELD_NUMBER: _ClassVar[int]
    TAINTS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    AGENTS_REPORTING_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    spec: ClusterSpec
    verdict: Verdict
    capacity: _common_pb2.ResourceVector
    allocated: _common_pb2.ResourceVector
    load: float
    load_forecast: float
    taints: _containers.RepeatedScalarFieldContainer[str]
    nodes: int
    agents_reporting: int
    context: WorkloadContext
    def __init__(self, spec: _Optional[_Union[ClusterSpec, _Mapping]] = ..., verdict: _Optional[_Union[Verdict, _Mapping]] = ..., capacity: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., allocated: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., load: _Optional[float] = ..., load_forecast: _Optional[float] = ..., taints: _Optional[_Iterable[str]] = ..., nodes: _Optional[int] = ..., agents_reporting: _Optional[int] = ..., context: _Optional[_Union[WorkloadContext, _Mapping]] = ...) -> None: ...

class ListClustersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListClustersResponse(_message.Message):
    __slots__ = ("clusters",)
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterStatus]
    def __init__(self, clusters: _Optional[_Iterable[_Union[ClusterStatus, _Mapping]]] = ...) -> None: ...

class PeerView(_message.Message):
    __slots__ = ("node", "cluster", "state", "incarnation", "heard_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HEARD_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    cluster: str
    state: PeerState
    incarnation: int
    heard_ms: int
    def __init__(self, node: _Optional[str] = ..., cluster: _Optional[str] = ..., state: _Optional[_Union[PeerState, str]] = ..., incarnation: _Optional[int] = ..., heard_ms: _Optional[int] = ...) -> None: ...

class NodeSummary(_message.Message):
    __slots__ = ("node", "capacity", "allocated", "pods", "arch", "ready", "model_version", "load", "online_used_milli", "online_measured")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    ONLINE_USED_MILLI_FIELD_NUMBER: _ClassVar[int]
    ONLINE_MEASURED_FIELD_NUMBER: _ClassVar[int]
    node: str
    capacity: _common_pb2.ResourceVector
    allocated: _common_pb2.ResourceVector
    pods: int
    arch: str
    ready: bool
    model_version: str
    load: float
    online_used_milli: int
    online_measured: bool
    def __init__(self, node: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., allocated: _Optional[_Union[_common_pb2.ResourceVector, _Mapping]] = ..., pods: _Optional[int] = ..., arch: _Optional[str] = ..., ready: _Optional[bool] = ..., model_version: _Optional[str] = ..., load: _Optional[float] = ..., online_used_milli: _Optional[int] = ..., online_measured: _Optional[bool] = ...) -> None: ...

class AgentReport(_message.Message):
    __slots__ = ("cluster", "node", "agent_id", "sequence", "summary", "peers", "healthy", "health_reason", "context", "held")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    node: str
    agent_id: str
    sequence: int
    summary: NodeSummary
    peers: _containers.RepeatedCompositeFieldContainer[PeerView]
    healthy: bool
    health_reason: str
    context: WorkloadContext
    held: _containers.RepeatedCompositeFieldContainer[HeldPod]
    def __init__(self, cluster: _Optional[str] = ..., node: _Optional[str] = ..., agent_id: _Optional[str] = ..., sequence: _Optional[int] = ..., summary: _Optional[_Union[NodeSummary, _Mapping]] = ..., peers: _Optional[_Iterable[_Union[PeerView, _Mapping]]] = ..., healthy: _Optional[bool] = ..., health_reason: _Optional[str] = ..., context: _Optional[_Union[WorkloadContext, _Mapping]] = ..., held: _Optional[_Iterable[_Union[HeldPod, _Mapping]]] = ...) -> None: ...

class HeldPod(_message.Message):
    __slots__ = ("pod", "epoch")
    POD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    pod: str
    epoch: int
    def __init__(self, pod: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class WorkloadContext(_message.Message):
    __slots__ = ("cpu_pressure", "version", "profile", "scorer", "max_cpu_milli", "max_gpus")
    CPU_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SCORER_FIELD_NUMBER: _ClassVar[int]
    MAX_CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    cpu_pressure: float
    version: int
    profile: PodTypes
    scorer: str
    max_cpu_milli: int
    max_gpus: int
    def __init__(self, cpu_pressure: _Optional[float] = ..., version: _Optional[int] = ..., profile: _Optional[_Union[PodTypes, _Mapping]] = ..., scorer: _Optional[str] = ..., max_cpu_milli: _Optional[int] = ..., max_gpus: _Optional[int] = ...) -> None: ...

class PodTypes(_message.Message):
    __slots__ = ("cpu", "milli", "count", "weight", "slots", "pinned")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MILLI_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    cpu: _containers.RepeatedScalarFieldContainer[int]
    milli: _containers.RepeatedScalarFieldContainer[int]
    count: _containers.RepeatedScalarFieldContainer[int]
    weight: _containers.RepeatedScalarFieldContainer[float]
    slots: _containers.RepeatedScalarFieldContainer[int]
    pinned: float
    def __init__(self, cpu: _Optional[_Iterable[int]] = ..., milli: _Optional[_Iterable[int]] = ..., count: _Optional[_Iterable[int]] = ..., weight: _Optional[_Iterable[float]] = ..., slots: _Optional[_Iterable[int]] = ..., pinned: _Optional[float] = ...) -> None: ...

class AgentAck(_message.Message):
    __slots__ = ("accepted", "server_time_ms", "report_interval_ms", "reason", "context", "send_held", "members", "offer", "takes_heard")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    REPORT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SEND_HELD_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    TAKES_HEARD_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    server_time_ms: int
    report_interval_ms: int
    reason: str
    context: WorkloadContext
    send_held: bool
    members: _containers.RepeatedScalarFieldContainer[str]
    offer: BatchOffer
    takes_heard: bool
    def __init__(self, accepted: _Optional[bool] = ..., server_time_ms: _Optional[int] = ..., report_interval_ms: _Optional[int] = ..., reason: _Optional[str] = ..., context: _Optional[_Union[WorkloadContext, _Mapping]] = ..., send_held: _Optional[bool] = ..., members: _Optional[_Iterable[str]] = ..., offer: _Optional[_Union[BatchOffer, _Mapping]] = ..., takes_heard: _Optional[bool] = ...) -> None: ...

class BatchOffer(_message.Message):
    __slots__ = ("reclaimed_milli", "quota_milli", "colocated")
    RECLAIMED_MILLI_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MILLI_FIELD_NUMBER: _ClassVar[int]
    COLOCATED_FIELD_NUMBER: _ClassVar[int]
    reclaimed_milli: int
    quota_milli: int
    colocated: bool
    def __init__(self, reclaimed_milli: _Optional[int] = ..., quota_milli: _Optional[int] = ..., colocated: _Optional[bool] = ...) -> None: ...

class PodTemplate(_message.Message):
    __slots__ = ("cpu_milli", "memory_mib", "gpus", "gpu_model", "archs", "tolerations", "node_selector", "priority", "image", "qos")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    ARCHS_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str
    archs: _containers.RepeatedScalarFieldContainer[str]
    tolerations: _containers.RepeatedCompositeFieldContainer[_common_pb2.Toleration]
    node_selector: _containers.ScalarMap[str, str]
    priority: int
    image: str
    qos: str
    def __init__(self, cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., archs: _Optional[_Iterable[str]] = ..., tolerations: _Optional[_Iterable[_Union[_common_pb2.Toleration, _Mapping]]] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., image: _Optional[str] = ..., qos: _Optional[str] = ...) -> None: ...

class PlacementPolicy(_message.Message):
    __slots__ = ("spread", "clusters", "regions", "avoid_clusters", "cluster_labels", "movable", "max_per_cluster", "home_region", "failback", "failback_window_s", "maintenance_window", "group")
    class ClusterLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPREAD_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    AVOID_CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_LABELS_FIELD_NUMBER: _ClassVar[int]
    MOVABLE_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HOME_REGION_FIELD_NUMBER: _ClassVar[int]
    FAILBACK_FIELD_NUMBER: _ClassVar[int]
    FAILBACK_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    spread: Spread
    clusters: _containers.RepeatedScalarFieldContainer[str]
    regions: _containers.RepeatedScalarFieldContainer[str]
    avoid_clusters: _containers.RepeatedScalarFieldContainer[str]
    cluster_labels: _containers.ScalarMap[str, str]
    movable: bool
    max_per_cluster: int
    home_region: str
    failback: str
    failback_window_s: float
    maintenance_window: str
    group: str
    def __init__(self, spread: _Optional[_Union[Spread, str]] = ..., clusters: _Optional[_Iterable[str]] = ..., regions: _Optional[_Iterable[str]] = ..., avoid_clusters: _Optional[_Iterable[str]] = ..., cluster_labels: _Optional[_Mapping[str, str]] = ..., movable: _Optional[bool] = ..., max_per_cluster: _Optional[int] = ..., home_region: _Optional[str] = ..., failback: _Optional[str] = ..., failback_window_s: _Optional[float] = ..., maintenance_window: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class WorkloadSpec(_message.Message):
    __slots__ = ("name", "replicas", "pod", "policy", "stateful")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_FIELD_NUMBER: _ClassVar[int]
    name: str
    replicas: int
    pod: PodTemplate
    policy: PlacementPolicy
    stateful: bool
    def __init__(self, name: _Optional[str] = ..., replicas: _Optional[int] = ..., pod: _Optional[_Union[PodTemplate, _Mapping]] = ..., policy: _Optional[_Union[PlacementPolicy, _Mapping]] = ..., stateful: _Optional[bool] = ...) -> None: ...

class SubmitWorkloadRequest(_message.Message):
    __slots__ = ("workload", "dry_run", "request_id")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    workload: WorkloadSpec
    dry_run: bool
    request_id: str
    def __init__(self, workload: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., dry_run: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ClusterPlacement(_message.Message):
    __slots__ = ("cluster", "replicas", "epoch", "ready", "state", "reclaimed_milli", "preemptions")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECLAIMED_MILLI_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    replicas: int
    epoch: int
    ready: int
    state: str
    reclaimed_milli: int
    preemptions: int
    def __init__(self, cluster: _Optional[str] = ..., replicas: _Optional[int] = ..., epoch: _Optional[int] = ..., ready: _Optional[int] = ..., state: _Optional[str] = ..., reclaimed_milli: _Optional[int] = ..., preemptions: _Optional[int] = ...) -> None: ...

class PlacementDecision(_message.Message):
    __slots__ = ("workload", "accepted", "dry_run", "placements", "reasons", "qos")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    workload: str
    accepted: bool
    dry_run: bool
    placements: _containers.RepeatedCompositeFieldContainer[ClusterPlacement]
    reasons: _containers.RepeatedCompositeFieldContainer[_common_pb2.Reason]
    qos: str
    def __init__(self, workload: _Optional[str] = ..., accepted: _Optional[bool] = ..., dry_run: _Optional[bool] = ..., placements: _Optional[_Iterable[_Union[ClusterPlacement, _Mapping]]] = ..., reasons: _Optional[_Iterable[_Union[_common_pb2.Reason, _Mapping]]] = ..., qos: _Optional[str] = ...) -> None: ...

class GetPlacementsRequest(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    def __init__(self, workload: _Optional[str] = ...) -> None: ...

class GetPlacementsResponse(_message.Message):
    __slots__ = ("workloads",)
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[PlacementDecision]
    def __init__(self, workloads: _Optional[_Iterable[_Union[PlacementDecision, _Mapping]]] = ...) -> None: ...

class Migration(_message.Message):
    __slots__ = ("id", "workload", "source", "target", "replicas", "epoch", "state", "kind", "reasons", "error", "attempts")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    workload: str
    source: str
    target: str
    replicas: int
    epoch: int
    state: MigrationState
    kind: str
    reasons: _containers.RepeatedCompositeFieldContainer[_common_pb2.Reason]
    error: str
    attempts: int
    def __init__(self, id: _Optional[str] = ..., workload: _Optional[str] = ..., source: _Optional[str] = ..., target: _Optional[str] = ..., replicas: _Optional[int] = ..., epoch: _Optional[int] = ..., state: _Optional[_Union[MigrationState, str]] = ..., kind: _Optional[str] = ..., reasons: _Optional[_Iterable[_Union[_common_pb2.Reason, _Mapping]]] = ..., error: _Optional[str] = ..., attempts: _Optional[int] = ...) -> None: ...

class StartMigrationRequest(_message.Message):
    __slots__ = ("workload", "source", "target", "force")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    workload: str
    source: str
    target: str
    force: bool
    def __init__(self, workload: _Optional[str] = ..., source: _Optional[str] = ..., target: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class CancelMigrationRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListMigrationsRequest(_message.Message):
    __slots__ = ("active_only", "failback_dry_run")
    ACTIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    FAILBACK_DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    active_only: bool
    failback_dry_run: bool
    def __init__(self, active_only: _Optional[bool] = ..., failback_dry_run: _Optional[bool] = ...) -> None: ...

class ListMigrationsResponse(_message.Message):
    __slots__ = ("migrations",)
    MIGRATIONS_FIELD_NUMBER: _ClassVar[int]
    migrations: _containers.RepeatedCompositeFieldContainer[Migration]
    def __init__(self, migrations: _Optional[_Iterable[_Union[Migration, _Mapping]]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("at_ms", "kind", "workload", "source", "target", "reasons")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    kind: str
    workload: str
    source: str
    target: str
    reasons: _containers.RepeatedCompositeFieldContainer[_common_pb2.Reason]
    def __init__(self, at_ms: _Optional[int] = ..., kind: _Optional[str] = ..., workload: _Optional[str] = ..., source: _Optional[str] = ..., target: _Optional[str] = ..., reasons: _Optional[_Iterable[_Union[_common_pb2.Reason, _Mapping]]] = ...) -> None: ...

class ListDecisionsRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListDecisionsResponse(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class NodeListing(_message.Message):
    __slots__ = ("name", "ready", "agent_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    ready: bool
    agent_id: str
    def __init__(self, name: _Optional[str] = ..., ready: _Optional[bool] = ..., agent_id: _Optional[str] = ...) -> None: ...

class AgentListing(_message.Message):
    __slots__ = ("node", "agent_id", "state", "last_report_s", "healthy", "health_reason", "peers_alive", "peers_suspect", "peers_dead", "remote_alive", "load", "model_version", "pods", "context")
    NODE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_S_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASON_FIELD_NUMBER: _ClassVar[int]
    PEERS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    PEERS_SUSPECT_FIELD_NUMBER: _ClassVar[int]
    PEERS_DEAD_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ALIVE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    node: str
    agent_id: str
    state: str
    last_report_s: float
    healthy: bool
    health_reason: str
    peers_alive: int
    peers_suspect: int
    peers_dead: int
    remote_alive: int
    load: float
    model_version: str
    pods: int
    context: WorkloadContext
    def __init__(self, node: _Optional[str] = ..., agent_id: _Optional[str] = ..., state: _Optional[str] = ..., last_report_s: _Optional[float] = ..., healthy: _Optional[bool] = ..., health_reason: _Optional[str] = ..., peers_alive: _Optional[int] = ..., peers_suspect: _Optional[int] = ..., peers_dead: _Optional[int] = ..., remote_alive: _Optional[int] = ..., load: _Optional[float] = ..., model_version: _Optional[str] = ..., pods: _Optional[int] = ..., context: _Optional[_Union[WorkloadContext, _Mapping]] = ...) -> None: ...

class ClusterAgents(_message.Message):
    __slots__ = ("cluster", "health", "nodes", "agents")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    health: Health
    nodes: _containers.RepeatedCompositeFieldContainer[NodeListing]
    agents: _containers.RepeatedCompositeFieldContainer[AgentListing]
    def __init__(self, cluster: _Optional[str] = ..., health: _Optional[_Union[Health, str]] = ..., nodes: _Optional[_Iterable[_Union[NodeListing, _Mapping]]] = ..., agents: _Optional[_Iterable[_Union[AgentListing, _Mapping]]] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("clusters",)
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterAgents]
    def __init__(self, clusters: _Optional[_Iterable[_Union[ClusterAgents, _Mapping]]] = ...) -> None: ...

class RunDrillRequest(_message.Message):
    __slots__ = ("scenario", "runs", "seed")
    SCENARIO_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    scenario: str
    runs: int
    seed: int
    def __init__(self, scenario: _Optional[str] = ..., runs: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class DrillReport(_message.Message):
    __slots__ = ("scenario", "runs", "detect_s_median", "recovery_s_p50", "recovery_s_p99", "success_rate", "pods_lost", "pods_duplicated", "json")
    SCENARIO_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    DETECT_S_MEDIAN_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_S_P50_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_S_P99_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    PODS_LOST_FIELD_NUMBER: _ClassVar[int]
    PODS_DUPLICATED_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    scenario: str
    runs: int
    detect_s_median: float
    recovery_s_p50: float
    recovery_s_p99: float
    success_rate: float
    pods_lost: int
    pods_duplicated: int
    json: str
    def __init__(self, scenario: _Optional[str] = ..., runs: _Optional[int] = ..., detect_s_median: _Optional[float] = ..., recovery_s_p50: _Optional[float] = ..., recovery_s_p99: _Optional[float] = ..., success_rate: _Optional[float] = ..., pods_lost: _Optional[int] = ..., pods_duplicated: _Optional[int] = ..., json: _Optional[str] = ...) -> None: ...

class DeleteWorkloadRequest(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    def __init__(self, workload: _Optional[str] = ...) -> None: ...

class DeleteWorkloadResponse(_message.Message):
    __slots__ = ("workload", "removed_from", "pending")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FROM_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    workload: str
    removed_from: _containers.RepeatedScalarFieldContainer[str]
    pending: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workload: _Optional[str] = ..., removed_from: _Optional[_Iterable[str]] = ..., pending: _Optional[_Iterable[str]] = ...) -> None: ...

class GetLeaderRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("is_leader", "leader", "fencing_token", "member", "writes_refused", "take_over_s")
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    WRITES_REFUSED_FIELD_NUMBER: _ClassVar[int]
    TAKE_OVER_S_FIELD_NUMBER: _ClassVar[int]
    is_leader: bool
    leader: str
    fencing_token: int
    member: str
    writes_refused: int
    take_over_s: float
    def __init__(self, is_leader: _Optional[bool] = ..., leader: _Optional[str] = ..., fencing_token: _Optional[int] = ..., member: _Optional[str] = ..., writes_refused: _Optional[int] = ..., take_over_s: _Optional[float] = ...) -> None: ...

class IssueCredentialRequest(_message.Message):
    __slots__ = ("role", "cluster", "node")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    role: str
    cluster: str
    node: str
    def __init__(self, role: _Optional[str] = ..., cluster: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class IssuedCredential(_message.Message):
    __slots__ = ("token", "role", "cluster", "node")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    token: str
    role: str
    cluster: str
    node: str
    def __init__(self, token: _Optional[str] = ..., role: _Optional[str] = ..., cluster: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...
