"""AdamW as the runtime's engine runs it, shared so the profiler times the same step.

Owner: sailor-profiler (the runtime's ``engine.parallel.optim`` imports it; the profiler must
not depend on the runtime).
"""

from __future__ import annotations

import math

import torch


def adamw_implementation(device_type: str) -> str:
    """The AdamW the engine runs on a device of this type (``TrainConfig.optimizer_impl``
    ``auto``), declared here so the profiler times the same one: torch's fused kernel on CUDA,
    ours elsewhere (no ``torch.optim`` import at a CPU rank's start-up)."""
    return "torch-fused" if device_type == "cuda" else "sailor"


class AdamW:
    """AdamW (Loshchilov & Hutter 2019, Alg. 2), the same arithmetic in the same order as
    ``torch.optim.AdamW(foreach=False)`` (a runtime test checks they agree bit for bit), and the
    same state layout (``step``, ``exp_avg``, ``exp_avg_sq``). Elementwise, so a TP shard's
    update equals the slice of the full tensor's. Our own because constructing a ``torch.optim``
    optimizer imports TorchDynamo, which costs seconds of start-up per rank.
    """

    def __init__(
        self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01
    ) -> None:
        self.param_groups = [
            {
                "params": list(params),
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": weight_decay,
            }
        ]
        self.state: dict = {}

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, (beta1, beta2) = group["lr"], group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state.get(p)
                if not st:
                    st = self.state[p] = {
                        "step": torch.tensor(0.0, dtype=torch.float32),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
                adamw_one(p, p.grad, st, lr, beta1, beta2, group["eps"], group["weight_decay"])

    def zero_grad(self, set_to_none: bool = False) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()


def adamw_one(p, grad, st, lr, beta1, beta2, eps, weight_decay) -> None:
    st["step"] += 1
    step = float(st["step"])
    p.mul_(1 - lr * weight_decay)
    st["exp_avg"].lerp_(grad, 1 - beta1)
    st["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1**step)
    denom = (st["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    p.addcdiv_(st["exp_avg"], denom, value=-step_size)
