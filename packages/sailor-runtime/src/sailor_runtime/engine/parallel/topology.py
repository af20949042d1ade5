"""The process groups every rank creates, from the one rank layout (``sailor_runtime.topology``:
stage-major, then replica, then TP rank; re-exported here for the engine's modules).

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

from ...topology import Slot, Topology

__all__ = ["Groups", "Slot", "Topology", "build_groups"]


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
