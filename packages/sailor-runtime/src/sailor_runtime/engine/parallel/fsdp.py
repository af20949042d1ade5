"""ZeRO-2, ZeRO-3 and hybrid shard through FSDP2 (``torch.distributed.fsdp.fully_shard``).

Where it applies (``options.unsupported_reason`` refuses the rest): one pipeline stage (the
simulator refuses sharded parameters with PP > 1, as DeepSpeed and FSDP do), every replica of
the same TP degree and the same microbatch count (FSDP all-gathers and reduce-scatters once per
microbatch, so every member of a shard group must run as many forwards and backwards).
Replicas may still differ in microbatch size: the loss of a microbatch is weighted by its
samples (``pipeline``), and the gradients are *summed* (divide factor 1), not averaged.

Ranks are numbered replica-major then TP rank (``topology``), so with one stage the world is a
``(dp, tp)`` device mesh in rank order; FSDP shards over its ``dp`` dimension (each TP rank
with the members holding the same TP shard). Hybrid shard (FSDP HYBRID_SHARD) splits ``dp``
into ``(replicate, shard)``: ZeRO-3 inside groups of ``shard`` consecutive replicas (the
simulator's ``shard_group``: the replicas that fit one node), replicated across them.

- ``zero3`` / ``hybrid``: ``reshard_after_forward=True``: parameters are gathered per layer
  for forward and again for backward, then freed.
- ``zero2``: ``reshard_after_forward=False``: parameters gathered in forward stay until the
  backward (ZeRO-2-like: gradients and AdamW states sharded; parameters sharded only between
  steps).

Every layer (embedding, block, head) is one FSDP unit, the stage the root. After
``fully_shard`` the parameters are DTensors sharded on dim 0 over the DP mesh; their TP split
(``tp_split``) is re-attached so checkpoints and the norm still know it. AdamW updates the
local shards (elementwise: the same numbers as without sharding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from sailor_profiler import get_split, grad_norm_sq, set_split

from ..options import hybrid_shard_size
from .topology import Slot, Topology


@dataclass(frozen=True)
class ShardLayout:
    """The DP mesh of one stage: ``replicate`` x ``shard`` replicas (replicate 1 = ZeRO-3)."""

    replicate: int
    shard: int
    tp: int

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.replicate, self.shard, self.tp)


def shard_layout(topo: Topology, zero: str) -> ShardLayout:
    """The mesh shape of a one-stage plan (checked by ``options.unsupported_reason``)."""
    dp, tp = topo.num_replicas, topo.tp(0, 0)
    shard = hybrid_shard_size(topo.plan) if zero == "hybrid" else dp
    return ShardLayout(dp // shard, shard, tp)


def build_mesh(layout: ShardLayout, device: torch.device) -> DeviceMesh:
    """The world as a ``(replicate, shard, tp)`` mesh (collective: every rank calls it)."""
    return init_device_mesh(device.type, layout.dims, mesh_dim_names=("replicate", "shard", "tp"))


def apply_fsdp(stage_module: torch.nn.Module, mesh: DeviceMesh, zero: str) -> torch.nn.Module:
    """Shard ``stage_module`` in place (each layer one FSDP unit, the stage the root)."""
    dp_mesh = mesh["replicate", "shard"] if mesh["replicate"].size() > 1 else mesh["shard"]
    splits = {name: get_split(p) for name, p in stage_module.named_parameters()}
    reshard = zero != "zero2"
    for layer in stage_module.layers.values():
        fully_shard(layer, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(stage_module, mesh=dp_mesh, reshard_after_forward=reshard)
    for module in stage_module.modules():
        if isinstance(module, FSDPModule):
            # The loss is weighted by samples already: the DP reduction is a sum. Plain SUM
            # collectives (gloo has no PREMUL_SUM; NCCL runs the same path).
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    for name, p in stage_module.named_parameters():
        set_split(p, splits[name])
    return stage_module


def is_replicate_leader(mesh: DeviceMesh) -> bool:
    """Whether this rank is in the first replicate group (hybrid: the others hold copies)."""
    return mesh["replicate"].get_local_rank() == 0


def local_norm_sq(params: list, slot: Slot, mesh: DeviceMesh) -> torch.Tensor | None:
    """This rank's share of the squared global gradient norm: the local DP shard of every
    gradient (disjoint across the shard group), TP-replicated tensors from TP rank 0 only,
    and under hybrid shard only the first replicate group (the others hold the same shards)."""
    if not is_replicate_leader(mesh):
        return None
    mine = [
        _local(p.grad)
        for p in params
        if p.grad is not None and (get_split(p) is not None or slot.tp_rank == 0)
    ]
    if not mine:
        return None
    return grad_norm_sq(mine)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """This rank's TP shard of a DP-sharded tensor, gathered (collective over the DP mesh)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


@torch.no_grad()
def shard_states(plain_state: dict, names: dict, stage_module: torch.nn.Module) -> dict:
    """AdamW states loaded for the unsharded parameters (``names``: plain parameter -> name),
    cut to the sharded parameters' DP shards (no communication: every rank holds them whole)."""
    by_name = dict(stage_module.named_parameters())
    out = {}
    for plain, st in plain_state.items():
        p = by_name[names[plain]]
        out[p] = {
            "step": st["step"],
            **{
                k: distribute_tensor(v, p.device_mesh, p.placements, src_data_rank=None)
                for k, v in st.items()
                if k != "step"
            },
        }
    return out
