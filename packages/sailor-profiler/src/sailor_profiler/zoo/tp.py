"""Tensor-parallel building blocks (Megatron-LM style), usable with or without a process group.

Shoeybi et al., "Megatron-LM" (2019), Sec. 3: a column-parallel linear splits its output
features, a row-parallel linear splits its input features and all-reduces the partial sums;
``f`` (identity forward, all-reduce backward) enters a TP region and ``g`` (all-reduce forward,
identity backward) leaves it. The embedding and the LM head split the vocabulary; the
cross-entropy is computed on the vocabulary shards without gathering the logits.

Every parameter carries its split as metadata: ``param.tp_split = (dim, tp_size)`` when each TP
rank holds the ``tp_rank``-th of ``tp_size`` equal chunks of the full tensor along ``dim``, or
``None`` when every rank holds the full (replicated) tensor. Splittable parameters carry their
split even at ``tp_size == 1`` (``(dim, 1)``), so replicas of different TP degree agree on
which tensors are sharded. Checkpoints, data-parallel
reduction across replicas of different TP degree and resharding all read only this attribute.

The layers are built full size (TP 1, splits ``(dim, 1)``); ``zoo.parallelize`` then calls
each layer's ``parallelize(tp_rank, tp_size, group)``, which keeps one rank's chunk.
``tp_group=None`` with ``tp_size > 1`` gives one rank's shard and skips every collective: the
profiler uses it to time one GPU's share of a layer, and parameter counting uses it on the meta
device. Collectives always run on contiguous buffers (gloo silently miscomputes strided views).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

SplitT = tuple[int, int] | None


def set_split(param: nn.Parameter, split: SplitT) -> nn.Parameter:
    """Attach the TP layout to a parameter (see module docstring)."""
    param.tp_split = split  # type: ignore[attr-defined]
    return param


def get_split(param: torch.Tensor) -> SplitT:
    return getattr(param, "tp_split", None)


def _active(group) -> bool:
    return group is not None and dist.get_world_size(group) > 1


def all_reduce_(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """All-reduce through a contiguous buffer (no-op without a group); returns ``t``."""
    if not _active(group):
        return t
    buf = t.contiguous()
    dist.all_reduce(buf, op=op, group=group)
    if buf.data_ptr() != t.data_ptr():
        t.copy_(buf)
    return t


def sync_partial_grads(stage: nn.Module, group) -> None:
    """Sum over the TP ``group``, in one all-reduce, the gradients each rank holds only a
    partial sum of: replicated parameters used on this rank's share of the work (the q/k
    norms on its heads, norms and row-parallel biases on its tokens under sequence
    parallelism; each module names them in ``partial_grad_params``).

    Call it once per optimizer step, after the last microbatch's backward and before the
    data-parallel reduction: gradients accumulate over the microbatches, and a sum of sums is
    the sum, so one small all-reduce per stage and step replaces one per parameter and
    microbatch (Megatron-LM: ``_allreduce_layernorm_grads`` in ``finalize_model_grads``, one
    coalesced all-reduce after the backward of the last microbatch). Until then those
    gradients differ across the TP ranks. Nothing happens without a group or with one rank.
    FSDP's DTensor gradients are summed through their local shards: the TP ranks of one DP
    rank hold the same shard of a replicated parameter."""
    if not _active(group):
        return
    params = {id(p): p for m in stage.modules() for p in _partial_params(m)}.values()
    grads = [_local(_grad_or_zero(p)) for p in params]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _partial_params(module: nn.Module) -> list[nn.Parameter]:
    named = getattr(module, "partial_grad_params", None)
    return named() if named is not None else []


def _grad_or_zero(p: nn.Parameter) -> torch.Tensor:
    # Every TP rank must pack the same tensors, even one whose loss did not reach a parameter.
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    return p.grad


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP), any other tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


class _CopyToTP(torch.autograd.Function):
    """``f``: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def sum_over_tp(x: torch.Tensor, group) -> torch.Tensor:
    """``x`` summed over the TP ``group`` for each rank to use on its own share of the work
    (its heads): all-reduce forward, and backward too, since that use is not replicated after
    it (unlike ``g``'s): each rank's input gradient is the sum of what every rank's share sends
    back. ``f`` then ``g``; ``x`` itself without a group (the profiler's one-rank shard)."""
    return reduce_from_tp(copy_to_tp(x, group), group)


def copy_to_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _CopyToTP.apply(x, group) if _active(group) else x


def reduce_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group) if _active(group) else x


def _check_divisible(size: int, tp_size: int, what: str) -> None:
    if size % tp_size:
        raise ValueError(f"{what}: TP degree {tp_size} does not divide {size}")


def _new_param(shape, split: SplitT, dtype, device) -> nn.Parameter:
    return set_split(nn.Parameter(torch.empty(*shape, dtype=dtype, device=device)), split)


def shard_parameter(param: nn.Parameter, tp_rank: int, tp_size: int) -> nn.Parameter:
    """This rank's chunk of a full (``(dim, 1)``) splittable parameter, as a new parameter
    with split ``(dim, tp_size)``. Values are sliced (a meta parameter stays meta)."""
    split = get_split(param)
    if split is None or split[1] != 1:
        raise ValueError(
            f"parameter with split {split} is not a full splittable tensor; "
            "parallelize a stage only once"
        )
    dim = split[0]
    data = param.detach().chunk(tp_size, dim)[tp_rank].clone()
    return set_split(nn.Parameter(data, requires_grad=param.requires_grad), (dim, tp_size))


class ColumnParallelLinear(nn.Module):
    """y_k = x W_k^T + b_k with W split by output rows; the output stays sharded.

    Built full size (TP 1); ``parallelize`` keeps one rank's rows. ``enter_region=False`` when
    the caller already applied ``copy_to_tp`` to the input (several column-parallel layers
    reading one input then all-reduce its gradient once)."""

    def __init__(self, in_f, out_f, bias, dtype, device, enter_region: bool = True):
        super().__init__()
        self.enter_region = enter_region
        self.group, self.tp_size = None, 1
        self.weight = _new_param((out_f, in_f), (0, 1), dtype, device)
        self.bias = _new_param((out_f,), (0, 1), dtype, device) if bias else None

    def parallelize(self, tp_rank: int, tp_size: int, group) -> None:
        _check_divisible(self.weight.shape[0], tp_size, "column-parallel output features")
        self.weight = shard_parameter(self.weight, tp_rank, tp_size)
        if self.bias is not None:
            self.bias = shard_parameter(self.bias, tp_rank, tp_size)
        self.group, self.tp_size = group, tp_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp(x, self.group) if self.enter_region else x
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = sum_k x_k W_k^T + b with W split by input columns; the bias is replicated."""

    def __init__(self, in_f, out_f, bias, dtype, device):
        super().__init__()
        self.group = None
        self.sequence_group = None
        """Sequence parallelism (``sequence``): reduce-scatter the partial sums along the
        sequence instead of all-reducing them; the bias is added to this rank's chunk."""
        self.weight = _new_param((out_f, in_f), (1, 1), dtype, device)
        self.bias = _new_param((out_f,), None, dtype, device) if bias else None

    def parallelize(self, tp_rank: int, tp_size: int, group) -> None:
        _check_divisible(self.weight.shape[1], tp_size, "row-parallel input features")
        self.weight = shard_parameter(self.weight, tp_rank, tp_size)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_group is not None:
            from .sequence import reduce_scatter_from_tp

            y = reduce_scatter_from_tp(F.linear(x, self.weight), self.sequence_group)
        else:
            y = reduce_from_tp(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y

    def partial_grad_params(self) -> list[nn.Parameter]:
        """Under sequence parallelism the bias, added to this rank's chunk of the tokens (its
        gradient a partial sum, ``sync_partial_grads``); without it the bias is added to the
        all-reduced output, whole on every rank."""
        if self.sequence_group is None or self.bias is None:
            return []
        return [self.bias]


class VocabParallelEmbedding(nn.Module):
    """Embedding whose vocabulary rows are split; out-of-shard tokens contribute zeros."""

    def __init__(self, vocab, dim, dtype, device):
        super().__init__()
        self.group, self.tp_size = None, 1
        self.per, self.start = vocab, 0
        self.weight = _new_param((vocab, dim), (0, 1), dtype, device)

    def parallelize(self, tp_rank: int, tp_size: int, group) -> None:
        _check_divisible(self.weight.shape[0], tp_size, "vocabulary")
        self.per = self.weight.shape[0] // tp_size
        self.start = tp_rank * self.per
        self.weight = shard_parameter(self.weight, tp_rank, tp_size)
        self.group, self.tp_size = group, tp_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(tokens, self.weight)
        local = tokens - self.start
        outside = (local < 0) | (local >= self.per)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(out, self.group)


class _VocabParallelCE(torch.autograd.Function):
    """Mean cross-entropy over tokens from vocabulary-sharded logits (Megatron's
    ``_VocabParallelCrossEntropy``): max, target logit and sum of exponentials are all-reduced
    (no-ops without a group).

    One fp32 buffer per token and vocabulary entry, built in place: the logits' fp32 copy
    becomes their softmax (saved) and in backward the gradient. So the head's peak holds, beside
    that buffer, only the logits in their own dtype (the matmul's output in forward, the
    gradient cast back to it in backward); ``F.cross_entropy`` on the fp32 logits held two more
    fp32 copies in backward (the log-softmax's gradient and its input's): OPT-350M's peak on an
    H200 at 8 x 2048 tokens fell 4.95 GB with this, 6 bytes per logit (runtime README).
    ``sailor_sim.simulate.memory.transient_bytes`` is this physics."""

    @staticmethod
    def forward(ctx, logits, target, start, group):
        # bf16/fp16: .float() is the one copy; fp32/fp64: clone, the caller holds the input
        half = logits.dtype in (torch.float16, torch.bfloat16)
        x = logits.float() if half else logits.clone()
        lmax = x.max(dim=-1, keepdim=True)[0]
        all_reduce_(lmax, group, dist.ReduceOp.MAX)
        x.sub_(lmax)
        per = x.shape[-1]
        local = target - start
        outside = (local < 0) | (local >= per)
        local = local.masked_fill(outside, 0)
        picked = x.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        all_reduce_(picked, group)
        x.exp_()
        sum_exp = x.sum(-1)
        all_reduce_(sum_exp, group)
        loss = sum_exp.log() - picked
        x.div_(sum_exp.unsqueeze(-1))  # the softmax
        ctx.save_for_backward(x, local, outside)
        ctx.numel = loss.numel()
        ctx.spent = False
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        if ctx.spent:  # the softmax became the first backward's gradient
            raise RuntimeError(
                "the cross-entropy's backward ran twice (retain_graph): its saved softmax was "
                "turned into the gradient in place; run the forward again"
            )
        ctx.spent = True
        softmax, local, outside = ctx.saved_tensors
        # softmax - onehot(target), in place, without materializing a one-hot of the shard
        g = softmax.view(-1, softmax.shape[-1])
        rows = torch.arange(g.shape[0], device=g.device)
        g[rows, local.reshape(-1)] -= (~outside).reshape(-1).to(g.dtype)
        return softmax.mul_(grad / ctx.numel), None, None, None


def vocab_parallel_cross_entropy(logits, target, tp_rank, tp_size, group) -> torch.Tensor:
    """Mean token cross-entropy; ``logits`` holds this rank's vocabulary shard (all of it at
    ``tp_size`` 1, where ``group`` is None)."""
    start = tp_rank * logits.shape[-1]
    return _VocabParallelCE.apply(logits, target, start, group if tp_size > 1 else None)
