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

from ..errors import PlacementError
from ..topology import RankSpec, rank_layout
from .membership import Worker

Placement = dict[str, list[tuple[int, int]]]
"""worker id -> [(rank, local device)]."""


def _groups(plan) -> list[list[RankSpec]]:
    groups: dict[tuple[int, int], list[RankSpec]] = {}
    for spec in rank_layout(plan):
        groups.setdefault((spec.stage, spec.replica), []).append(spec)
    return sorted(groups.values(), key=len, reverse=True)  # stable: rank order on ties


def place(plan, workers: list[Worker]) -> Placement:
    free = {w.worker_id: list(range(w.gpus.count)) for w in workers}
    by_id = {w.worker_id: w for w in workers}
    out: Placement = {}
    for group in _groups(plan):
        spec = group[0]
        fits = [
            wid
            for wid, devs in free.items()
            if len(devs) >= len(group)
            and (by_id[wid].gpus.gpu_type, by_id[wid].gpus.zone) == (spec.gpu_type, spec.zone)
        ]
        if not fits and spec.zone == "local":
            spread = _spread_local(group, spec, free, by_id)
            if spread:
                for wid, s_rank, dev in spread:
                    out.setdefault(wid, []).append((s_rank, dev))
                continue
        if not fits:
            raise PlacementError(
                f"no live node has {len(group)} free {spec.gpu_type}@{spec.zone} GPUs for "
                f"stage {spec.stage} replica {spec.replica}",
                field="plan",
            )
        wid = min(fits, key=lambda w: (len(free[w]), by_id[w].joined_at))
        for s in group:
            out.setdefault(wid, []).append((s.rank, free[wid].pop(0)))
    return {wid: sorted(slots) for wid, slots in out.items()}


def _spread_local(group, spec, free, by_id) -> list[tuple[str, int, int]]:
    """Devices for ``group`` across several local nodes of its type, or [] if too few."""
    nodes = sorted(
        (
            w
            for w in free
            if (by_id[w].gpus.gpu_type, by_id[w].gpus.zone) == (spec.gpu_type, "local")
        ),
        key=lambda w: by_id[w].joined_at,
    )
    if sum(len(free[w]) for w in nodes) < len(group):
        return []
    out = []
    members = iter(group)
    for w in nodes:
        while free[w] and len(out) < len(group):
            out.append((w, next(members).rank, free[w].pop(0)))
    return out
