"""Homogeneous plans from a few numbers (``sailor-sim simulate --gpu --tp --pp --dp --mbs``).

``pp`` stages x ``dp`` identical replicas of ``tp`` GPUs; layer ids split ``even`` (as equal
counts as possible, ``plan.even_split``), ``balanced`` (contiguous ranges minimizing the
slowest stage's per-microbatch time under the simulator's own stage times, so the embedding
and the LM head weigh what they cost), or given explicitly as counts per stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from .. import inputs
from ..errors import ValidationError
from .job import Job
from .plan import Plan, StageSlice


def balanced_split(sim, job: Job, gpu_type: str, tp: int, mbs: int, pp: int) -> list[int]:
    """Layer ids per stage minimizing the slowest stage (linear partition, O(pp n^2))."""
    n = job.model.num_layer_ids
    if not 1 <= pp <= n:
        raise ValidationError(f"pp must be in 1..{n} (layer ids of {job.model.name})", field="pp")

    @cache
    def cost(first: int, last: int) -> float:
        return sim.stage_time(job, StageSlice(first, last, gpu_type, tp, mbs)).per_microbatch_s

    inf = float("inf")
    # best[k][i]: the slowest stage when layers 0..i-1 form k stages; cut[k][i]: last cut
    best = [[inf] * (n + 1) for _ in range(pp + 1)]
    cut = [[0] * (n + 1) for _ in range(pp + 1)]
    best[0][0] = 0.0
    for k in range(1, pp + 1):
        for i in range(k, n - (pp - k) + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], cost(j, i - 1))
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    sizes, i = [], n
    for k in range(pp, 0, -1):
        j = cut[k][i]
        sizes.append(i - j)
        i = j
    return sizes[::-1]


def homogeneous_plan(
    sim,
    job: Job,
    gpu_type: str,
    zone: str,
    *,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    mbs: int = 1,
    split: str | Sequence[int] = "even",
) -> Plan:
    """A checked homogeneous plan; ``split`` is 'even', 'balanced' or layer ids per stage.
    The degrees must be integers >= 1 (``inputs.integral``: True and "2" are refused)."""
    degrees = {"tp": tp, "pp": pp, "dp": dp, "mbs": mbs}
    tp, pp, dp, mbs = (inputs.integral(value, name) for name, value in degrees.items())
    if isinstance(split, str):
        if split not in ("even", "balanced"):
            raise ValidationError(
                f"unknown split {split!r}; use 'even', 'balanced' or counts like 9,8,8,9",
                field="split",
            )
        job.model.check_tp(tp)
        sizes = None if split == "even" else balanced_split(sim, job, gpu_type, tp, mbs, pp)
    else:
        sizes = _checked_split(split, pp, job)
    return Plan.uniform(
        job, gpu_type, zone, pp=pp, dp=dp, tp=tp, microbatch_size=mbs, layer_split=sizes
    )


def _checked_split(split: Sequence[int], pp: int, job: Job) -> list[int]:
    """Explicit layer-id counts, one per stage, that add up to the model's layer ids."""
    sizes = [inputs.integral(n, "split") for n in split]
    given = ",".join(map(str, sizes))
    if len(sizes) != pp:
        raise ValidationError(
            f"{given} has {len(sizes)} stages but pp (--pp) is {pp}; give one count per stage "
            f"or set pp to {len(sizes)}",
            field="split",
        )
    n = job.model.num_layer_ids
    if sum(sizes) != n:
        raise ValidationError(
            f"{given} adds up to {sum(sizes)} layer ids, not the {n} of {job.model.name}",
            field="split",
        )
    return sizes


def parse_split(text: str | None) -> str | list[int]:
    """The --split option: 'even', 'balanced' or comma-separated layer-id counts."""
    if text is None or text in ("even", "balanced"):
        return text or "even"
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValidationError(
            f"{text!r} is not 'even', 'balanced' or comma-separated counts like 9,8,8,9",
            field="split",
        ) from None
