"""``train``: one rank of a heterogeneous plan, from rendezvous to the last step.

Rendezvous: the authenticated store (``engine.storeserver``) at (master_addr, master_port),
hosted by rank 0 or, with ``store_is_external``, by someone else (the controller, the local
launcher); the rank's client (``engine.rendezvous.RendezvousStore``) proves it holds
``store_key`` and sees only its namespace ``store_prefix`` (one per generation, so a restarted
job never reads a dead one's keys). gloo and NCCL rendezvous through the same client. Backend
``gloo`` (CPU) or ``nccl`` (one CUDA device per rank: ``LOCAL_RANK`` if set, else rank modulo
the visible device count).

Per step: every replica reads its samples (replica j takes samples ``offset_j ..`` of the
global batch, ``offset_j`` = samples of replicas < j), runs its pipeline (``pipeline``), the
TP ranks sum their partial gradients of replicated parameters (``sync_partial_grads``), the
stage's replicas reduce gradients (``optim``), one world all-reduce gives the global gradient
norm and the loss, gradients are clipped, AdamW steps. Metrics go to a JSON-lines file from the
metrics rank (``Topology.metrics_rank``: TP rank 0 of replica 0 of the last stage).
Checkpoints every ``checkpoint_every`` steps and at the last step (``checkpoint``); on start
the latest valid checkpoint in the directory is loaded into this plan, whatever plan wrote it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from sailor_profiler import (
    adamw_implementation,
    apply_execution,
    apply_update,
    build_stage,
    enable_sequence_parallel,
    sync_partial_grads,
)
from sailor_sim import Job, Plan, Replica

from ..backend import check_backend
from ..checkpoints import checkpoint as ckpt
from ..checkpoints import savefaults
from ..config import EngineError, TrainConfig
from ..options import FSDP_ZERO, describe, sdpa, trained_with
from ..parallel.optim import (
    LossScaler,
    clip_coefficient,
    decayed_params,
    local_norm_sq,
    make_optimizer,
    reduce_data_parallel,
    world_sums,
)
from ..parallel.pipeline import ChunkedStage, Link, Microbatches, chunks_of, run_iteration
from ..parallel.schedule import chunk_layers
from ..parallel.tied import head_copy, sync_tied_gradients, syncs_tied_copies
from ..parallel.topology import Groups, Slot, Topology, build_groups
from ..parallel.zero import ShardedAdamW
from ..rendezvous import RendezvousStore
from ..storeserver import StoreServer, one_key
from .data import TextDataset
from .memprobe import StepPeak, persistent_bytes
from .stepmetrics import StepMeter

log = logging.getLogger("sailor_runtime.engine")
_HOSTED: list[StoreServer] = []
"""The store a rank 0 hosts (without ``store_is_external``), kept for the process's life."""

TORCH_DTYPES = {
    "fp32": torch.float32,
    "fp64": torch.float64,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


@dataclass
class TrainResult:
    losses: dict[int, float]
    """Global step (1-based) -> loss of the global batch (on every rank)."""
    final_step: int
    resumed_from: int | None


def _device(backend: str, rank: int) -> torch.device:
    """CPU for gloo; for nccl one CUDA device per rank (``LOCAL_RANK``, else rank modulo the
    visible devices; an agent that sets CUDA_VISIBLE_DEVICES per rank gets device 0)."""
    if backend != "nccl":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", -1))
    device = torch.device("cuda", local if local >= 0 else rank % torch.cuda.device_count())
    torch.cuda.set_device(device)  # NCCL collectives and barriers use the current device
    return device


def init_distributed(rank: int, world_size: int, cfg: TrainConfig) -> RendezvousStore:
    """Join the process group; the store returned must stay referenced until the group is
    destroyed (torch calls a Python store's methods through its Python object)."""
    device = _device(cfg.backend, rank)  # before the process group: NCCL binds this device
    timeout = timedelta(seconds=cfg.timeout_s)
    key = bytes.fromhex(cfg.store_key)
    if rank == 0 and not cfg.store_is_external:
        _HOSTED.append(  # lives as long as this process: others may still rendezvous late
            StoreServer.listen(cfg.master_addr, cfg.master_port, one_key(cfg.store_prefix, key))
        )
    store = RendezvousStore(cfg.master_addr, cfg.master_port, cfg.store_prefix, key, timeout)
    dist.init_process_group(
        cfg.backend, store=store, rank=rank, world_size=world_size, timeout=timeout
    )
    # The first operation on an NCCL communicator must involve every rank of it; the
    # pipeline's batched p2p (batch_isend_irecv) may not be that first operation.
    dist.all_reduce(torch.zeros(1, device=device))
    return store


def use_tf32(device: torch.device, param_dtype: torch.dtype, autocast) -> bool:
    """fp32 asked on CUDA: matmuls and convolutions on TF32 tensor cores (what the simulator's
    fp32 peak assumes on Ampere and later, and what torchtitan and Megatron enable)."""
    return device.type == "cuda" and param_dtype == torch.float32 and autocast is None


def check_inputs(job: Job, plan: Plan, rank: int, world_size: int, cfg: TrainConfig) -> Topology:
    plan.check(job)
    topo = Topology(plan)
    if world_size != topo.world_size:
        raise EngineError(
            f"is {world_size} but the plan uses {topo.world_size} GPUs; launch "
            "one rank per GPU of the plan",
            field="world_size",
        )
    if not 0 <= rank < world_size:
        raise EngineError(f"{rank} is outside 0..{world_size - 1}", field="rank")
    if cfg.steps < 0 or cfg.checkpoint_every < 0:
        raise EngineError("steps and checkpoint_every must be >= 0", field="steps")
    if cfg.backend not in ("gloo", "nccl"):
        raise EngineError(f"unknown backend {cfg.backend!r}; use gloo or nccl", field="backend")
    check_backend(cfg.backend, plan, torch.cuda.device_count())
    if job.optimizer == "sgd":
        raise EngineError(
            "the engine trains with AdamW; use optimizer 'adam' or 'adamw'", field="job.optimizer"
        )
    dtype = cfg.dtype or job.dtype
    if dtype not in TORCH_DTYPES:
        raise EngineError(
            f"unknown dtype {dtype!r}; use one of {list(TORCH_DTYPES)}", field="dtype"
        )
    return topo


def precision(job: Job, cfg: TrainConfig) -> tuple[torch.dtype, torch.dtype | None]:
    """(parameter dtype, autocast dtype or None). bf16/fp16 are mixed precision: fp32
    parameters (the master weights) and an autocast forward; fp64 (tests) and fp32 are plain."""
    if cfg.dtype == "fp64":
        return torch.float64, None
    name = cfg.precision or cfg.dtype or job.dtype
    if name in ("bf16", "fp16"):
        return torch.float32, TORCH_DTYPES[name]
    return TORCH_DTYPES[name], None


def train(job: Job, plan: Plan, rank: int, world_size: int, cfg: TrainConfig) -> TrainResult:
    """Run this rank until ``cfg.steps``; collective with every other rank of the plan."""
    topo = check_inputs(job, plan, rank, world_size, cfg)
    store = init_distributed(rank, world_size, cfg)
    log.info("rank %d/%d: joined %s", rank, world_size, cfg.store_prefix)
    try:
        return _train(job, plan, topo, rank, cfg)
    finally:
        dist.destroy_process_group()
        store.close()


def _train(job: Job, plan: Plan, topo: Topology, rank: int, cfg: TrainConfig) -> TrainResult:
    """Set this rank up, then step it to ``cfg.steps``."""
    s = _setup(job, plan, topo, rank, cfg)
    # Only the metrics rank writes the JSON lines; the file is closed however the loop ends.
    writes = cfg.metrics_path and rank == topo.metrics_rank
    with open(cfg.metrics_path, "a") if writes else contextlib.nullcontext() as metrics:
        return _loop(s, metrics)


@dataclass
class RankState:
    """What the step loop needs of this rank, built once by ``_setup``. ``step`` (steps done)
    and ``consumed`` (samples of the global batches trained) start where the resumed
    checkpoint left off and advance with every step."""

    job: Job
    plan: Plan
    topo: Topology
    cfg: TrainConfig
    rank: int
    device: torch.device
    slot: Slot
    rep: Replica
    groups: Groups
    model: torch.nn.Module
    autocast: torch.dtype | None
    scaler: LossScaler
    opt: object
    """AdamW: torch's or Sailor's, ``ShardedAdamW`` under ZeRO-1, over DP shards under FSDP."""
    params: list
    norm_params: list
    """``params`` less the head's copy of a tied matrix: its gradient counts once."""
    decayed: list
    tied: bool
    mesh: object | None
    """FSDP's device mesh, None without FSDP."""
    gather: Callable | None
    """FSDP's all-gather of a DP-sharded tensor for the checkpoint, None without FSDP."""
    layout: ckpt.TPLayout
    saver: ckpt.AsyncSaver | None
    data: object
    val: object | None
    offset: int
    """The first sample of this replica's share of every global batch."""
    link: Link
    meter: StepMeter
    logs_samples: bool
    step: int
    consumed: int
    resumed: int | None

    @property
    def is_loss_rank(self) -> bool:
        """The rank whose pipeline output holds the loss: TP rank 0 of a last-stage replica."""
        return self.slot.stage == self.topo.num_stages - 1 and self.slot.tp_rank == 0


@dataclass
class StepMetrics:
    """One optimizer step as the metrics line reports it (loss and norm unscaled)."""

    loss: float
    norm: float
    lr: float


def _setup(job: Job, plan: Plan, topo: Topology, rank: int, cfg: TrainConfig) -> RankState:
    """Build this rank's stage, optimizer and data and load the latest checkpoint. The
    collectives (groups, checkpoint group, FSDP mesh, resume) run in the same order on every
    rank: torch.distributed requires it."""
    device = _device(cfg.backend, rank)
    slot = topo.slot(rank)
    groups = build_groups(topo, rank, tied=syncs_tied_copies(job.model, plan))
    log.info("rank %d: groups built", rank)
    rep = plan.stages[slot.stage].replicas[slot.replica]
    param_dtype, autocast = precision(job, cfg)
    model = _build_model(job, plan, slot, rep, groups, param_dtype, autocast, device, cfg)
    scaler = LossScaler(enabled=autocast == torch.float16)
    log.info(
        "rank %d: stage %s built, layer ids %s (%s)",
        rank, slot, list(model.layer_ids), describe(cfg.options, cfg.precision),
    )  # fmt: skip
    # DCP's collectives get a gloo group of their own (created on every rank, in one order).
    ckpt_group = ckpt.checkpoint_group(cfg.timeout_s) if cfg.checkpoint_dir else None
    layout = ckpt.TPLayout(groups.tp)
    opt, mesh, gather, (step, consumed, resumed) = _optimizer_and_resume(
        cfg, rank, topo, slot, groups, model, device, layout, ckpt_group, scaler
    )
    params = list(model.parameters())
    decayed = decayed_params(model, cfg.optim.no_decay)
    tied = syncs_tied_copies(model.spec, plan)
    if tied and mesh is not None:
        raise EngineError(
            "a tied embedding over several pipeline stages cannot be sharded with FSDP yet; "
            "use zero none/zero1, or one stage",
            field="options.zero",
        )
    # The head's copy of a tied matrix is the same parameter: its gradient counts once.
    norm_params = [p for p in params if p is not (head_copy(model) if tied else None)]
    log.info("rank %d: starting at step %d (resumed from %s)", rank, step, resumed)
    data, val = _datasets(job, cfg)
    meter = StepMeter(job, plan, autocast, device)
    link = Link(topo, slot, groups.tp)
    saver = None
    if cfg.checkpoint_dir:
        saver = ckpt.AsyncSaver(cfg.checkpoint_dir, rank, ckpt_group, generation=cfg.generation)
    return RankState(
        job=job, plan=plan, topo=topo, cfg=cfg, rank=rank, device=device, slot=slot, rep=rep,
        groups=groups, model=model, autocast=autocast, scaler=scaler, opt=opt, params=params,
        norm_params=norm_params, decayed=decayed, tied=tied, mesh=mesh, gather=gather,
        layout=layout, saver=saver, data=data, val=val,
        offset=sum(r.samples for r in plan.stages[slot.stage].replicas[: slot.replica]),
        link=link, meter=meter,
        logs_samples=bool(cfg.sample_log_path and slot.stage == 0 and slot.tp_rank == 0),
        step=step, consumed=consumed, resumed=resumed,
    )  # fmt: skip


def _build_model(job, plan, slot, rep, groups, param_dtype, autocast, device, cfg):
    """This rank's layers with the execution options applied (recompute, SDPA kernel,
    sequence parallelism), on TF32 tensor cores where fp32 is asked on CUDA."""
    if use_tf32(device, param_dtype, autocast):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model = _build_layers(job, plan, slot, rep.tp, groups.tp, param_dtype, device, cfg)
    apply_execution(model, cfg.options.recompute, sdpa(cfg.options))
    if cfg.options.sequence_parallel:
        for chunk in chunks_of(model):
            enable_sequence_parallel(chunk, groups.tp)
    return model


def _optimizer_and_resume(cfg, rank, topo, slot, groups, model, device, layout, group, scaler):
    """(optimizer, FSDP mesh or None, FSDP gather or None, (step, consumed, resumed from)).
    FSDP loads the checkpoint before sharding the model; the other modes load it into the
    built optimizer."""
    if cfg.options.zero in FSDP_ZERO:
        from ..parallel import (
            fsdp,  # torch.distributed.fsdp: imported only by the ranks that use it
        )

        mesh, opt, resume = _shard_with_fsdp(
            cfg, rank, topo, slot, model, device, layout, group, scaler
        )
        return opt, mesh, fsdp.full, resume
    params = list(model.parameters())
    if cfg.options.zero == "zero1" and groups.dp:
        opt = ShardedAdamW(
            params,
            topo,
            slot,
            groups,
            cfg.lr_schedule.lr(0),
            cfg.optim.betas,
            cfg.optim.eps,
            0.0,  # decoupled weight decay is applied by apply_update, per group
            fused=_optimizer_impl(cfg, device) == "torch-fused",
        )
    else:
        opt = _optimizer(params, cfg, device)
    return opt, None, None, _resume(cfg, rank, model, opt, layout, group, scaler, device)


def _loop(s: RankState, metrics) -> TrainResult:
    """Step until ``cfg.steps``: per step one optimizer step, then the evaluation, the
    metrics line and the checkpoint that fall on it. ``metrics``: the open JSON-lines file,
    or None on every rank but the metrics rank."""
    cfg = s.cfg
    losses: dict[int, float] = {}
    while s.step < cfg.steps:
        probe = _start_memory_probe(s)
        t0 = time.perf_counter()
        m = _step(s)
        losses[s.step] = m.loss
        dt = time.perf_counter() - t0
        eval_loss = None
        if s.val is not None and (s.step % cfg.eval_every == 0 or s.step == cfg.steps):
            eval_loss = _evaluate(s.model, s.link, s.val, s.offset, s.rep, s.slot, s.topo, s.job,
                                  cfg, s.autocast, s.device, s.params)  # fmt: skip
        if probe is not None:
            _finish_memory_probe(s, *probe)
        if metrics is not None:
            line = s.meter.line(s.step, m.loss, m.norm, m.lr, dt, s.consumed, eval_loss)
            metrics.write(json.dumps(line) + "\n")
            metrics.flush()
        if s.saver and (
            s.step == cfg.steps or (cfg.checkpoint_every and s.step % cfg.checkpoint_every == 0)
        ):
            _checkpoint(s)
    if s.saver:  # wait for the last save; the ranks agree on how it went before they report
        savefaults.settle(s.saver, cfg.on_save_error, s.device, s.rank)
    log.info("rank %d: trained to step %d", s.rank, s.step)
    dist.barrier()
    return TrainResult(losses, s.step, s.resumed)


def _step(s: RankState) -> StepMetrics:
    """One optimizer step over this replica's share of global batch ``s.step + 1``: the
    microbatches through the pipeline, gradient sync, clipping, the update (skipped on an
    fp16 overflow); then ``s.step`` and ``s.consumed`` advance."""
    cfg, job, slot = s.cfg, s.job, s.slot
    batch = _microbatches(s.data, s.consumed + s.offset, s.rep, slot.stage, s.topo.num_stages,
                          s.device, job.sequence_length)  # fmt: skip
    loss_sum = run_iteration(
        s.model, s.link, batch, job.global_batch_size, cfg.schedule, s.autocast, s.scaler.scale
    )
    share = _synced_norm_share(s)
    # One world all-reduce and one host readback per step give the norm and the loss.
    norm_sq, loss = world_sums([share, loss_sum if s.is_loss_rank else None], s.device)
    lr = cfg.lr_schedule.lr(s.step)
    norm, loss = norm_sq**0.5 / s.scaler.scale, loss / s.scaler.scale
    if s.scaler.update(norm):
        coef = clip_coefficient(norm, cfg.optim.clip_norm) / s.scaler.scale
        apply_update(s.opt, s.params, lr, coef, s.decayed, cfg.optim.weight_decay)
    else:  # fp16 overflow: skip this update, retry with a smaller scale
        s.opt.zero_grad()
    if s.logs_samples:
        ids = s.data.sample_ids(s.consumed + s.offset, s.rep.samples)
        _log_samples(cfg.sample_log_path, cfg.store_prefix, s.step + 1, slot.replica, ids)
    s.step, s.consumed = s.step + 1, s.consumed + job.global_batch_size
    return StepMetrics(loss, norm, lr)


def _synced_norm_share(s: RankState):
    """Sum the TP ranks' partial gradients of replicated parameters (q/k norms; norms and
    row-parallel biases under sequence parallelism), once per step; reduce the gradients over
    the stage's replicas (and the tied copies over the stages); this rank's share of the
    squared global gradient norm. The TP sum comes first: a data-parallel group mixes replicas
    of different TP degree, which must each contribute a replicated gradient whole."""
    sync_partial_grads(s.model, s.groups.tp)
    if s.mesh is not None:  # FSDP reduce-scattered every microbatch's gradients already
        return _fsdp_norm_share(s.params, s.slot, s.mesh)
    reduce_data_parallel(s.params, s.topo, s.slot, s.groups)
    if s.tied:
        sync_tied_gradients(s.model, s.slot, s.groups)
    return local_norm_sq(s.norm_params, s.slot)


def _start_memory_probe(s: RankState):
    """(persistent bytes, entered ``StepPeak``) at the step ``memory_probe_step`` counts to
    (from the start of this run, resumed or not); None at every other step. The probe spans
    the step and its evaluation."""
    cfg = s.cfg
    if cfg.metrics_path is None or s.step + 1 - (s.resumed or 0) != cfg.memory_probe_step:
        return None
    before = persistent_bytes(s.params, _opt_state(s.opt))
    return before, StepPeak(s.device).__enter__()


def _finish_memory_probe(s: RankState, before: dict[str, int], probe: StepPeak) -> None:
    probe.__exit__(None, None, None)
    _write_memory(s.cfg.metrics_path, s.rank, before, probe.peak_bytes)


def _checkpoint(s: RankState) -> None:
    """Save step ``s.step``; the ranks agree first that the last save worked (or stop, or
    save no more: ``settle`` then drops the saver)."""
    s.saver = savefaults.settle(s.saver, s.cfg.on_save_error, s.device, s.rank)
    if s.saver:
        _save(
            s.saver, s.model, s.opt, s.layout, s.slot, s.rank, s.job, s.plan, s.cfg, s.step,
            s.consumed, s.scaler, s.device, gather=s.gather,
        )  # fmt: skip


def _build_layers(job, plan, slot, tp, tp_group, dtype, device, cfg):
    """This rank's layers: its stage's range, or under interleaved 1F1B its v chunks
    (``schedule.chunk_layers``) in a ``ChunkedStage``. Each chunk is built as a stage of its
    own layer ids, so initial weights are the plan-independent ones either way."""
    v = cfg.options.virtual_stages
    if v == 1:
        stage = plan.stages[slot.stage]
        ranges = [(stage.first_layer, stage.last_layer)]
    else:
        bounds = [(s.first_layer, s.last_layer) for s in plan.stages]
        ranges = chunk_layers(bounds, job.model.head_layer_id, v)[slot.stage]
    chunks = [
        build_stage(job.model, first, last, slot.tp_rank, tp, tp_group, dtype, device, cfg.seed)
        for first, last in ranges
    ]
    return chunks[0] if v == 1 else ChunkedStage(chunks)


def _datasets(job: Job, cfg: TrainConfig):
    """(training samples, validation samples or None): the prepared token shards of
    ``data_dir``, or the generated byte corpus (no validation split)."""
    if cfg.data_dir is None:
        return TextDataset(job.sequence_length, cfg.seed), None
    from ...data import DataError
    from ...data.shards import TokenShards

    try:
        train = TokenShards(cfg.data_dir, "train", job.sequence_length, cfg.seed)
        val = TokenShards(cfg.data_dir, "val", job.sequence_length, cfg.seed, verify=True)
    except DataError as exc:
        raise EngineError(str(exc).split(": ", 1)[-1], field="data_dir") from None
    if train.vocab_size > job.model.vocab_size:
        raise EngineError(
            f"the tokenizer of {cfg.data_dir} has {train.vocab_size} tokens but model "
            f"{job.model.name} only {job.model.vocab_size}; use a model with a vocabulary at "
            "least as large, or prepare the data with a smaller --vocab-size",
            field="data_dir",
        )
    return train, (val if cfg.eval_every else None)


def _evaluate(model, link, val, offset, rep, slot, topo, job, cfg, autocast, device, params):
    """Mean loss over the first ``eval_batches`` global batches of the validation split (in
    the split's own order, the same samples every time), each replica its share as in
    training. It runs the training iteration (forward and backward through the same pipeline
    and schedule) and throws the gradients away: one code path, at three times the cost of a
    forward, paid every ``eval_every`` steps only."""
    total = 0.0
    for b in range(cfg.eval_batches):
        first = b * job.global_batch_size + offset
        batch = _microbatches(val, first, rep, slot.stage, topo.num_stages, device,
                              job.sequence_length)  # fmt: skip
        loss_sum = run_iteration(
            model, link, batch, job.global_batch_size, cfg.schedule, autocast, 1.0
        )
        is_loss_rank = slot.stage == topo.num_stages - 1 and slot.tp_rank == 0
        (loss,) = world_sums([loss_sum if is_loss_rank else None], device)
        total += loss
    for p in params:
        if p.grad is not None:
            p.grad.zero_()
    return total / cfg.eval_batches


def _log_samples(path: str, run: str, step: int, replica: int, ids: list[int]) -> None:
    """One line per (step, replica), appended in one write (O_APPEND keeps lines whole);
    ``run`` is the store prefix, one per generation, so a reader can tell which generation's
    lines stand for a step that was trained again after a failure."""
    line = {"run": run, "step": step, "replica": replica, "ids": ids}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _fsdp_norm_share(params, slot, mesh):
    from ..parallel.fsdp import local_norm_sq as fsdp_share

    return fsdp_share(params, slot, mesh)


def _shard_with_fsdp(cfg, rank, topo, slot, model, device, layout, ckpt_group, scaler):
    """Resume the unsharded stage (the checkpoint holds TP shards), shard it with FSDP2 and
    give the optimizer the loaded states cut to the DP shards; (mesh, optimizer, resume)."""
    from ..parallel import fsdp

    loaded = _StateHolder(fused=_optimizer_impl(cfg, device) == "torch-fused")
    resume = _resume(cfg, rank, model, loaded, layout, ckpt_group, scaler, device)
    names = {p: n for n, p in model.named_parameters()}
    mesh = fsdp.build_mesh(topo, cfg.options.zero, slot.stage, device)
    fsdp.apply_fsdp(model, mesh, cfg.options.zero)
    opt = _optimizer(list(model.parameters()), cfg, device)
    opt.state.update(fsdp.shard_states(loaded.state, names, model))
    return mesh, opt, resume


class _StateHolder:
    """Where a checkpoint's AdamW states land before FSDP shards them (``ckpt.load_into``
    fills ``state``, keyed by the unsharded parameters; ``defaults`` tells it whether the
    step counters belong on the parameters' device, as torch's fused AdamW keeps them)."""

    def __init__(self, fused: bool) -> None:
        self.state: dict = {}
        self.defaults: dict = {"fused": fused}


def _optimizer_impl(cfg: TrainConfig, device: torch.device) -> str:
    if cfg.optimizer_impl == "auto":
        return adamw_implementation(device.type)
    return cfg.optimizer_impl


def _optimizer(params: list, cfg: TrainConfig, device: torch.device):
    return make_optimizer(params, cfg.optim, cfg.lr_schedule.lr(0), _optimizer_impl(cfg, device))


def _opt_state(opt) -> dict:
    if isinstance(opt, ShardedAdamW):
        return {**opt.state, **{id(u): u.state for u in opt.owned()}}
    return opt.state


def _write_memory(metrics_path: str, rank: int, before: dict[str, int], transient: int) -> None:
    """Tensor bytes of one rank at the probed step: the persistent terms at its start and the
    peak of what the step allocated on top."""
    out = dict(before, transient_peak=transient, peak=sum(before.values()) + transient)
    Path(f"{metrics_path}.rank{rank}.memory.json").write_text(json.dumps(out))


def _resume(cfg: TrainConfig, rank: int, model, opt, layout, group, scaler: LossScaler, device):
    """Load the latest valid checkpoint into this rank's stage; (step, consumed, from)."""
    if not cfg.checkpoint_dir:
        return 0, 0, None
    if rank == 0:
        Path(cfg.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        ckpt.remove_partial(cfg.checkpoint_dir)
    dist.barrier()
    found = ckpt.latest(cfg.checkpoint_dir)
    if found is None:
        return 0, 0, None
    path, manifest = found
    if manifest["model"] != model.spec.name:
        raise EngineError(
            f"checkpoint {path} is of model {manifest['model']}, not "
            f"{model.spec.name}; use another checkpoint directory",
            field="checkpoint_dir",
        )
    log.info("rank %d: resuming from %s, trained with: %s", rank, path, trained_with(manifest))
    ckpt.load_into(path, model, opt, layout, group)
    trainer = ckpt.restore_rng(path, device)
    scaler.load(trainer.get("loss_scale"))
    return manifest["step"], manifest["consumed_samples"], manifest["step"]


def _microbatches(data, first_sample, rep, stage, num_stages, device, seq) -> Microbatches:
    inputs = labels = None
    if stage == 0 or stage == num_stages - 1:
        x, y = data.batch(first_sample, rep.samples)
        inputs = list(x.to(device).split(rep.microbatch_size)) if stage == 0 else None
        labels = list(y.to(device).split(rep.microbatch_size)) if stage == num_stages - 1 else None
    return Microbatches(rep.microbatch_size, rep.num_microbatches, seq, inputs, labels)


def _save(saver, model, opt, layout, slot, rank, job, plan, cfg, step, consumed, scaler, device,
          gather=None):  # fmt: skip
    """Collective over the world: every rank joins DCP's save; replica 0 of each stage brings
    its layers (each TP rank its own shards), the other replicas nothing. ``gather``: FSDP's
    all-gather of a DP-sharded tensor (collective: every replica runs it, replica 0 keeps it)."""
    # ZeRO-1: the owners of the state shards send them to every member first (collective).
    state = opt.gather_state() if isinstance(opt, ShardedAdamW) else opt.state
    if gather is not None:  # every replica joins the all-gathers, replica 0 keeps them
        shard = ckpt.state_dict(model, state, layout, gather, keep=slot.replica == 0)
    else:
        shard = ckpt.state_dict(model, state, layout) if slot.replica == 0 else {}
    manifest = trainer = None
    if rank == 0:
        manifest = {
            "format": ckpt.FORMAT,
            "step": step,
            "consumed_samples": consumed,
            "model": job.model.name,
            "job": job.to_dict(),
            "plan": plan.to_dict(),
            "seed": cfg.seed,
            "lr_schedule": cfg.lr_schedule.to_dict(),
            "schedule": cfg.schedule,
            "layer_ids": list(range(job.model.num_layer_ids)),
            "precision": cfg.precision,
            "options": cfg.options.to_dict(),
        }
        trainer = dict(ckpt.rng_state(device), loss_scale=scaler.state())
    saver.save(step, shard, manifest, trainer)
