# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AutoscaleSpec(_message.Message):
    __slots__ = ("workload", "series", "stride_s", "policy", "min_replicas", "max_replicas", "startup_s", "peak_replicas", "speed", "values")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    STRIDE_S_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    STARTUP_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    workload: str
    series: str
    stride_s: float
    policy: str
    min_replicas: int
    max_replicas: int
    startup_s: float
    peak_replicas: float
    speed: float
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, workload: _Optional[str] = ..., series: _Optional[str] = ..., stride_s: _Optional[float] = ..., policy: _Optional[str] = ..., min_replicas: _Optional[int] = ..., max_replicas: _Optional[int] = ..., startup_s: _Optional[float] = ..., peak_replicas: _Optional[float] = ..., speed: _Optional[float] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class EnableAutoscaleRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: AutoscaleSpec
    def __init__(self, spec: _Optional[_Union[AutoscaleSpec, _Mapping]] = ...) -> None: ...

class GetAutoscaleRequest(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    def __init__(self, workload: _Optional[str] = ...) -> None: ...

class DisableAutoscaleRequest(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    def __init__(self, workload: _Optional[str] = ...) -> None: ...

class AutoscaleStatus(_message.Message):
    __slots__ = ("spec", "fallback", "demand", "forecast", "desired", "ready", "replicas", "reason", "enabled_at")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ENABLED_AT_FIELD_NUMBER: _ClassVar[int]
    spec: AutoscaleSpec
    fallback: str
    demand: float
    forecast: float
    desired: int
    ready: int
    replicas: int
    reason: str
    enabled_at: float
    def __init__(self, spec: _Optional[_Union[AutoscaleSpec, _Mapping]] = ..., fallback: _Optional[str] = ..., demand: _Optional[float] = ..., forecast: _Optional[float] = ..., desired: _Optional[int] = ..., ready: _Optional[int] = ..., replicas: _Optional[int] = ..., reason: _Optional[str] = ..., enabled_at: _Optional[float] = ...) -> None: ...

class GetAutoscaleResponse(_message.Message):
    __slots__ = ("autoscalers",)
    AUTOSCALERS_FIELD_NUMBER: _ClassVar[int]
    autoscalers: _containers.RepeatedCompositeFieldContainer[AutoscaleStatus]
    def __init__(self, autoscalers: _Optional[_Iterable[_Union[AutoscaleStatus, _Mapping]]] = ...) -> None: ...
