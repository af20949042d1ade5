from sailor_sim.proto import job_pb2 as _job_pb2
from sailor_sim.proto import plan_pb2 as _plan_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RankState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANK_STATE_UNSPECIFIED: _ClassVar[RankState]
    RANK_STATE_RUNNING: _ClassVar[RankState]
    RANK_STATE_SUCCEEDED: _ClassVar[RankState]
    RANK_STATE_FAILED: _ClassVar[RankState]
    RANK_STATE_STOPPED: _ClassVar[RankState]
RANK_STATE_UNSPECIFIED: RankState
RANK_STATE_RUNNING: RankState
RANK_STATE_SUCCEEDED: RankState
RANK_STATE_FAILED: RankState
RANK_STATE_STOPPED: RankState

class GpuInfo(_message.Message):
    __slots__ = ("gpu_type", "count", "memory_bytes", "zone")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    count: int
    memory_bytes: int
    zone: str
    def __init__(self, gpu_type: _Optional[str] = ..., count: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., zone: _Optional[str] = ...) -> None: ...

class RankSlot(_message.Message):
    __slots__ = ("rank", "local_device")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_DEVICE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_device: int
    def __init__(self, rank: _Optional[int] = ..., local_device: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("generation", "job", "plan", "world_size", "ranks", "master_addr", "master_port", "store_prefix", "store_key", "checkpoint_dir", "backend", "session", "on_save_error", "training", "run")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    STORE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    STORE_KEY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ON_SAVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    generation: int
    job: _job_pb2.Job
    plan: _plan_pb2.Plan
    world_size: int
    ranks: _containers.RepeatedCompositeFieldContainer[RankSlot]
    master_addr: str
    master_port: int
    store_prefix: str
    store_key: str
    checkpoint_dir: str
    backend: str
    session: str
    on_save_error: str
    training: str
    run: _job_pb2.RunSpec
    def __init__(self, generation: _Optional[int] = ..., job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., world_size: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[RankSlot, _Mapping]]] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., store_prefix: _Optional[str] = ..., store_key: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ..., backend: _Optional[str] = ..., session: _Optional[str] = ..., on_save_error: _Optional[str] = ..., training: _Optional[str] = ..., run: _Optional[_Union[_job_pb2.RunSpec, _Mapping]] = ...) -> None: ...

class AssignResponse(_message.Message):
    __slots__ = ("generation", "ranks_started")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RANKS_STARTED_FIELD_NUMBER: _ClassVar[int]
    generation: int
    ranks_started: int
    def __init__(self, generation: _Optional[int] = ..., ranks_started: _Optional[int] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("generation", "grace_s", "session")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    grace_s: float
    session: str
    def __init__(self, generation: _Optional[int] = ..., grace_s: _Optional[float] = ..., session: _Optional[str] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("ranks_stopped",)
    RANKS_STOPPED_FIELD_NUMBER: _ClassVar[int]
    ranks_stopped: int
    def __init__(self, ranks_stopped: _Optional[int] = ...) -> None: ...

class RankStatus(_message.Message):
    __slots__ = ("generation", "rank", "state", "exit_code", "log_tail")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    generation: int
    rank: int
    state: RankState
    exit_code: int
    log_tail: str
    def __init__(self, generation: _Optional[int] = ..., rank: _Optional[int] = ..., state: _Optional[_Union[RankState, str]] = ..., exit_code: _Optional[int] = ..., log_tail: _Optional[str] = ...) -> None: ...

class AgentStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("worker_id", "generation", "gpus", "ranks")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    gpus: GpuInfo
    ranks: _containers.RepeatedCompositeFieldContainer[RankStatus]
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., gpus: _Optional[_Union[GpuInfo, _Mapping]] = ..., ranks: _Optional[_Iterable[_Union[RankStatus, _Mapping]]] = ...) -> None: ...
