"""AdamW and the update around it (clip, decoupled decay) as the runtime's engine runs them,
shared so the profiler times the same step.

The per-stage operations are multi-tensor (``torch._foreach_*``, Megatron-LM's
``multi_tensor_applier`` idea): a handful of kernel launches per stage instead of a few per
parameter. Per-parameter norms, clips, decays and zeroing cost about five kernel launches for
each of OPT-350M's ~390 tensors, and those issued after the norm's host read run with the GPU
idle, so their host time is the step's. On an H200 (2026-11-27) the multi-tensor update took
OPT-350M's measured step from 151-156 to 142 ms and its profiled optimizer term from 24.5 to
9.3 ms.

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


def grad_norm_sq(grads: list[torch.Tensor]) -> torch.Tensor:
    """The sum of the squares of every element of ``grads``, a float64 scalar on their device
    (no host synchronisation): per-tensor float64 norms in one multi-tensor call, squared and
    summed. Any dtype; an inf or nan gradient gives an inf or nan sum (fp16's overflow check);
    no gradients, a CPU zero."""
    if not grads:
        return torch.zeros((), dtype=torch.float64)
    return torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float64)).pow(2).sum()


@torch.no_grad()
def apply_update(
    opt, params: list, lr: float, coef: float, decayed: list, weight_decay: float
) -> None:
    """Clip (scale the gradients by ``coef``), apply AdamW's decoupled weight decay to the
    ``decayed`` parameters, then the Adam step (the optimizer has weight decay 0) and zero the
    gradients. The decay is the first operation of torch's AdamW step too
    (``p.mul_(1 - lr * wd)``), so the result is the same as per-group weight decay inside the
    optimizer, for every implementation (ours, torch's fused kernel, ZeRO-1's sharded one)
    without a group in any of them. Parameters without a gradient get a zero one."""
    grads = [grad_or_zero(p) for p in params]
    if coef < 1.0 and grads:
        torch._foreach_mul_(grads, coef)
    if weight_decay and decayed:
        torch._foreach_mul_(decayed, 1 - lr * weight_decay)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=False)


def grad_or_zero(p: torch.Tensor) -> torch.Tensor:
    """``p.grad``, a zero one first where the parameter has none (a layer the loss did not
    reach on this rank still takes part in the all-reduce and the step)."""
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    return p.grad


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
        params = [p for p in self.param_groups[0]["params"] if p.grad is not None]
        if set_to_none:
            for p in params:
                p.grad = None
        elif params:
            torch._foreach_zero_([p.grad for p in params])


def adamw_one(p, grad, st, lr, beta1, beta2, eps, weight_decay) -> None:
    st["step"] += 1
    step = float(st["step"])
    p.mul_(1 - lr * weight_decay)
    st["exp_avg"].lerp_(grad, 1 - beta1)
    st["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1**step)
    denom = (st["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    p.addcdiv_(st["exp_avg"], denom, value=-step_size)
