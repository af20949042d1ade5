"""Where each rank sits in a plan, and the process groups every rank creates.

Rank order (stable; the controller places processes by it): stage-major, then replica, then TP
rank. For stage i, replica j, TP rank k:
``rank = sum(tp of all replicas of stages < i) + sum(tp of replicas < j of stage i) + k``.

Groups, created on every rank in this one order (torch.distributed requires it):
1. the TP group of every replica with tp > 1, stage by stage, replica by replica;
2. for every stage with more than one replica, its data-parallel groups: with T the largest TP
   degree among the stage's replicas, every sharded parameter is cut into T "fine pieces" along
   its split dimension; DP group f (0 <= f < T) holds, from each replica j, the TP rank that
   owns fine piece f, i.e. ``f // (T / tp_j)`` (TP degrees are powers of two, so they nest).
   A replica with tp < T is in several of these groups, each with a slice of its gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from sailor_sim.plan import Plan


@dataclass(frozen=True)
class Slot:
    """A rank's place: stage index, replica (pipeline) index, TP rank within the replica."""

    stage: int
    replica: int
    tp_rank: int


class Topology:
    """Rank arithmetic for a plan (pure; no process groups)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._first: dict[tuple[int, int], int] = {}
        self._slots: list[Slot] = []
        for i, stage in enumerate(plan.stages):
            for j, rep in enumerate(stage.replicas):
                self._first[(i, j)] = len(self._slots)
                self._slots.extend(Slot(i, j, k) for k in range(rep.tp))

    @property
    def world_size(self) -> int:
        return len(self._slots)

    @property
    def num_stages(self) -> int:
        return self.plan.num_stages

    @property
    def num_replicas(self) -> int:
        return self.plan.num_pipelines

    def slot(self, rank: int) -> Slot:
        return self._slots[rank]

    def rank(self, stage: int, replica: int, tp_rank: int = 0) -> int:
        return self._first[(stage, replica)] + tp_rank

    def tp(self, stage: int, replica: int) -> int:
        return self.plan.stages[stage].replicas[replica].tp

    def tp_ranks(self, stage: int, replica: int) -> list[int]:
        first = self._first[(stage, replica)]
        return list(range(first, first + self.tp(stage, replica)))

    def max_tp(self, stage: int) -> int:
        return max(r.tp for r in self.plan.stages[stage].replicas)

    def fine_pieces(self, slot: Slot) -> range:
        """Fine pieces (see module docstring) of the stage that this rank's shards hold."""
        per = self.max_tp(slot.stage) // self.tp(slot.stage, slot.replica)
        return range(slot.tp_rank * per, (slot.tp_rank + 1) * per)

    def dp_group_ranks(self, stage: int, piece: int) -> list[int]:
        big = self.max_tp(stage)
        return [
            self.rank(stage, j, piece // (big // self.tp(stage, j)))
            for j in range(self.num_replicas)
        ]

    @property
    def metrics_rank(self) -> int:
        """The rank that writes metrics: TP rank 0 of replica 0 of the last stage."""
        return self.rank(self.num_stages - 1, 0, 0)


@dataclass
class Groups:
    """This rank's process groups (None where a group would have one member)."""

    tp: object | None
    dp: dict[int, object]
    """Fine piece -> DP group, for the pieces this rank holds (empty with one replica)."""


def build_groups(topo: Topology, rank: int) -> Groups:
    """Create every group on every rank in the documented order; keep this rank's."""
    me = topo.slot(rank)
    tp_group = None
    for i in range(topo.num_stages):
        for j in range(topo.num_replicas):
            if topo.tp(i, j) > 1:
                g = dist.new_group(topo.tp_ranks(i, j))
                if (i, j) == (me.stage, me.replica):
                    tp_group = g
    dp: dict[int, object] = {}
    if topo.num_replicas > 1:
        for i in range(topo.num_stages):
            for f in range(topo.max_tp(i)):
                members = topo.dp_group_ranks(i, f)
                g = dist.new_group(members)
                if rank in members and i == me.stage:
                    dp[f] = g
    return Groups(tp_group, dp)
