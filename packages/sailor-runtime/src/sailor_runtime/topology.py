"""Rank layout of a plan, shared by the controller (placement) and the agents (validation).

Ranks are numbered stage-major: stage i, then replica j of that stage, then TP rank k within
the replica's TP group. This is the engine's order (sailor_runtime.engine), so a rank number
means the same thing on every side.
"""

from __future__ import annotations

from dataclasses import dataclass

from sailor_sim import Plan


@dataclass(frozen=True)
class RankSpec:
    rank: int
    stage: int
    replica: int
    tp_rank: int
    gpu_type: str
    zone: str


def rank_layout(plan: Plan) -> list[RankSpec]:
    """Every rank of ``plan`` in rank order."""
    out: list[RankSpec] = []
    for i, stage in enumerate(plan.stages):
        for j, rep in enumerate(stage.replicas):
            for k in range(rep.tp):
                out.append(RankSpec(len(out), i, j, k, rep.gpu_type, rep.zone))
    return out
