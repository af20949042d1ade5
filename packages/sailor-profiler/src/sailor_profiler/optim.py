"""The optimizer step of one layer, timed as the runtime runs it.

fp32: the optimizer updates the parameters in place. bf16 / fp16: mixed precision as in
Megatron-LM (Micikevicius et al., "Mixed Precision Training", ICLR 2018, Sec. 3.1): fp32 master
weights; a step casts the 16-bit gradients up, updates the masters, and copies them back down.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

OPTIMIZERS = ("adam", "adamw", "sgd")


def _make(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}; use one of {OPTIMIZERS}")


def optimizer_step_fn(layer: nn.Module, optimizer: str) -> Callable[[], None]:
    """A closure doing one optimizer step on ``layer``'s parameters (their grads must exist)."""
    params = [p for p in layer.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if all(p.dtype == torch.float32 for p in params):
        opt = _make(optimizer, params)
        return opt.step
    masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = _make(optimizer, masters)

    @torch.no_grad()
    def step() -> None:
        for master, p in zip(masters, params, strict=True):
            master.grad = p.grad.float()
        opt.step()
        for master, p in zip(masters, params, strict=True):
            p.copy_(master)

    return step
