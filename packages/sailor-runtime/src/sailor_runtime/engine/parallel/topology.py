"""The process groups every rank creates, from the one rank layout (``sailor_runtime.topology``:
stage-major, then replica, then TP rank; re-exported here for the engine's modules).

Groups, created on every rank in this one order (torch.distributed requires it):
1. the TP group of every replica with tp > 1, stage by stage, replica by replica;
2. for every stage with more than one replica, its data-parallel groups: with T the largest TP
   degree among the stage's replicas, every sharded parameter is cut into T "fine pieces" along
   its split dimension; DP group f (0 <= f < T) holds, from each replica j, the TP rank that
   owns fine piece f, i.e. ``f // (T / tp_j)`` (TP degrees are powers of two, so they nest).
   A replica with tp < T is in several of these groups, each with a slice of its gradient.
3. for a tied embedding over several stages (``tied``), the groups that sum its two copies
   (``tied_group_ranks``).
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
    tied: object | None = None
    """The group summing this rank's copy of a tied matrix with the other stage's (None: this
    rank holds no copy, or the model is not tied over stages)."""
    tied_pairs: bool = False
    """``tied`` is a pair of ranks holding the same vocabulary rows (``tied_group_ranks``)."""


def tied_group_ranks(topo: Topology) -> tuple[list[list[int]], bool]:
    """The groups that sum the copies of a tied matrix (the embedding on stage 0, the head on
    the last stage), and whether they are pairs. Where every replica has the same TP degree
    on both stages, TP rank t of replica j holds the same vocabulary rows in both copies, so
    each (j, t) pair sums its shard alone (Megatron's embedding group, Shoeybi et al. 2019):
    1/tp of the matrix between two ranks, and no other stage takes part. Otherwise one group
    of every rank of the two stages sums the copies in full-vocabulary coordinates."""
    last = topo.num_stages - 1
    replicas = range(topo.num_replicas)
    if all(topo.tp(0, j) == topo.tp(last, j) for j in replicas):
        pairs = [
            [topo.rank(0, j, t), topo.rank(last, j, t)]
            for j in replicas
            for t in range(topo.tp(0, j))
        ]
        return pairs, True
    ends = [r for j in replicas for r in topo.tp_ranks(0, j) + topo.tp_ranks(last, j)]
    return [sorted(ends)], False


def build_groups(topo: Topology, rank: int, tied: bool = False) -> Groups:
    """Create every group on every rank in the documented order; keep this rank's. ``tied``:
    the embedding and head are one matrix held by two stages (``tied.syncs_tied_copies``)."""
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
    groups = Groups(tp_group, dp)
    if tied:
        members_list, groups.tied_pairs = tied_group_ranks(topo)
        for members in members_list:
            g = dist.new_group(members)
            if rank in members:
                groups.tied = g
    return groups
