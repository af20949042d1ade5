from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Replica(_message.Message):
    __slots__ = ("gpu_type", "zone", "tp", "microbatch_size", "num_microbatches")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    MICROBATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    zone: str
    tp: int
    microbatch_size: int
    num_microbatches: int
    def __init__(self, gpu_type: _Optional[str] = ..., zone: _Optional[str] = ..., tp: _Optional[int] = ..., microbatch_size: _Optional[int] = ..., num_microbatches: _Optional[int] = ...) -> None: ...

class Stage(_message.Message):
    __slots__ = ("first_layer", "last_layer", "replicas")
    FIRST_LAYER_FIELD_NUMBER: _ClassVar[int]
    LAST_LAYER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    first_layer: int
    last_layer: int
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    def __init__(self, first_layer: _Optional[int] = ..., last_layer: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("stages",)
    STAGES_FIELD_NUMBER: _ClassVar[int]
    stages: _containers.RepeatedCompositeFieldContainer[Stage]
    def __init__(self, stages: _Optional[_Iterable[_Union[Stage, _Mapping]]] = ...) -> None: ...
