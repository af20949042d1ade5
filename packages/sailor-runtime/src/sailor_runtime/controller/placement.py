"""Place the ranks of a plan on live nodes.

Each replica's TP group stays on one node (TP runs over the intra-node link). Groups are
placed largest first, each onto the node of the right (GPU type, zone) with the fewest free
GPUs that still holds the whole group, earliest joined first on ties (best-fit decreasing bin
packing, so big TP groups find whole nodes and small replicas fill the gaps). Complexity
O(R log R + R x N) for R replicas and N nodes.

One exception: nodes in zone 'local' are agents on this one machine (emulated GPUs), so a TP
group that fits no single local node may span several of them. The planner sizes TP groups by
the GPU type's GPUs per node, which says nothing about how many GPUs each local agent declared.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlacementError
from ..topology import Topology
from .membership import Worker

Placement = dict[str, list[tuple[int, int]]]
"""worker id -> [(rank, local device)]."""


@dataclass(frozen=True)
class ReplicaRanks:
    """The ranks of one replica (its TP group), which must share a node."""

    stage: int
    replica: int
    gpu_type: str
    zone: str
    ranks: tuple[int, ...]


def _groups(plan) -> list[ReplicaRanks]:
    topo = Topology(plan)
    groups = [
        ReplicaRanks(i, j, rep.gpu_type, rep.zone, tuple(topo.tp_ranks(i, j)))
        for i, stage in enumerate(plan.stages)
        for j, rep in enumerate(stage.replicas)
    ]
    return sorted(groups, key=lambda g: len(g.ranks), reverse=True)  # stable: rank order on ties


def place(plan, workers: list[Worker]) -> Placement:
    free = {w.worker_id: list(range(w.gpus.count)) for w in workers}
    by_id = {w.worker_id: w for w in workers}
    out: Placement = {}
    for spec in _groups(plan):
        fits = [
            wid
            for wid, devs in free.items()
            if len(devs) >= len(spec.ranks)
            and (by_id[wid].gpus.gpu_type, by_id[wid].gpus.zone) == (spec.gpu_type, spec.zone)
        ]
        if not fits and spec.zone == "local":
            spread = _spread_local(spec, free, by_id)
            if spread:
                for wid, s_rank, dev in spread:
                    out.setdefault(wid, []).append((s_rank, dev))
                continue
        if not fits:
            raise PlacementError(
                f"no live node has {len(spec.ranks)} free {spec.gpu_type}@{spec.zone} GPUs for "
                f"stage {spec.stage} replica {spec.replica}",
                field="plan",
            )
        wid = min(fits, key=lambda w: (len(free[w]), by_id[w].joined_at))
        for rank in spec.ranks:
            out.setdefault(wid, []).append((rank, free[wid].pop(0)))
    return {wid: sorted(slots) for wid, slots in out.items()}


def _spread_local(spec: ReplicaRanks, free, by_id) -> list[tuple[str, int, int]]:
    """Devices for ``spec``'s ranks across several local nodes of its type, or [] if too few."""
    nodes = sorted(
        (
            w
            for w in free
            if (by_id[w].gpus.gpu_type, by_id[w].gpus.zone) == (spec.gpu_type, "local")
        ),
        key=lambda w: by_id[w].joined_at,
    )
    if sum(len(free[w]) for w in nodes) < len(spec.ranks):
        return []
    out = []
    members = iter(spec.ranks)
    for w in nodes:
        while free[w] and len(out) < len(spec.ranks):
            out.append((w, next(members), free[w].pop(0)))
    return out
