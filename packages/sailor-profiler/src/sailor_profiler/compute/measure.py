"""Compute profiling of one TP rank: per layer id, forward / backward / optimizer-step time,
parameters and activation memory, for each microbatch size.

Each layer id is built alone with the model zoo (``build_stage(spec, i, i, ...)``: the very layer
the runtime trains), in training mode (dropout on), and run standalone on ``example_input``.
Per repetition: forward timed, then backward with an all-ones output gradient timed (gradients
accumulate into ``.grad`` as in gradient accumulation over microbatches). Under TP every rank
runs the same sequence, so the collectives inside the layer (Megatron's f/g all-reduces) are
part of the measured times; entries therefore say ``includes_tp_comm``.

Extrapolation (``blocks=K``): identical blocks have identical cost, so only blocks 1..K are run
and block j > K copies block 1 + (j - 1) mod K, with a note; ``bench/profiler_extrapolation.py``
checks the sum of per-layer times against a full-model measurement.

Sizes that do not fit are recorded with status 'oom' (predicted from an upper estimate before
running, or caught as an out-of-memory error), never skipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from sailor_sim import get_model

from ..devices import DeviceSpec
from ..launch import threads_per_rank
from ..timing import Clock, Stat, repeat, summarize
from ..zoo import build_stage, example_input
from .memory import ActivationMemory, measure_activation_memory
from .optim import optimizer_step_fn

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_STATE_BYTES = {"adam": 8, "adamw": 8, "sgd": 4}  # fp32 optimizer state per parameter


@dataclass(frozen=True)
class ComputeConfig:
    model: str
    device: DeviceSpec
    dtype: str = "fp32"
    mbs: tuple[int, ...] = (1,)
    seq_len: int = 128
    warmup: int = 2
    reps: int = 5
    blocks: int = 0
    """0: profile every block; K > 0: profile blocks 1..K, copy them to the others."""
    optimizer: str = "adam"
    memory_limit_bytes: int | None = None
    """Memory one rank may use; None: free device memory (CUDA) or available RAM / TP (CPU)."""
    threads: int | None = None
    """CPU threads per rank; None: ``launch.threads_per_rank`` (OMP_NUM_THREADS, else 1)."""


@dataclass(frozen=True)
class LayerResult:
    layer_id: int
    kind: str
    mbs: int
    tp: int
    status: str
    """'ok', or 'oom' when the layer does not fit at this microbatch size."""
    params: int
    fwd: Stat | None = None
    bwd: Stat | None = None
    opt: Stat | None = None
    memory: ActivationMemory | None = None
    note: str = ""


def layer_ids_to_profile(num_layers: int, blocks: int) -> list[int]:
    last_block = num_layers if blocks <= 0 else min(blocks, num_layers)
    return [0, *range(1, last_block + 1), num_layers + 1]


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, torch.cuda.OutOfMemoryError)
        or "out of memory" in text
        or ("can't allocate memory" in text)
    )


def _recover_from_oom(exc: BaseException, device: str) -> None:
    """Re-raise ``exc`` unless it is an out-of-memory error (a result; anything else is a
    bug); after one, hand the device's cached blocks back for what is measured next."""
    if not _is_oom(exc):
        raise exc
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _available_bytes(cfg: ComputeConfig, device: str, tp: int) -> int:
    if cfg.memory_limit_bytes is not None:
        return cfg.memory_limit_bytes
    if device.startswith("cuda"):
        free = torch.cuda.mem_get_info(torch.device(device))[0]
        # Blocks the caching allocator holds but does not use are free for this process too.
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return info.get("MemAvailable", info.get("MemFree", 0)) // tp


def estimated_bytes(cfg: ComputeConfig, layer_id: int, mbs: int, tp: int) -> int:
    """Estimate of what profiling one layer needs: weights, grads, optimizer state (and fp32
    masters under mixed precision), twice the analytic stash (two forwards may overlap in
    ``measure_activation_memory``) and input, output and their gradients. The stash is
    ``ModelSpec``'s with flash attention on CUDA (SDPA's fused kernels keep no score matrix;
    an OOM error while running still records 'oom') and without it on CPU, where an
    underestimate would meet the kernel's OOM killer instead of a catchable error."""
    spec = get_model(cfg.model)
    elem = torch.tensor([], dtype=TORCH_DTYPES[cfg.dtype]).element_size()
    params = spec.params(layer_id, tp)
    master = 4 if cfg.dtype != "fp32" else 0
    weights = params * (2 * elem + _STATE_BYTES[cfg.optimizer] + master)
    flash = cfg.device.kind == "cuda"
    stash = spec.activation_stash_bytes(layer_id, mbs, cfg.seq_len, cfg.dtype, tp, flash)
    hidden = 4 * mbs * cfg.seq_len * spec.hidden_size * elem
    return weights + 2 * stash + hidden


def _agree(flag: bool, group, device: str) -> bool:
    """True only if every TP rank says True (keeps ranks in lockstep around collectives).
    The tensor lives on the rank's device: NCCL reduces CUDA tensors only."""
    if group is None:
        return flag
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _param_dtype(cfg: ComputeConfig) -> torch.dtype:
    """Layers are built as the engine trains them: bf16/fp16 is mixed precision with fp32
    master weights (and an fp32 residual stream) under ``torch.autocast``, so the weights and
    a block's input stay fp32."""
    return torch.float32


def _mixed_precision(cfg: ComputeConfig, device: str):
    """``torch.autocast`` in the profile's dtype (matmuls and attention in bf16/fp16, norms,
    softmax and the loss in fp32, as autocast's op lists decide), exactly the engine's
    ``pipeline._autocast``; nothing for fp32."""
    if cfg.dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.split(":")[0], dtype=TORCH_DTYPES[cfg.dtype])


def _time_fwd_bwd(
    layer, inputs, device: str, warmup: int, reps: int, queued: bool = True
) -> tuple[Stat, Stat]:
    """``queued``: as a step runs it, the host ahead of the GPU (``timing.Clock``)."""
    clock = Clock(device, queued=queued)
    fwd, bwd = [], []
    for i in range(warmup + reps):
        if inputs[0].requires_grad:
            inputs[0].grad = None
        clock.start()
        out = layer(*inputs)
        t_fwd = clock.stop()
        grad = None if out.dim() == 0 else torch.ones_like(out)
        clock.start()
        out.backward(grad)
        t_bwd = clock.stop()
        if i >= warmup:
            fwd.append(t_fwd)
            bwd.append(t_bwd)
    return summarize(fwd), summarize(bwd)


def _time_optimizer(layer, optimizer: str, device: str, warmup: int, reps: int) -> Stat:
    """What the layer adds to its stage's optimizer step: a step over two copies of its
    parameters less a step over one. The engine steps a whole stage at once (one host read of
    the gradient norm, one fused AdamW call), so a step timed per layer charges that fixed part
    to every layer: 0.92 ms per OPT-350M block on an H200, 25 ms over the model, where the
    whole prediction was 28 ms above the measured step (2026-11-26). Where two copies do not
    fit on the device, the one-copy step is charged."""
    one = _time_step(optimizer_step_fn(layer, optimizer), device, warmup, reps)
    try:
        two = _time_step(optimizer_step_fn(layer, optimizer, copies=2), device, warmup, reps)
    except Exception as exc:  # out of memory: keep the one-copy figure
        _recover_from_oom(exc, device)
        return one
    return marginal_step(one, two)


def _time_step(step, device: str, warmup: int, reps: int) -> Stat:
    clock = Clock(device)

    def once() -> float:
        clock.start()
        step()
        return clock.stop()

    return repeat(once, warmup, reps)


def marginal_step(one: Stat, two: Stat) -> Stat:
    """The second copy's share of a two-copy step: two - one. Where timing noise makes that
    zero or less, half the two-copy step: each copy's update reads and writes its own
    parameters and states, so no copy is free."""
    extra = two.median - one.median
    if extra <= 0:
        return Stat(two.median / 2, two.p25 / 2, two.p75 / 2, two.n)
    return Stat(extra, max(0.0, two.p25 - one.median), max(0.0, two.p75 - one.median), two.n)


@dataclass(frozen=True)
class _Rank:
    """Where one TP rank profiles: the sweep's settings, its TP degree, device and group."""

    cfg: ComputeConfig
    tp: int
    device: str
    group: object = None


def _profile_layer(rank: _Rank, layer, lid: int, kind: str, mbs: int, opt_cache) -> LayerResult:
    cfg, tp, device, group = rank.cfg, rank.tp, rank.device, rank.group
    params = sum(p.numel() for p in layer.parameters())
    resident = sum(p.numel() * p.element_size() for p in layer.parameters())  # already placed
    need = estimated_bytes(cfg, lid, mbs, tp) - resident
    have = _available_bytes(cfg, device, tp)
    if not _agree(need <= have, group, device):
        return LayerResult(
            lid,
            kind,
            mbs,
            tp,
            "oom",
            params,
            note=f"estimated {need} B > {have} B available on some rank",
        )
    try:
        inputs = example_input(cfg.model, lid, mbs, cfg.seq_len, _param_dtype(cfg), device)
        with _mixed_precision(cfg, device):
            # TP > 1: plain events. Each rank sizes its own spin, so a rank's collective would
            # wait out a peer's longer spin, and the slowest rank's times are kept.
            fwd, bwd = _time_fwd_bwd(layer, inputs, device, cfg.warmup, cfg.reps, tp == 1)
            memory = measure_activation_memory(layer, inputs, kind)
        if "opt" not in opt_cache:  # the step does not depend on the microbatch size
            opt_cache["opt"] = _time_optimizer(layer, cfg.optimizer, device, cfg.warmup, cfg.reps)
    except Exception as exc:  # out-of-memory is a result
        _recover_from_oom(exc, device)
        return LayerResult(lid, kind, mbs, tp, "oom", params, note=f"out of memory: {exc}"[:200])
    return LayerResult(lid, kind, mbs, tp, "ok", params, fwd, bwd, opt_cache["opt"], memory)


def profile_rank(
    cfg: ComputeConfig,
    tp_rank: int = 0,
    tp: int = 1,
    group=None,
    progress: Callable[[tuple[int, int]], None] = lambda _step: None,
) -> list[LayerResult]:
    """Profile every (layer id, microbatch size) on one rank of a TP group of size ``tp``."""
    spec = get_model(cfg.model)
    device = cfg.device.for_rank(tp_rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(cfg.threads or threads_per_rank(tp))
    torch.manual_seed(0)
    results = []
    rank = _Rank(cfg, tp, device, group)
    for lid in layer_ids_to_profile(spec.num_layers, cfg.blocks):
        layer = build_stage(spec, lid, lid, tp_rank, tp, group, _param_dtype(cfg), device).layers[
            str(lid)
        ]
        layer.train()
        opt_cache: dict[str, Stat] = {}
        for mbs in cfg.mbs:
            results.append(_profile_layer(rank, layer, lid, spec.layer_kind(lid), mbs, opt_cache))
            progress((lid, mbs))
        del layer
    return _extrapolate(results, spec.num_layers, cfg.blocks)


def _extrapolate(results: list[LayerResult], num_layers: int, blocks: int) -> list[LayerResult]:
    if blocks <= 0 or blocks >= num_layers:
        return results
    by_key = {(r.layer_id, r.mbs): r for r in results}
    mbs_values = sorted({r.mbs for r in results})
    copies = [
        replace(by_key[(src, mbs)], layer_id=lid, note=f"copied from layer {src} (blocks={blocks})")
        for lid in range(blocks + 1, num_layers + 1)
        for src in [1 + (lid - 1) % blocks]
        for mbs in mbs_values
    ]
    return sorted(results + copies, key=lambda r: (r.layer_id, r.mbs))


def compute_worker(ctx, cfg: ComputeConfig) -> list[LayerResult]:
    """Entry point of one TP rank under ``launch.run_local`` (the group is the TP group)."""
    import torch.distributed as dist

    report = ctx.progress if ctx.rank == 0 else (lambda _step: None)
    return profile_rank(cfg, ctx.rank, ctx.world_size, dist.group.WORLD, report)


def merge_ranks(per_rank: list[list[LayerResult]]) -> list[LayerResult]:
    """One result per (layer, mbs): the slowest rank's times (it paces the TP group), the
    largest memory, rank 0's parameter count (Megatron splits evenly)."""
    merged = []
    for rows in zip(*per_rank, strict=True):
        first = rows[0]
        if any(r.status != "ok" for r in rows):
            merged.append(next(r for r in rows if r.status != "ok"))
            continue
        merged.append(
            replace(
                first,
                fwd=max((r.fwd for r in rows), key=lambda s: s.median),
                bwd=max((r.bwd for r in rows), key=lambda s: s.median),
                opt=max((r.opt for r in rows), key=lambda s: s.median),
                memory=max((r.memory for r in rows), key=lambda m: m.stash_bytes),
            )
        )
    return merged


def params_per_layer(model: str, tp: int = 1) -> dict[int, int]:
    """Parameters per layer id on one rank of a TP group, counted on the meta device."""
    spec = get_model(model)
    return {
        lid: sum(
            p.numel()
            for p in build_stage(
                spec, lid, lid, 0, tp, None, torch.float32, "meta", seed=None
            ).parameters()
        )
        for lid in range(spec.num_layer_ids)
    }


def full_model_seconds(cfg: ComputeConfig, mbs: int) -> Stat:
    """Forward + backward seconds of the whole model in one process (TP 1), to check the sum
    of per-layer times (and an extrapolation from a few blocks) against."""
    spec = get_model(cfg.model)
    device = cfg.device.for_rank(0)
    model = build_stage(spec, 0, spec.head_layer_id, 0, 1, None, _param_dtype(cfg), device)
    model.train()
    tokens = example_input(spec, 0, mbs, cfg.seq_len, _param_dtype(cfg), device)[0]
    clock = Clock(device)

    def once() -> float:
        clock.start()
        with _mixed_precision(cfg, device):
            loss = model(tokens, tokens)
        loss.backward()
        return clock.stop()

    return repeat(once, cfg.warmup, cfg.reps)
