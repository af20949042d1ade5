"""The single-process baseline the engine must equal: the whole model on one device, the whole
global batch at once, ``torch.nn.utils.clip_grad_norm_``, ``torch.optim.AdamW`` and the same LR
schedule, data order and initial weights. Written independently of the engine's pipeline
and data-parallel code on purpose.
"""

from __future__ import annotations

import torch

from sailor_profiler import apply_execution, build_stage
from sailor_sim import Job

from .parallel.optim import LRSchedule, OptimConfig, decay_group
from .rank.data import TextDataset


def reference_run(
    job: Job,
    steps: int,
    seed: int = 0,
    lr: LRSchedule | None = None,
    optim: OptimConfig | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    autocast: torch.dtype | None = None,
    recompute: str = "none",
    flash_attention: bool = True,
):
    """Train ``steps`` steps in this process; returns (losses per step, model). ``autocast``:
    mixed precision (bf16 only: no loss scaling here), fp32 parameters; ``recompute`` and
    ``flash_attention`` as in ``sailor_profiler.zoo.apply_execution``."""
    lr, optim = lr or LRSchedule(), optim or OptimConfig()
    torch.manual_seed(seed)
    model = build_stage(
        job.model, 0, job.model.head_layer_id, dtype=dtype, device=device, seed=seed
    )
    apply_execution(model, recompute, flash_attention)
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
