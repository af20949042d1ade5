"""Place the ranks of a plan on live nodes.

Each replica's TP group stays on one node (TP runs over the intra-node link). Replicas are
placed in rank order, each onto the node of the right (GPU type, zone) with the most free GPUs
that can hold the whole group, earliest joined first on ties (a greedy best-fit: a node is
filled before a fresh one is opened only when it has more room). Complexity O(R x N) for R
replicas and N nodes.
"""

from __future__ import annotations

from ..errors import PlacementError
from ..topology import rank_layout
from .membership import Worker

Placement = dict[str, list[tuple[int, int]]]
"""worker id -> [(rank, local device)]."""


def place(plan, workers: list[Worker]) -> Placement:
    free = {w.worker_id: list(range(w.gpus.count)) for w in workers}
    by_id = {w.worker_id: w for w in workers}
    out: Placement = {}
    layout = rank_layout(plan)
    i = 0
    while i < len(layout):
        spec = layout[i]
        group = [s for s in layout[i:] if (s.stage, s.replica) == (spec.stage, spec.replica)]
        fits = [
            wid
            for wid, devs in free.items()
            if len(devs) >= len(group)
            and (by_id[wid].gpus.gpu_type, by_id[wid].gpus.zone) == (spec.gpu_type, spec.zone)
        ]
        if not fits:
            raise PlacementError(
                f"no live node has {len(group)} free {spec.gpu_type}@{spec.zone} GPUs for "
                f"stage {spec.stage} replica {spec.replica}",
                field="plan",
            )
        wid = max(fits, key=lambda w: (len(free[w]), -by_id[w].joined_at))
        for s in group:
            out.setdefault(wid, []).append((s.rank, free[wid].pop(0)))
        i += len(group)
    return out
