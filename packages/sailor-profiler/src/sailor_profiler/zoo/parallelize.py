"""Tensor parallelism applied to a built stage, outside the model constructors (as torchtitan's
``parallelize`` applies it): the constructors build full-size layers, ``parallelize`` keeps one
TP rank's shard of each and wires its collectives, ``materialize`` puts the parameters on their
device. ``build_stage`` runs the three on the meta device first, so no rank ever allocates the
full layer.

Why our Megatron-style modules (``tp``) and not DTensor's ``parallelize_module``: the replicas
of one pipeline stage may have different TP degrees, and their data-parallel reduction joins
"fine pieces" of shards across them (``sailor_runtime.engine.parallel.topology``); a DTensor
lives on one device mesh with one TP degree, so a gradient reduction between a TP-1 and a TP-4
replica of the same layer is not a collective over meshes. Our shards are plain tensors with
their split as metadata (``tp_split``), which the DP reduction, ZeRO and checkpoints read;
checkpoints express them as DTensors only to describe chunks to
``torch.distributed.checkpoint``. The modules are also what the exact-equivalence tests pin: q,
k and v enter the TP region once (one all-reduce of their summed input gradient), where
``ColwiseParallel`` on each would all-reduce three times in another summation order.
"""

from __future__ import annotations

import torch
from torch import nn

from .layers import MLP, Attention, Head, HeadNorm, ProjectionNorm
from .tp import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    get_split,
    set_split,
)

_SHARDED = (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    HeadNorm,  # a weight per head ('per_head'); the shared one stays whole
    ProjectionNorm,
)


def parallelize(stage: nn.Module, tp_rank: int, tp_size: int, tp_group=None) -> nn.Module:
    """Keep TP rank ``tp_rank``'s shard of every layer of ``stage`` (built full size) and set
    its collectives to ``tp_group`` (None: one rank's shard without collectives, as the
    profiler times it). Values are sliced, so a built full model can be parallelized too.
    Returns ``stage``."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} is outside 0..{tp_size - 1}")
    stage.spec.check_tp(tp_size)
    if tp_size > 1:
        for module in list(stage.modules()):
            if isinstance(module, _SHARDED):
                module.parallelize(tp_rank, tp_size, tp_group)
            elif isinstance(module, Attention):
                module.heads //= tp_size
                module.kv_heads //= tp_size
                module.first_head = tp_rank * module.heads  # its ALiBi slopes
                module.group = tp_group
            elif isinstance(module, MLP):
                module.group = tp_group
            elif isinstance(module, Head):
                module.tp_rank, module.tp_size, module.group = tp_rank, tp_size, tp_group
    stage.tp_rank, stage.tp_size = tp_rank, tp_size
    return stage


def materialize(stage: nn.Module, device: str | torch.device) -> nn.Module:
    """Give every parameter uninitialized storage on ``device`` (same shape, dtype and split);
    returns ``stage``."""
    for module in stage.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            fresh = nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad)
            module._parameters[name] = set_split(fresh, get_split(p))
    return stage
