from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Job(_message.Message):
    __slots__ = ("model", "global_batch_size", "sequence_length", "dtype", "optimizer", "options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    global_batch_size: int
    sequence_length: int
    dtype: str
    optimizer: str
    options: ExecutionOptions
    def __init__(self, model: _Optional[str] = ..., global_batch_size: _Optional[int] = ..., sequence_length: _Optional[int] = ..., dtype: _Optional[str] = ..., optimizer: _Optional[str] = ..., options: _Optional[_Union[ExecutionOptions, _Mapping]] = ...) -> None: ...

class ExecutionOptions(_message.Message):
    __slots__ = ("grad_dtype", "flash_attention", "recompute", "zero", "sequence_parallel", "virtual_stages", "p2p_scatter_gather", "fp8", "expert_parallel", "context_parallel")
    GRAD_DTYPE_FIELD_NUMBER: _ClassVar[int]
    FLASH_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    ZERO_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_STAGES_FIELD_NUMBER: _ClassVar[int]
    P2P_SCATTER_GATHER_FIELD_NUMBER: _ClassVar[int]
    FP8_FIELD_NUMBER: _ClassVar[int]
    EXPERT_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    grad_dtype: str
    flash_attention: bool
    recompute: str
    zero: str
    sequence_parallel: bool
    virtual_stages: int
    p2p_scatter_gather: bool
    fp8: str
    expert_parallel: int
    context_parallel: int
    def __init__(self, grad_dtype: _Optional[str] = ..., flash_attention: _Optional[bool] = ..., recompute: _Optional[str] = ..., zero: _Optional[str] = ..., sequence_parallel: _Optional[bool] = ..., virtual_stages: _Optional[int] = ..., p2p_scatter_gather: _Optional[bool] = ..., fp8: _Optional[str] = ..., expert_parallel: _Optional[int] = ..., context_parallel: _Optional[int] = ...) -> None: ...

class GpuPool(_message.Message):
    __slots__ = ("gpu_type", "zone", "count")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    zone: str
    count: int
    def __init__(self, gpu_type: _Optional[str] = ..., zone: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("pools",)
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[GpuPool]
    def __init__(self, pools: _Optional[_Iterable[_Union[GpuPool, _Mapping]]] = ...) -> None: ...

class RunSpec(_message.Message):
    __slots__ = ("model", "global_batch_size", "seq_len", "precision", "optimizer", "options", "steps", "checkpoint_every", "seed")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    model: str
    global_batch_size: int
    seq_len: int
    precision: str
    optimizer: str
    options: ExecutionOptions
    steps: int
    checkpoint_every: int
    seed: int
    def __init__(self, model: _Optional[str] = ..., global_batch_size: _Optional[int] = ..., seq_len: _Optional[int] = ..., precision: _Optional[str] = ..., optimizer: _Optional[str] = ..., options: _Optional[_Union[ExecutionOptions, _Mapping]] = ..., steps: _Optional[int] = ..., checkpoint_every: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...
