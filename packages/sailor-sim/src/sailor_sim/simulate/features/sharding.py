"""Which plans sharded data parallelism (ZeRO-2, ZeRO-3, hybrid sharding) can run on.

ZeRO-2 and ZeRO-3 / FSDP issue collectives over a stage's shard group every microbatch:
ZeRO-3 all-gathers each layer's parameters in forward and backward, ZeRO-2 (FSDP2's
``reshard_after_forward=False``, DeepSpeed stage 2) reduce-scatters each microbatch's
gradients into their shards. Every rank of the group must therefore issue the same
collectives on the same shard layout, as DeepSpeed, FSDP and torchtitan require:

- every replica of a stage has the same TP degree (a shard is 1/dp of a TP rank's slice; with
  two TP degrees the ranks hold differently cut slices and no shard group exists);
- every replica of a stage runs the same number of microbatches (a replica with one fewer
  would leave the others waiting in an all-gather: a hang, not a slow step);
- hybrid sharding shards within groups of ``shard_group`` replicas (one node) and replicates
  across groups (HSDP's 2-D mesh), so that group size divides the stage's replica count.

ZeRO-1 (the optimizer states only) synchronises once per step and runs on any plan. The
simulator refuses the rest with ``PlanError`` naming ``options.zero`` (``check_plan_sharding``),
the planner never builds them, and the runtime's engine uses the same rule
(``sharding_problem``).
"""

from __future__ import annotations

from ...catalog.gpus import get_gpu
from ...errors import PlanError
from ...spec.options import ZERO_PER_MICROBATCH


def hybrid_group(gpu_type: str, tp: int, replicas: int) -> int:
    """Replicas a hybrid shard group spans: those one node of ``gpu_type`` holds at ``tp``."""
    return max(1, min(replicas, get_gpu(gpu_type).gpus_per_node // tp))


def hybrid_divides(gpu_type: str, tp: int, replicas: int) -> bool:
    """Whether hybrid sharding's groups (``hybrid_group``) divide a stage's ``replicas``."""
    return replicas % hybrid_group(gpu_type, tp, replicas) == 0


def sharding_problem(zero: str, plan) -> str | None:
    """Why ``plan``'s stages cannot run ZeRO stage ``zero`` (one line naming the fix), or
    None (always None for 'none' and 'zero1')."""
    if zero not in ZERO_PER_MICROBATCH:
        return None
    for i, stage in enumerate(plan.stages):
        tps = sorted({r.tp for r in stage.replicas})
        counts = sorted({r.num_microbatches for r in stage.replicas})
        if len(tps) > 1:
            return (
                f"{zero} shards stage {i} over its replicas, which have TP degrees "
                f"{tps}; a shard group needs one TP degree: use zero1 on this plan or one TP "
                "degree per stage"
            )
        if len(counts) > 1:
            return (
                f"{zero} runs collectives every microbatch, and stage {i}'s replicas run "
                f"{counts[0]}..{counts[-1]} microbatches; every replica needs the same count: "
                "use zero1 on this plan or a data-parallel degree that divides the batch"
            )
        if zero == "hybrid":
            lead = stage.replicas[0]
            if not hybrid_divides(lead.gpu_type, lead.tp, len(stage.replicas)):
                group = hybrid_group(lead.gpu_type, lead.tp, len(stage.replicas))
                return (
                    f"hybrid shards within groups of {group} replicas (one "
                    f"{lead.gpu_type} node), which do not divide stage {i}'s "
                    f"{len(stage.replicas)} replicas; use zero3 or a multiple of {group}"
                )
    return None


def check_plan_sharding(zero: str, plan) -> None:
    """Raise ``PlanError`` (field ``options.zero``) where ``sharding_problem`` names one."""
    problem = sharding_problem(zero, plan)
    if problem is not None:
        raise PlanError(problem, field="options.zero")
