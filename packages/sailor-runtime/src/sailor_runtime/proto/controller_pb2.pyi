from sailor_runtime.proto import agent_pb2 as _agent_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControllerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROLLER_STATE_UNSPECIFIED: _ClassVar[ControllerState]
    CONTROLLER_STATE_WAITING: _ClassVar[ControllerState]
    CONTROLLER_STATE_RECONFIGURING: _ClassVar[ControllerState]
    CONTROLLER_STATE_RUNNING: _ClassVar[ControllerState]
    CONTROLLER_STATE_DONE: _ClassVar[ControllerState]
    CONTROLLER_STATE_FAILED: _ClassVar[ControllerState]
CONTROLLER_STATE_UNSPECIFIED: ControllerState
CONTROLLER_STATE_WAITING: ControllerState
CONTROLLER_STATE_RECONFIGURING: ControllerState
CONTROLLER_STATE_RUNNING: ControllerState
CONTROLLER_STATE_DONE: ControllerState
CONTROLLER_STATE_FAILED: ControllerState

class RegisterRequest(_message.Message):
    __slots__ = ("worker_id", "agent_address", "gpus", "hostname", "session")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    agent_address: str
    gpus: _agent_pb2.GpuInfo
    hostname: str
    session: str
    def __init__(self, worker_id: _Optional[str] = ..., agent_address: _Optional[str] = ..., gpus: _Optional[_Union[_agent_pb2.GpuInfo, _Mapping]] = ..., hostname: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("worker_id", "heartbeat_interval_s", "heartbeat_timeout_s", "session")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    session: str
    def __init__(self, worker_id: _Optional[str] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., session: _Optional[str] = ...) -> None: ...

class StepMetrics(_message.Message):
    __slots__ = ("generation", "rank", "step", "loss", "iteration_time_s", "samples_per_s", "consumed_samples", "raw_json")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    generation: int
    rank: int
    step: int
    loss: float
    iteration_time_s: float
    samples_per_s: float
    consumed_samples: int
    raw_json: str
    def __init__(self, generation: _Optional[int] = ..., rank: _Optional[int] = ..., step: _Optional[int] = ..., loss: _Optional[float] = ..., iteration_time_s: _Optional[float] = ..., samples_per_s: _Optional[float] = ..., consumed_samples: _Optional[int] = ..., raw_json: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "generation", "ranks", "metrics", "session")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    ranks: _containers.RepeatedCompositeFieldContainer[_agent_pb2.RankStatus]
    metrics: _containers.RepeatedCompositeFieldContainer[StepMetrics]
    session: str
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[_agent_pb2.RankStatus, _Mapping]]] = ..., metrics: _Optional[_Iterable[_Union[StepMetrics, _Mapping]]] = ..., session: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known", "generation", "shutdown", "unfinished")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    known: bool
    generation: int
    shutdown: bool
    unfinished: bool
    def __init__(self, known: _Optional[bool] = ..., generation: _Optional[int] = ..., shutdown: _Optional[bool] = ..., unfinished: _Optional[bool] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("worker_id", "reason", "session")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    session: str
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class LeaveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "agent_address", "gpus", "alive", "seconds_since_heartbeat")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_SINCE_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    agent_address: str
    gpus: _agent_pb2.GpuInfo
    alive: bool
    seconds_since_heartbeat: float
    def __init__(self, worker_id: _Optional[str] = ..., agent_address: _Optional[str] = ..., gpus: _Optional[_Union[_agent_pb2.GpuInfo, _Mapping]] = ..., alive: _Optional[bool] = ..., seconds_since_heartbeat: _Optional[float] = ...) -> None: ...

class PhaseTime(_message.Message):
    __slots__ = ("phase", "seconds")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    seconds: float
    def __init__(self, phase: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class Reconfiguration(_message.Message):
    __slots__ = ("generation", "reason", "phases", "total_s", "resumed_from_step", "plan_json", "inventory")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_S_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    generation: int
    reason: str
    phases: _containers.RepeatedCompositeFieldContainer[PhaseTime]
    total_s: float
    resumed_from_step: int
    plan_json: str
    inventory: str
    def __init__(self, generation: _Optional[int] = ..., reason: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[PhaseTime, _Mapping]]] = ..., total_s: _Optional[float] = ..., resumed_from_step: _Optional[int] = ..., plan_json: _Optional[str] = ..., inventory: _Optional[str] = ...) -> None: ...

class ControllerStatus(_message.Message):
    __slots__ = ("state", "generation", "plan_json", "step", "target_steps", "loss", "last_checkpoint_step", "workers", "reconfigurations", "message")
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TARGET_STEPS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    state: ControllerState
    generation: int
    plan_json: str
    step: int
    target_steps: int
    loss: float
    last_checkpoint_step: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    reconfigurations: _containers.RepeatedCompositeFieldContainer[Reconfiguration]
    message: str
    def __init__(self, state: _Optional[_Union[ControllerState, str]] = ..., generation: _Optional[int] = ..., plan_json: _Optional[str] = ..., step: _Optional[int] = ..., target_steps: _Optional[int] = ..., loss: _Optional[float] = ..., last_checkpoint_step: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., reconfigurations: _Optional[_Iterable[_Union[Reconfiguration, _Mapping]]] = ..., message: _Optional[str] = ...) -> None: ...
