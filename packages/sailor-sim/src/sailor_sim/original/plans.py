"""Reader for the original Sailor plan JSON (``plan_config_*.json``, planner output).

Layout: ``pipeline_list[0]`` holds ``layers_per_stage`` (layer ids per stage), ``tmp_per_stage``
(per stage, per replica ``[[[gpu type, gpus per node, zone]], tp]``) and ``dp`` (replicas per
stage); ``mbs`` and ``gbs`` are global. Validation files add measured ``real`` (mean iteration
seconds) and ``max_mem`` (peak bytes, nvidia-smi). Each pipeline runs gbs / (mbs * dp)
microbatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import PlanError, ValidationError
from ..spec.plan import Plan, Replica, Stage, _at


@dataclass(frozen=True)
class SailorPlanRecord:
    plan: Plan
    global_batch_size: int
    microbatch_size: int
    measured_iteration_s: float | None
    """``real`` in validation files: mean iteration seconds (iterations 4-10, rank 0)."""
    measured_peak_memory_bytes: int | None
    """``max_mem`` in validation files: peak bytes over ranks from nvidia-smi."""
    source: str


def read_sailor_plan(source: str | Path | dict[str, Any]) -> SailorPlanRecord:
    """Read an original Sailor plan JSON file (or its parsed dict)."""
    name = str(source) if not isinstance(source, dict) else "<dict>"
    data = source if isinstance(source, dict) else _load(Path(source))
    try:
        pipeline = data["pipeline_list"][0]
        mbs, gbs = int(data["mbs"]), int(data["gbs"])
        layers, per_stage, dp = (
            pipeline["layers_per_stage"],
            pipeline["tmp_per_stage"],
            pipeline["dp"],
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PlanError(
            f"{name} is not an original Sailor plan (missing {exc})", field="sailor_plan"
        ) from None
    if not all(isinstance(x, list) for x in (layers, per_stage, dp)):
        raise PlanError("layers_per_stage, tmp_per_stage and dp must be lists", field="sailor_plan")
    if not (len(layers) == len(per_stage) == len(dp)):
        raise PlanError(
            f"{name}: layers_per_stage, tmp_per_stage and dp have different lengths",
            field="sailor_plan",
        )
    try:
        return _record(data, name, mbs, gbs, layers, per_stage, dp)
    except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise PlanError(f"{name} is malformed ({exc!r:.120})", field="sailor_plan") from None


def _record(data, name, mbs, gbs, layers, per_stage, dp) -> SailorPlanRecord:
    stages = []
    for i, (ids, replicas, degree) in enumerate(zip(layers, per_stage, dp, strict=True)):
        where = f"sailor_plan.tmp_per_stage[{i}]"
        if len(replicas) != degree:
            raise PlanError(f"lists {len(replicas)} replicas but dp says {degree}", field=where)
        if mbs < 1 or gbs % (mbs * degree):
            raise PlanError(f"gbs {gbs} is not divisible by mbs {mbs} x dp {degree}", field=where)
        num_micro = gbs // (mbs * degree)
        stage_replicas = tuple(
            _at(f"{where}[{j}]", lambda entry=entry, n=num_micro: _replica(entry, mbs, n))
            for j, entry in enumerate(replicas)
        )
        if list(ids) != list(range(ids[0], ids[-1] + 1)):
            raise PlanError(
                f"layer ids {ids} are not contiguous", field=f"sailor_plan.layers_per_stage[{i}]"
            )
        stages.append(Stage(int(ids[0]), int(ids[-1]), stage_replicas))
    real, mem = data.get("real"), data.get("max_mem")
    return SailorPlanRecord(
        Plan(tuple(stages)),
        gbs,
        mbs,
        float(real) if real is not None else None,
        int(mem) if mem is not None else None,
        name,
    )


def _replica(entry, mbs: int, num_micro: int) -> Replica:
    (placements, tp) = entry
    if len(placements) != 1:
        raise ValidationError(
            "a replica spanning several node types is not supported", field="placement"
        )
    gpu_type, _gpus_per_node, zone = placements[0]
    return Replica(str(gpu_type), str(zone), int(tp), mbs, num_micro)


def _load(path: Path) -> dict[str, Any]:
    return inputs.load_json(path, "sailor_plan", error=PlanError)
