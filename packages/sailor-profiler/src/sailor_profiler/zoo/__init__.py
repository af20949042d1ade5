"""The torch model zoo shared by the profiler and the runtime: catalog decoder families built
per pipeline stage from layer ids; Megatron-style tensor parallelism applied afterwards by
``parallelize``.

Owner: sailor-profiler (the runtime imports it). Main entry: ``build_stage``.
"""

from .execution import RECOMPUTE, apply_execution
from .layers import Block, Embedding, Head, math_attention
from .parallelize import materialize, parallelize
from .stage import (
    StageModule,
    build_stage,
    enable_sequence_parallel,
    example_input,
    full_shape,
    init_parameters,
    layer_forward_backward,
    shard,
)
from .tp import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    all_reduce_,
    copy_to_tp,
    get_split,
    reduce_from_tp,
    sync_partial_grads,
    vocab_parallel_cross_entropy,
)

__all__ = [
    "Block",
    "ColumnParallelLinear",
    "Embedding",
    "Head",
    "RECOMPUTE",
    "RowParallelLinear",
    "StageModule",
    "VocabParallelEmbedding",
    "all_reduce_",
    "apply_execution",
    "build_stage",
    "copy_to_tp",
    "enable_sequence_parallel",
    "example_input",
    "full_shape",
    "get_split",
    "init_parameters",
    "layer_forward_backward",
    "materialize",
    "math_attention",
    "parallelize",
    "reduce_from_tp",
    "shard",
    "sync_partial_grads",
    "vocab_parallel_cross_entropy",
]
