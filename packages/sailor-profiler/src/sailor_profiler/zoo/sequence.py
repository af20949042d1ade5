"""Megatron sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", Sec. 4.2.2, Fig. 5) on the zoo's TP layers.

Inside a stage, between blocks, each TP rank holds ``s / tp`` consecutive tokens of the hidden
state ``[b, s, h]`` (dim 1): the norms, dropout and residual adds run on that chunk only.
The TP boundaries change from all-reduce to:

- entering attention / MLP (``g`` in the paper): all-gather the sequence forward,
  reduce-scatter the input gradient backward (``gather_into_tp``);
- leaving them through the row-parallel linear (``g-bar``): reduce-scatter the partial sums
  forward, all-gather the gradient backward (``reduce_scatter_from_tp``); its replicated bias
  is added to the chunk.

Stage edges stay replicated (what the pipeline sends and the head reads): the stage splits the
sequence before its first block (``split_sequence``: take the chunk forward, all-gather the
gradient backward) and gathers it after its last (``gather_sequence``: all-gather forward,
take the chunk of the gradient backward, which every TP rank holds whole).

Replicated parameters used on a chunk (norm weights and biases, row-parallel biases) get a
gradient from that chunk's tokens only: they enter through ``copy_to_tp`` (identity forward,
all-reduce of the gradient backward), so every TP rank holds the whole sum, as without
sequence parallelism. Dropout masks are drawn per chunk (another stream than one process's:
runs that must match exactly use dropout 0).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .tp import _active

SEQ_DIM = 1


def _gather(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather the chunks along the sequence: collectives cut dim 0 of a contiguous buffer,
    so the sequence goes first for the call."""
    size = dist.get_world_size(group)
    local = x.transpose(0, SEQ_DIM).contiguous()
    out = torch.empty((size * local.shape[0], *local.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, local, group=group)
    return out.transpose(0, SEQ_DIM)


def _chunk(x: torch.Tensor, group) -> torch.Tensor:
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    return x.chunk(size, SEQ_DIM)[rank].contiguous()


def _reduce_scatter(x: torch.Tensor, group) -> torch.Tensor:
    """Sum over the group, each rank keeping its chunk of the sequence."""
    size = dist.get_world_size(group)
    full = x.transpose(0, SEQ_DIM).contiguous()
    out = torch.empty((full.shape[0] // size, *full.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, full, group=group)
    return out.transpose(0, SEQ_DIM)


class _Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _chunk(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _chunk(grad, ctx.group), None


class _GatherIntoTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(grad, ctx.group), None


class _ReduceScatterFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


def split_sequence(x: torch.Tensor, group) -> torch.Tensor:
    return _Split.apply(x, group) if _active(group) else x


def gather_sequence(x: torch.Tensor, group) -> torch.Tensor:
    return _Gather.apply(x, group) if _active(group) else x


def gather_into_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _GatherIntoTP.apply(x, group) if _active(group) else x


def reduce_scatter_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _ReduceScatterFromTP.apply(x, group) if _active(group) else x


def enable_sequence_parallel(stage: nn.Module, group) -> nn.Module:
    """Switch a parallelized stage's blocks to sequence parallelism over ``group`` (its TP
    group; None or one rank: nothing changes). Returns ``stage``."""
    if not _active(group):
        return stage
    from .layers import MLP, Attention, Block, Norm
    from .tp import RowParallelLinear

    stage.sequence_group = group
    for block in (m for m in stage.modules() if isinstance(m, Block)):
        for module in block.modules():
            if isinstance(module, Attention | MLP | RowParallelLinear | Norm):
                module.sequence_group = group
    return stage
