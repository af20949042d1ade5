"""The single-process baseline the engine must equal: the whole model on one device, the whole
global batch at once, ``torch.nn.utils.clip_grad_norm_``, ``torch.optim.AdamW`` and the same LR
schedule, data order and initial weights. Written independently of the engine's pipeline
and data-parallel code on purpose; its settings are read from the config an engine run of the
same names would get (``reference_config``), so the two cannot be given different ones.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from sailor_profiler import apply_execution, build_stage
from sailor_sim import Job, Plan, Replica, Stage

from .config import EngineError, TrainConfig
from .options import sdpa
from .parallel.optim import decay_group
from .rank.data import TextDataset
from .rank.train import precision

ONE_PROCESS = {
    "zero": "none",
    "sequence_parallel": False,
    "virtual_stages": 1,
    "expert_parallel": 1,
    "context_parallel": 1,
}
"""The options that only lay the model out over ranks, as one process runs them: the
reference holds every parameter and the whole batch, so they change nothing it computes."""


def reference_config(job: Job, **settings) -> TrainConfig:
    """The config a reference run of ``job`` reads its settings from: ``settings`` as
    ``TrainConfig.for_job`` takes them (``steps``, ``seed``, ``lr``, ``optim``, ``precision``,
    ``options``, ``dtype``, ...: the names an engine run is given), on a plan of the whole
    model in one replica, with the layout options at their one-process values
    (``ONE_PROCESS``); only the settings are read."""
    job = replace(job, options=replace(job.options, **ONE_PROCESS))
    if "options" in settings:
        settings["options"] = replace(settings["options"], **ONE_PROCESS)
    replica = Replica("CPU", "local", 1, job.global_batch_size, 1)
    whole = Stage(0, job.model.head_layer_id, (replica,))
    return TrainConfig.for_job(job, Plan((whole,)), **settings)


def reference_run(job: Job, device: str | torch.device = "cpu", **settings):
    """Train ``job`` in this process under ``settings`` (``reference_config``: the same
    names, defaults and checks an engine run's config has); returns (losses per step, model).
    Precision as the engine maps it (``rank.train.precision``; bf16 only: no loss scaling
    here); recomputation and flash attention from the options, as in
    ``sailor_profiler.zoo.apply_execution``."""
    cfg = reference_config(job, **settings)
    dtype, autocast = precision(job, cfg)
    if autocast == torch.float16:
        raise EngineError(
            "the reference run has no loss scaling: use fp32 or bf16", field="precision"
        )
    lr, optim, steps, seed = cfg.lr_schedule, cfg.optim, cfg.steps, cfg.seed
    torch.manual_seed(seed)
    model = build_stage(
        job.model, 0, job.model.head_layer_id, dtype=dtype, device=device, seed=seed
    )
    apply_execution(model, cfg.options.recompute, sdpa(cfg.options))
    params = list(model.parameters())
    named = list(model.named_parameters())
    groups = [  # torch's own per-group weight decay, written apart from the engine's way
        {"params": [p for n, p in named if decay_group(n) not in optim.no_decay]},
        {"params": [p for n, p in named if decay_group(n) in optim.no_decay], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=lr.lr(0),
        betas=optim.betas,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        foreach=False,
    )
    data = TextDataset(job.sequence_length, seed)
    losses = []
    for step in range(steps):
        x, y = data.batch(step * job.global_batch_size, job.global_batch_size)
        with torch.autocast(
            torch.device(device).type,
            dtype=autocast or torch.bfloat16,
            enabled=autocast is not None,
        ):
            loss = model(x.to(device), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, optim.clip_norm, foreach=False)
        for group in opt.param_groups:
            group["lr"] = lr.lr(step)
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(float(loss.detach()))
    return losses, model
