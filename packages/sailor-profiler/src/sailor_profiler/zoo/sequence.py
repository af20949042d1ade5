"""Megatron sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", Sec. 4.2.2, Fig. 5) on the zoo's TP layers.

Inside a stage, between blocks, each TP rank holds ``s / tp`` consecutive tokens of the hidden
state ``[b, s, h]`` (dim 1): the norms, dropout and residual adds run on that chunk only.
The TP boundaries change from all-reduce to:

- entering attention / MLP (``g`` in the paper): all-gather the sequence forward,
  reduce-scatter the input gradient backward, keeping only the chunk for the weight
  gradients (``gathered_linears``: q, k, v or gate, up in one gather);
- leaving them through the row-parallel linear (``g-bar``): reduce-scatter the partial sums
  forward, all-gather the gradient backward (``reduce_scatter_from_tp``); its replicated bias
  is added to the chunk.

Stage edges stay replicated (what the pipeline sends): the stage splits the sequence before
its first block or head (``split_sequence``: take the chunk forward, all-gather the gradient
backward) and gathers it after its last block (``gather_sequence``: all-gather forward, take
the chunk of the gradient backward, which every TP rank holds whole). The head's final norm
runs on the chunk and its vocabulary-parallel projection reads it through
``gathered_linears``, as the blocks' linears do.

Replicated parameters used on a chunk (norm weights and biases, row-parallel biases) get a
gradient from that chunk's tokens only: their modules name them (``partial_grad_params``) and
``tp.sync_partial_grads`` sums them over the TP group once per optimizer step, after the last
microbatch (Megatron-LM's ``_allreduce_layernorm_grads``), so every TP rank then holds the
whole sum, as without sequence parallelism. Dropout masks are drawn per chunk (another
stream than one process's: runs that must match exactly use dropout 0).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _active(group) -> bool:
    # tp.py has the same two lines; tp imports this module (RowParallelLinear's reduce-scatter),
    # so importing them back would make a cycle.
    return group is not None and dist.get_world_size(group) > 1


SEQ_DIM = 1


def _gather(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather the chunks along the sequence: collectives cut dim 0 of a contiguous buffer,
    so the sequence goes first for the call."""
    size = dist.get_world_size(group)
    local = x.transpose(0, SEQ_DIM).contiguous()
    out = torch.empty((size * local.shape[0], *local.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, local, group=group)
    # Contiguous in [b, s, h]: q, k and v (gate and up) then stash this one tensor for their
    # weight gradients; a strided view would be copied by each of them (3x the memory).
    return out.transpose(0, SEQ_DIM).contiguous()


def _chunk(x: torch.Tensor, group) -> torch.Tensor:
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    return x.chunk(size, SEQ_DIM)[rank].contiguous()


def _reduce_scatter(x: torch.Tensor, group) -> torch.Tensor:
    """Sum over the group, each rank keeping its chunk of the sequence."""
    size = dist.get_world_size(group)
    full = x.transpose(0, SEQ_DIM).contiguous()
    out = torch.empty((full.shape[0] // size, *full.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, full, group=group)
    return out.transpose(0, SEQ_DIM).contiguous()


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


class _ReduceScatterFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


class _GatheredLinears(torch.autograd.Function):
    """Column-parallel linears that read one sequence-parallel input (q, k, v; gate, up):
    the chunk is all-gathered for the forward and again in backward, so only the chunk is
    kept for the weight gradients (Korthikanti et al. 2022, Sec. 4.2.2: "we store X^s and
    all-gather it again in backward"); the input gradient is reduce-scattered. Backward runs
    under the forward's autocast state, so mixed precision computes what F.linear's would."""

    @staticmethod
    def forward(ctx, x, group, n, *weights_and_biases):
        weights, biases = weights_and_biases[:n], weights_and_biases[n:]
        ctx.group, ctx.n = group, n
        ctx.has_bias = [b is not None for b in biases]
        ctx.device_type = x.device.type
        ctx.autocast = torch.is_autocast_enabled(ctx.device_type)
        ctx.autocast_dtype = torch.get_autocast_dtype(ctx.device_type)
        ctx.save_for_backward(x, *weights)
        full = _gather(x, group)
        return tuple(F.linear(full, w, b) for w, b in zip(weights, biases, strict=True))

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        with torch.autocast(ctx.device_type, ctx.autocast_dtype, enabled=ctx.autocast):
            full = _gather(x, ctx.group).flatten(0, -2)
            flat = [g.flatten(0, -2) for g in grads]
            grad_full = sum(g @ w for g, w in zip(flat, weights, strict=True))
            grad_weights = [g.t() @ full for g in flat]
            grad_biases = [
                g.sum(0) if has else None for g, has in zip(flat, ctx.has_bias, strict=True)
            ]
        grad_x = _reduce_scatter(grad_full.view(*grads[0].shape[:-1], -1), ctx.group)
        return grad_x, None, None, *grad_weights, *grad_biases


def gathered_linears(x: torch.Tensor, group, linears) -> tuple[torch.Tensor, ...]:
    """``linear(all-gather(x))`` for each column-parallel ``linear``, keeping only ``x``."""
    weights = [m.weight for m in linears]
    biases = [m.bias for m in linears]
    return _GatheredLinears.apply(x, group, len(linears), *weights, *biases)


def split_sequence(x: torch.Tensor, group) -> torch.Tensor:
    return _Split.apply(x, group) if _active(group) else x


def gather_sequence(x: torch.Tensor, group) -> torch.Tensor:
    return _Gather.apply(x, group) if _active(group) else x


def reduce_scatter_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _ReduceScatterFromTP.apply(x, group) if _active(group) else x
