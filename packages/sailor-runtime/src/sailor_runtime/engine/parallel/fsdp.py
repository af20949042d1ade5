"""ZeRO-2, ZeRO-3 and hybrid shard through FSDP2 (``torch.distributed.fsdp.fully_shard``).

Where it applies (``options.unsupported_reason`` refuses the rest): ZeRO-3 and hybrid on one
pipeline stage (parameters gathered per layer and freed again do not pipeline: the simulator
refuses sharded parameters with PP > 1, as DeepSpeed and FSDP do); ZeRO-2 on any depth, as
torchtitan runs FSDP under pipelining (parameters stay gathered from a step's first forward to
its last backward, so the 1F1B interleaving of microbatches gathers nothing again); every
replica of a stage of the same TP degree and the same microbatch count (FSDP reduce-scatters
once per microbatch, so every member of a shard group must run as many backwards). Replicas
may still differ in microbatch size: the loss of a microbatch is weighted by its samples
(``pipeline``), and the gradients are *summed* (divide factor 1), not averaged.

Ranks are numbered stage-major, then replica, then TP rank (``topology``), so each stage's
ranks form a ``(dp, tp)`` device mesh in rank order (with one stage, the world); FSDP shards a
stage over its mesh's ``dp`` dimension (each TP rank with the members holding the same TP
shard). Every rank builds every stage's mesh, in stage order (their process groups are
created collectively), and keeps its own. Hybrid shard (FSDP HYBRID_SHARD) splits ``dp`` into
``(replicate, shard)``: ZeRO-3 inside groups of ``shard`` consecutive replicas (the
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

import itertools
from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh
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


MESH_DIMS = ("replicate", "shard", "tp")
_MESHES_BUILT = itertools.count()
"""Numbers the dimension names of every mesh this process builds. torch's DTensor constructor
keeps one spec per distinct value, and meshes compare equal by rank layout and dimension names
alone: a process that trains again after destroying its process groups (``multirun``: several
runs in one process) got its parameters on an earlier run's equal mesh, whose group name now
named another group (ZeRO-2 on two stages after a one-stage run all-gathered its stage-0
shards over the whole new world: 768 rows instead of 256). Names never seen before never
compare equal. A rank that trains once is unaffected."""


def _dim(mesh: DeviceMesh, name: str) -> str:
    """The name ``mesh`` gives ``MESH_DIMS``' dimension ``name`` (numbered: ``_MESHES_BUILT``)."""
    return mesh.mesh_dim_names[MESH_DIMS.index(name)]


def shard_layout(topo: Topology, zero: str, stage: int) -> ShardLayout:
    """The mesh shape of ``stage`` (one TP degree per stage: ``options.unsupported_reason``;
    hybrid only on one-stage plans)."""
    dp, tp = topo.num_replicas, topo.tp(stage, 0)
    shard = hybrid_shard_size(topo.plan) if zero == "hybrid" else dp
    return ShardLayout(dp // shard, shard, tp)


def build_mesh(topo: Topology, zero: str, stage: int, device: torch.device) -> DeviceMesh:
    """``stage``'s ranks as a ``(replicate, shard, tp)`` mesh. Collective: every rank builds
    every stage's mesh, in stage order, and keeps its own."""
    built = next(_MESHES_BUILT)
    names = tuple(f"{dim}#{built}" for dim in MESH_DIMS)
    mine = None
    for i in range(topo.num_stages):
        layout = shard_layout(topo, zero, i)
        ranks = [topo.rank(i, j, t) for j in range(topo.num_replicas) for t in range(layout.tp)]
        mesh = DeviceMesh(
            device.type,
            torch.tensor(ranks, dtype=torch.int).view(layout.dims),
            mesh_dim_names=names,
        )
        if i == stage:
            mine = mesh
    return mine


def apply_fsdp(stage_module: torch.nn.Module, mesh: DeviceMesh, zero: str) -> torch.nn.Module:
    """Shard ``stage_module`` in place (each layer one FSDP unit, the stage the root)."""
    replicate, shard = _dim(mesh, "replicate"), _dim(mesh, "shard")
    dp_mesh = mesh[replicate, shard] if mesh[replicate].size() > 1 else mesh[shard]
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
    return mesh[_dim(mesh, "replicate")].get_local_rank() == 0


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
