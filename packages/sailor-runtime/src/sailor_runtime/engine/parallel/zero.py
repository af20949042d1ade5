"""ZeRO-1 (Rajbhandari et al. 2020, Sec. 5.1, P_os): AdamW states sharded across each
data-parallel group, on heterogeneous replicas.

After ``optim.reduce_data_parallel`` every member of DP group f holds the same summed gradient
of fine piece f of every sharded parameter (see ``topology``). Each such fine piece is a *unit*,
owned by one member of the group (greedy by size, so the members' shares are balanced); only
the owner keeps the unit's AdamW states and updates it, then every owner broadcasts its updated
units, packed into one contiguous buffer (gloo miscomputes strided views), to the group. A
rank in several groups (a replica of lower TP degree) owns units in each. Replicated parameters
(norms, row-parallel biases: a few per block) keep full states on every rank and are updated
locally, as without ZeRO.

The update of a unit is the same elementwise AdamW on the same numbers as without ZeRO, so the
weights are the same (tests compare the two runs). ``fused=True`` (CUDA ranks; chosen with the
optimizer implementation) runs torch's fused AdamW kernel over every owned unit and replicated
parameter at once instead of our per-tensor Python loop; its step counters live on the device.
Every collective here runs on the parameters' device (NCCL refuses CPU tensors).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from sailor_profiler import AdamW, adamw_one, get_split

from .topology import Groups, Slot, Topology


@dataclass
class _Unit:
    param: torch.Tensor
    piece: int
    """Index of this fine piece among the rank's pieces (``len(pieces)`` chunks of the shard)."""
    pieces: int
    owner: int
    """Global rank of the member that updates it."""
    state: dict = field(default_factory=dict)

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return t.chunk(self.pieces, get_split(self.param)[0])[self.piece]


@dataclass
class _Part:
    group: object
    members: list[int]
    units: list[_Unit]


def _assign(units: list[_Unit], members: list[int]) -> None:
    """Greedy by size (largest first, to the least loaded member); ties by rank order, so
    every member computes the same assignment."""
    load = dict.fromkeys(members, 0)
    for u in sorted(units, key=lambda u: -u.view(u.param).numel()):
        owner = min(members, key=lambda m: (load[m], m))
        u.owner = owner
        load[owner] += u.view(u.param).numel()


class ShardedAdamW(AdamW):
    """AdamW with ZeRO-1 state sharding; ``param_groups`` hold the replicated parameters."""

    def __init__(
        self,
        params,
        topo: Topology,
        slot: Slot,
        groups: Groups,
        lr: float,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        fused: bool = False,
    ) -> None:
        params = list(params)
        self.fused = fused
        sharded = [p for p in params if get_split(p) is not None]
        super().__init__([p for p in params if get_split(p) is None], lr, betas, eps, weight_decay)
        self.all_params, self.sharded = params, sharded
        self.rank = dist.get_rank()
        mine = list(topo.fine_pieces(slot))
        self.parts = []
        for idx, f in enumerate(mine):
            members = topo.dp_group_ranks(slot.stage, f)
            units = [_Unit(p, idx, len(mine), -1) for p in sharded]
            _assign(units, members)
            self.parts.append(_Part(groups.dp[f], members, units))

    def owned(self) -> list[_Unit]:
        return [u for part in self.parts for u in part.units if u.owner == self.rank]

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        if self.fused:
            self._fused_step(g)
        else:
            super().step()  # replicated parameters
            (beta1, beta2), lr = g["betas"], g["lr"]
            for u in self.owned():
                adamw_one(
                    u.view(u.param),
                    u.view(u.param.grad),
                    self._unit_state(u),
                    lr,
                    beta1,
                    beta2,
                    g["eps"],
                    g["weight_decay"],
                )
        for p in self.sharded:  # full states loaded from a checkpoint: sliced, now dropped
            self.state.pop(p, None)
        self._broadcast(lambda u: [u.view(u.param)])

    def _unit_state(self, u: _Unit) -> dict:
        if not u.state:
            u.state = self._fresh_state(u)
        return u.state

    def _fused_step(self, g: dict) -> None:
        """One ``torch.optim.adamw.adamw(fused=True)`` call over the replicated parameters and
        the owned units (a unit that is a strided view goes through a contiguous copy)."""
        from torch.optim.adamw import adamw  # imports TorchDynamo: only on this path

        targets, grads, states = [], [], []
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                targets.append(p)
                grads.append(p.grad)
                states.append(self._replicated_state(p))
        units = self.owned()
        views = [u.view(u.param.detach()) for u in units]
        for u, v in zip(units, views, strict=True):
            targets.append(v if v.is_contiguous() else v.contiguous())
            grads.append(u.view(u.param.grad).contiguous())
            states.append(self._unit_state(u))
        if not targets:
            return
        beta1, beta2 = g["betas"]
        adamw(
            targets,
            grads,
            [st["exp_avg"] for st in states],
            [st["exp_avg_sq"] for st in states],
            [],
            [st["step"] for st in states],
            fused=True,
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=g["lr"],
            weight_decay=g["weight_decay"],
            eps=g["eps"],
            maximize=False,
        )
        for v, t in zip(views, targets[len(targets) - len(views) :], strict=True):
            if t is not v:
                v.copy_(t)

    def _replicated_state(self, p: torch.Tensor) -> dict:
        st = self.state.get(p)
        if not st:
            st = self.state[p] = {
                "step": torch.tensor(0.0),
                "exp_avg": torch.zeros_like(p),
                "exp_avg_sq": torch.zeros_like(p),
            }
        st["step"] = st["step"].to(p.device)  # fused: the counter lives with the tensor
        return st

    def _fresh_state(self, u: _Unit) -> dict:
        """Zero states, or this unit's slice of a loaded checkpoint's full states."""
        full = self.state.get(u.param)
        device = u.param.device if self.fused else torch.device("cpu")
        if full is None:
            v = u.view(u.param)
            return {
                "step": torch.tensor(0.0, device=device),
                "exp_avg": torch.zeros_like(v),
                "exp_avg_sq": torch.zeros_like(v),
            }
        return {
            "step": full["step"].to(device, copy=True),
            "exp_avg": u.view(full["exp_avg"]).clone(),
            "exp_avg_sq": u.view(full["exp_avg_sq"]).clone(),
        }

    def _broadcast(self, tensors_of) -> None:
        """Every owner sends ``tensors_of(unit)`` of its units to its group, packed."""
        for part in self.parts:
            for owner in part.members:
                units = [u for u in part.units if u.owner == owner]
                views = [t for u in units for t in tensors_of(u)]
                if not views:
                    continue
                if owner == self.rank:
                    buf = torch.cat([v.reshape(-1) for v in views])
                else:
                    buf = torch.empty(
                        sum(v.numel() for v in views), dtype=views[0].dtype, device=views[0].device
                    )
                dist.broadcast(buf, owner, group=part.group)
                if owner != self.rank:
                    offset = 0
                    for v in views:
                        v.copy_(buf[offset : offset + v.numel()].view_as(v))
                        offset += v.numel()

    def zero_grad(self, set_to_none: bool = False) -> None:
        grads = [p.grad for p in self.all_params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    @torch.no_grad()
    def gather_state(self) -> dict:
        """Full (this rank's TP shard) AdamW states of every parameter, for a checkpoint.
        Collective over the DP groups: every rank of the stage calls it."""
        full = {p: st for p, st in self.state.items()}
        for part in self.parts:
            for u in part.units:
                if u.param not in full:
                    full[u.param] = {
                        "step": torch.tensor(0.0),
                        "exp_avg": torch.zeros_like(u.param),
                        "exp_avg_sq": torch.zeros_like(u.param),
                    }
        steps = [float(u.state["step"]) for u in self.owned() if u.state]
        step = max(steps, default=0.0)

        def views(u):
            st = full[u.param]
            if u.owner == self.rank and u.state:
                u.view(st["exp_avg"]).copy_(u.state["exp_avg"])
                u.view(st["exp_avg_sq"]).copy_(u.state["exp_avg_sq"])
            return [u.view(st["exp_avg"]), u.view(st["exp_avg_sq"])]

        self._broadcast(views)
        # on the parameters' device: NCCL refuses CPU tensors
        step_t = torch.tensor([step], dtype=torch.float64, device=self.all_params[0].device)
        for part in self.parts:
            dist.all_reduce(step_t, op=dist.ReduceOp.MAX, group=part.group)
        for part in self.parts:
            for u in part.units:
                full[u.param]["step"] = torch.tensor(float(step_t))
        return full
