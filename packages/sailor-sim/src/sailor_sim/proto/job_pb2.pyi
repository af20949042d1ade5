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
    __slots__ = ("grad_dtype", "flash_attention", "recompute", "zero", "sequence_parallel", "virtual_stages", "p2p_scatter_gather", "fp8", "expert_parallel", "context_parallel", "fused_loss")
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
    FUSED_LOSS_FIELD_NUMBER: _ClassVar[int]
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
    fused_loss: bool
    def __init__(self, grad_dtype: _Optional[str] = ..., flash_attention: _Optional[bool] = ..., recompute: _Optional[str] = ..., zero: _Optional[str] = ..., sequence_parallel: _Optional[bool] = ..., virtual_stages: _Optional[int] = ..., p2p_scatter_gather: _Optional[bool] = ..., fp8: _Optional[str] = ..., expert_parallel: _Optional[int] = ..., context_parallel: _Optional[int] = ..., fused_loss: _Optional[bool] = ...) -> None: ...

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
    __slots__ = ("model", "global_batch_size", "seq_len", "precision", "optimizer", "options", "steps", "checkpoint_every", "seed", "recipe", "extensions")
    class ExtensionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    global_batch_size: int
    seq_len: int
    precision: str
    optimizer: str
    options: ExecutionOptions
    steps: int
    checkpoint_every: int
    seed: int
    recipe: Recipe
    extensions: _containers.ScalarMap[str, str]
    def __init__(self, model: _Optional[str] = ..., global_batch_size: _Optional[int] = ..., seq_len: _Optional[int] = ..., precision: _Optional[str] = ..., optimizer: _Optional[str] = ..., options: _Optional[_Union[ExecutionOptions, _Mapping]] = ..., steps: _Optional[int] = ..., checkpoint_every: _Optional[int] = ..., seed: _Optional[int] = ..., recipe: _Optional[_Union[Recipe, _Mapping]] = ..., extensions: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Recipe(_message.Message):
    __slots__ = ("lr", "min_lr", "warmup_steps", "decay_steps", "schedule", "wsd_decay_fraction", "weight_decay", "no_decay", "clip_norm", "beta1", "beta2", "eps")
    LR_FIELD_NUMBER: _ClassVar[int]
    MIN_LR_FIELD_NUMBER: _ClassVar[int]
    WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    DECAY_STEPS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    WSD_DECAY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    NO_DECAY_FIELD_NUMBER: _ClassVar[int]
    CLIP_NORM_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    lr: float
    min_lr: float
    warmup_steps: int
    decay_steps: int
    schedule: str
    wsd_decay_fraction: float
    weight_decay: float
    no_decay: str
    clip_norm: float
    beta1: float
    beta2: float
    eps: float
    def __init__(self, lr: _Optional[float] = ..., min_lr: _Optional[float] = ..., warmup_steps: _Optional[int] = ..., decay_steps: _Optional[int] = ..., schedule: _Optional[str] = ..., wsd_decay_fraction: _Optional[float] = ..., weight_decay: _Optional[float] = ..., no_decay: _Optional[str] = ..., clip_norm: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., eps: _Optional[float] = ...) -> None: ...
