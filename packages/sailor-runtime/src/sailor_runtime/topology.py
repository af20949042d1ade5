"""The rank layout of a plan: where each rank sits. One layout for every side: the controller
places processes by it, the agents validate assignments with it, the engine builds its process
groups from it (engine.parallel.topology). Torch-free, so the control plane can use it without
torch.

Rank order (stable): stage-major, then replica, then TP rank. For stage i, replica j, TP rank k:
``rank = sum(tp of all replicas of stages < i) + sum(tp of replicas < j of stage i) + k``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sailor_sim import Plan, Replica


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
        """Fine pieces (see engine.parallel.topology) of the stage that this rank's shards hold."""
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

    def replica(self, slot: Slot) -> Replica:
        """The plan's replica (GPU type, zone, TP degree, ...) that holds ``slot``."""
        return self.plan.stages[slot.stage].replicas[slot.replica]

    def slots(self) -> list[Slot]:
        """Every rank's slot, in rank order."""
        return list(self._slots)


@dataclass(frozen=True)
class RankSpec:
    """A rank with its replica's GPU type and zone: a flat view of ``Topology``."""

    rank: int
    stage: int
    replica: int
    tp_rank: int
    gpu_type: str
    zone: str


def rank_layout(plan: Plan) -> list[RankSpec]:
    """Every rank of ``plan`` in rank order, as ``Topology`` numbers them."""
    topo = Topology(plan)
    out = []
    for rank, slot in enumerate(topo.slots()):
        rep = topo.replica(slot)
        out.append(RankSpec(rank, slot.stage, slot.replica, slot.tp_rank, rep.gpu_type, rep.zone))
    return out
