"""The update: data-parallel gradient reduction across heterogeneous replicas, clipping by the
true global norm, the learning-rate schedule and AdamW.

Data parallelism with different TP degrees (see ``topology``): in DP group f each member packs,
into one contiguous buffer, fine piece f of every sharded gradient (a chunk along the split
dimension of its local shard, copied because it may be strided) followed by every replicated
gradient, all-reduces the buffer (SUM: the loss is already weighted by samples, so the sum is
the global-batch gradient) and unpacks it. A low-TP rank takes part in several groups; each
returns the same replicated sums, taken from the first.

AdamW and the update around it (``apply_update``: clip, decay, step) live in
``sailor_profiler.zoo.optim`` so the profiler times the same step.

Global norm: after the reduction every replica holds the same gradients, so only replica 0
contributes, each sharded element once (by its owner) and each replicated tensor once (by TP
rank 0); one all-reduce over the world adds the stage sums up (in float64).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from sailor_profiler import TIED_HEAD_NAME, AdamW, get_split, grad_norm_sq, grad_or_zero

from ..config import OPTIMIZER_IMPLS, LRSchedule, OptimConfig  # noqa: F401 - torch-free home
from .topology import Groups, Slot, Topology

EMBEDDING_LAYER = "layers.0."
"""Parameter-name prefix of layer id 0, the embedding (``sailor_profiler.zoo``)."""


def decay_group(name: str) -> str:
    """The weight-decay group of a zoo parameter: ``norm`` (any norm's weight and bias, also
    BLOOM's after the embedding and the per-head q/k norms), ``embedding`` (layer id 0's word
    and position tables), ``bias`` or ``matrix`` (everything else, always decayed)."""
    if ".norm" in f".{name}":
        return "norm"
    if name.startswith(EMBEDDING_LAYER):
        return "embedding"
    if name.endswith("bias"):
        return "bias"
    return "matrix"


def decayed_params(model, no_decay: tuple[str, ...]) -> list[torch.Tensor]:
    """The parameters weight decay applies to: all but those of the ``no_decay`` groups. A
    tied head's own copy (on a stage without the embedding) is in the embedding's group, so
    both copies take the same update."""
    spec = model.spec
    tied = f"layers.{spec.head_layer_id}.{TIED_HEAD_NAME}" if spec.tie_word_embeddings else None
    return [
        p
        for name, p in model.named_parameters()
        if ("embedding" if name == tied else decay_group(name)) not in no_decay
    ]


def make_optimizer(params, cfg: OptimConfig, lr: float, impl: str = "sailor"):
    """AdamW. ``sailor``: ours (``zoo.optim.AdamW``, per parameter, bit-identical to
    ``torch.optim.AdamW(foreach=False)``; no torch.optim import, which costs seconds of rank
    start-up on a small CPU). ``torch-fused``: ``torch.optim.AdamW(fused=True)``, one fused
    kernel over all parameters (CUDA; torch >= 2.4 also has it on CPU, which is how the tests
    cover this path). ``auto`` is resolved by the caller (``train``: fused on CUDA)."""
    if impl == "torch-fused":
        import torch.optim

        return torch.optim.AdamW(
            params, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=0.0, fused=True
        )
    if impl != "sailor":
        raise ValueError(f"unknown optimizer implementation {impl!r}; use {OPTIMIZER_IMPLS}")
    # weight_decay 0: ``apply_update`` applies the decoupled decay itself, per group.
    return AdamW(params, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=0.0)


def _fine_view(p: torch.Tensor, piece_index: int, pieces: int) -> torch.Tensor:
    dim = get_split(p)[0]
    return grad_or_zero(p).chunk(pieces, dim)[piece_index]


def reduce_data_parallel(params: list, topo: Topology, slot: Slot, groups: Groups) -> None:
    """Sum gradients across the replicas of this rank's stage (see module docstring)."""
    if not groups.dp:
        return
    sharded = [p for p in params if get_split(p) is not None]
    replicated = [p for p in params if get_split(p) is None]
    mine = topo.fine_pieces(slot)
    # Pack the replicated gradients once: the first group's write-back must not leak into the
    # buffers of this rank's later groups.
    reps = [grad_or_zero(p) for p in replicated]
    rep_flat = torch.cat([g.reshape(-1) for g in reps]) if reps else None
    for idx, f in enumerate(mine):
        views = [_fine_view(p, idx, len(mine)) for p in sharded]
        parts = [v.reshape(-1) for v in views] + ([rep_flat] if rep_flat is not None else [])
        buf = torch.cat(parts)
        dist.all_reduce(buf, group=groups.dp[f])
        offset = 0
        for v in views:
            v.copy_(buf[offset : offset + v.numel()].view_as(v))
            offset += v.numel()
        if idx == 0:
            for g in reps:
                g.copy_(buf[offset : offset + g.numel()].view_as(g))
                offset += g.numel()


def local_norm_sq(params: list, slot: Slot) -> torch.Tensor | None:
    """This rank's share of the squared global gradient norm (see module docstring), a float64
    scalar on the parameters' device (no host synchronisation), or None for no share."""
    if slot.replica != 0:
        return None
    mine = [grad_or_zero(p) for p in params if get_split(p) is not None or slot.tp_rank == 0]
    if not mine:
        return None
    return grad_norm_sq(mine)


def clip_coefficient(norm: float, max_norm: float) -> float:
    """As ``torch.nn.utils.clip_grad_norm_``: scale by max_norm / (norm + 1e-6) when < 1."""
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (norm + 1e-6))


def world_sums(values: list[torch.Tensor | None], device) -> list[float]:
    """All-reduce a few scalars (None = 0) over the whole world in float64, one collective;
    the step's only host synchronisation is reading the sums back."""
    zero = torch.zeros((), dtype=torch.float64, device=device)
    t = torch.stack(
        [zero if v is None else v.detach().to(device, torch.float64).reshape(()) for v in values]
    )
    dist.all_reduce(t)
    return t.tolist()


class LossScaler:
    """Dynamic loss scaling for fp16 (Micikevicius et al. 2018, Sec. 3.2; the constants of
    ``torch.amp.GradScaler``): the loss is multiplied by ``scale`` before backward; a step whose
    global gradient norm is not finite is skipped and the scale halved; after
    ``growth_interval`` good steps in a row it doubles. Disabled: scale 1, nothing skipped. All
    ranks see the same all-reduced norm, so they take the same decisions."""

    def __init__(
        self, enabled: bool, init_scale: float = 2.0**16, growth_interval: int = 2000
    ) -> None:
        self.enabled, self.scale, self.good = enabled, init_scale if enabled else 1.0, 0
        self.growth_interval = growth_interval

    def update(self, norm: float) -> bool:
        """Whether this step's update may be applied (and adjust the scale)."""
        if not self.enabled:
            return True
        if not math.isfinite(norm):
            self.scale, self.good = self.scale / 2, 0
            return False
        self.good += 1
        if self.good >= self.growth_interval:
            self.scale, self.good = self.scale * 2, 0
        return True

    def state(self) -> dict:
        return {"enabled": self.enabled, "scale": self.scale, "good": self.good}

    def load(self, state: dict | None) -> None:
        if state and self.enabled and state.get("enabled"):
            self.scale, self.good = state["scale"], state["good"]
