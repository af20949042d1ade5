from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaMemory(_message.Message):
    __slots__ = ("stage", "replica", "gpu_type", "zone", "peak_bytes", "capacity_bytes", "fits", "breakdown_bytes")
    class BreakdownBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_BYTES_FIELD_NUMBER: _ClassVar[int]
    stage: int
    replica: int
    gpu_type: str
    zone: str
    peak_bytes: int
    capacity_bytes: int
    fits: bool
    breakdown_bytes: _containers.ScalarMap[str, int]
    def __init__(self, stage: _Optional[int] = ..., replica: _Optional[int] = ..., gpu_type: _Optional[str] = ..., zone: _Optional[str] = ..., peak_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., fits: _Optional[bool] = ..., breakdown_bytes: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Estimate(_message.Message):
    __slots__ = ("iteration_time_s", "throughput_iters_per_s", "samples_per_s", "peak_memory_bytes", "fits", "cost_per_iteration_usd", "cost_per_hour_usd", "time_breakdown_s", "cost_breakdown_usd", "memory")
    class TimeBreakdownSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class CostBreakdownUsdEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_ITERS_PER_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    COST_PER_ITERATION_USD_FIELD_NUMBER: _ClassVar[int]
    COST_PER_HOUR_USD_FIELD_NUMBER: _ClassVar[int]
    TIME_BREAKDOWN_S_FIELD_NUMBER: _ClassVar[int]
    COST_BREAKDOWN_USD_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    iteration_time_s: float
    throughput_iters_per_s: float
    samples_per_s: float
    peak_memory_bytes: int
    fits: bool
    cost_per_iteration_usd: float
    cost_per_hour_usd: float
    time_breakdown_s: _containers.ScalarMap[str, float]
    cost_breakdown_usd: _containers.ScalarMap[str, float]
    memory: _containers.RepeatedCompositeFieldContainer[ReplicaMemory]
    def __init__(self, iteration_time_s: _Optional[float] = ..., throughput_iters_per_s: _Optional[float] = ..., samples_per_s: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., fits: _Optional[bool] = ..., cost_per_iteration_usd: _Optional[float] = ..., cost_per_hour_usd: _Optional[float] = ..., time_breakdown_s: _Optional[_Mapping[str, float]] = ..., cost_breakdown_usd: _Optional[_Mapping[str, float]] = ..., memory: _Optional[_Iterable[_Union[ReplicaMemory, _Mapping]]] = ...) -> None: ...
