"""The optimizer step of one layer, timed as the runtime runs it.

'adam' / 'adamw': the engine's step after global-norm clipping, with the engine's own functions
(``zoo.optim.grad_norm_sq`` and ``apply_update``): this layer's share of the squared gradient
norm (one multi-tensor float64 norm, one host read), the clip (gradients scaled in place; timed
always, clipping is active early in training), the decoupled weight decay, the AdamW step and
zeroing the gradients. The AdamW is the one the engine runs on this device
(``zoo.optim.adamw_implementation``): torch's fused kernel on CUDA, ours (as
``torch.optim.AdamW(foreach=False)``) elsewhere. Timing our per-parameter AdamW on an H200 when the
engine ran the fused kernel put 65 ms of 258 into an OPT-350M prediction whose measured step was 195
ms (2026-11-26). 'sgd': ``torch.optim.SGD`` with momentum.

fp32 parameters: the optimizer updates them in place (bf16/fp16 training keeps fp32 parameters
under autocast, as the engine does). 16-bit parameters: mixed precision as in Megatron-LM
(Micikevicius et al., "Mixed Precision Training", ICLR 2018, Sec. 3.1): fp32 master weights; a
step casts the 16-bit gradients up, updates the masters, and copies them back down.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sailor_sim import OPTIMIZERS

from ..zoo.optim import AdamW, adamw_implementation, apply_update, grad_norm_sq

__all__ = ["optimizer_step_fn"]
_CLIP_COEF = 0.5
"""Any factor < 1: the engine scales every gradient when the global norm exceeds clip_norm."""


def _make(name: str, params: list[torch.Tensor], impl: str) -> Callable[[], None]:
    if name in ("adam", "adamw"):
        return adamw_step(params, 0.1 if name == "adamw" else 0.0, impl)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9).step
    raise ValueError(f"unknown optimizer {name!r}; use one of {OPTIMIZERS}")


def adamw_step(params: list[torch.Tensor], weight_decay: float, impl: str) -> Callable[[], None]:
    """One timed step of the engine's AdamW implementation ``impl`` ("torch-fused"/"sailor")."""
    lr, betas = 1e-4, (0.9, 0.95)
    if impl == "torch-fused":
        opt = torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=0.0, fused=True)
    else:
        opt = AdamW(params, lr=lr, betas=betas, weight_decay=0.0)

    @torch.no_grad()
    def step() -> None:
        float(grad_norm_sq([p.grad for p in params]))  # the engine reads it (all-reduced)
        apply_update(opt, params, lr, _CLIP_COEF, params, weight_decay)

    return step


def _twin(p: torch.Tensor) -> torch.Tensor:
    """A trainable copy of ``p`` with a copy of its gradient."""
    twin = p.detach().clone().requires_grad_(True)
    twin.grad = p.grad.detach().clone()
    return twin


def optimizer_step_fn(layer: nn.Module, optimizer: str, copies: int = 1) -> Callable[[], None]:
    """A closure doing one optimizer step on ``layer``'s parameters (their grads must exist)
    and on ``copies - 1`` clones of them: one step over all of them, as the engine steps a
    whole stage (one norm read, one AdamW call), so the difference between two and one copy
    is what one more layer adds to a step (``measure._time_optimizer``)."""
    params = [p for p in layer.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    params = params + [_twin(p) for _ in range(copies - 1) for p in params]
    impl = adamw_implementation(params[0].device.type)  # the engine's on this device
    if all(p.dtype == torch.float32 for p in params):
        return _make(optimizer, params, impl)
    masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    master_step = _make(optimizer, masters, impl)

    @torch.no_grad()
    def step() -> None:
        for master, p in zip(masters, params, strict=True):
            master.grad = p.grad.float()
        master_step()
        for master, p in zip(masters, params, strict=True):
            p.copy_(master)

    return step
