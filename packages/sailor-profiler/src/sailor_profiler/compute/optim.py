"""The optimizer step of one layer, timed as the runtime runs it.

'adam' / 'adamw': the runtime's engine always runs its own per-parameter AdamW
(``zoo.optim.AdamW``, as ``torch.optim.AdamW(foreach=False)``) after global-norm clipping, so the
timed step is exactly that: this layer's share of the squared gradient norm (float64, per
tensor), the clip (gradients scaled in place; timed always, clipping is active early in
training), the AdamW step and zeroing the gradients (``engine.parallel.optim.local_norm_sq`` and
``apply_update``). 'sgd': ``torch.optim.SGD`` with momentum.

fp32: the optimizer updates the parameters in place. bf16 / fp16: mixed precision as in
Megatron-LM (Micikevicius et al., "Mixed Precision Training", ICLR 2018, Sec. 3.1): fp32 master
weights; a step casts the 16-bit gradients up, updates the masters, and copies them back down.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sailor_sim import OPTIMIZERS

from ..zoo.optim import AdamW

__all__ = ["optimizer_step_fn"]
_CLIP_COEF = 0.5
"""Any factor < 1: the engine scales every gradient when the global norm exceeds clip_norm."""


def _make(name: str, params: list[torch.Tensor]) -> Callable[[], None]:
    if name in ("adam", "adamw"):
        opt = AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1 if name == "adamw" else 0)

        @torch.no_grad()
        def step() -> None:
            norm_sq = torch.zeros((), dtype=torch.float64)
            for p in params:
                norm_sq += p.grad.double().pow(2).sum().cpu()
            float(norm_sq)  # the engine reads it (all-reduced) before clipping
            for p in params:
                p.grad.mul_(_CLIP_COEF)
            opt.step()
            opt.zero_grad(set_to_none=False)

        return step
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9).step
    raise ValueError(f"unknown optimizer {name!r}; use one of {OPTIMIZERS}")


def optimizer_step_fn(layer: nn.Module, optimizer: str) -> Callable[[], None]:
    """A closure doing one optimizer step on ``layer``'s parameters (their grads must exist)."""
    params = [p for p in layer.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if all(p.dtype == torch.float32 for p in params):
        return _make(optimizer, params)
    masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    master_step = _make(optimizer, masters)

    @torch.no_grad()
    def step() -> None:
        for master, p in zip(masters, params, strict=True):
            master.grad = p.grad.float()
        master_step()
        for master, p in zip(masters, params, strict=True):
            p.copy_(master)

    return step
