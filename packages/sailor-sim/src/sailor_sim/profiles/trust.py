"""Trust per estimate: the validation error of runs like it, not one figure for all.

``bench/sim_published.py --fit`` predicts every published run leave-one-source-out and writes
the error summary of each *group* of runs into ``data/compute_efficiency.json``
(``validation.leave_one_source_out_by_group``). A group is a GPU family, a precision and an
execution style, each possibly widened to '*':

    ampere/fp16/megatron, ampere/*/megatron, ampere/fp16/*, ampere/*/*, */*/*

An estimate's trust is the most specific group that has runs (``lookup``), named with its row
count, so an H100 FSDP estimate quotes the H100 FSDP runs' error and a Megatron-style A100
estimate the Megatron runs'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SHARDED = "fsdp"
"""Gradients or parameters sharded over data parallelism (FSDP SHARD_GRAD_OP / FULL_SHARD,
ZeRO-2, ZeRO-3, hybrid): the frameworks that run them wrap eager modules."""
MODEL_PARALLEL = "megatron"
"""Replicated data parallelism, or only the optimizer states sharded (Megatron-LM's
distributed optimizer), with tensor / pipeline model parallelism (Megatron-LM)."""
SHARDED_ZERO = ("zero2", "zero3", "hybrid")
"""ZeRO stages run by a sharded-data-parallel framework. ZeRO-2 is among them: the runtime
runs it with FSDP2, as it runs ZeRO-3, and Megatron-LM has no ZeRO-2 (no published row has
it, so the fit is unchanged). Mapped to 'megatron', switching ZeRO-2 to ZeRO-3 changed the
framework term too (-32 % tokens/s for LLaMA-8B on 8 H100), not only the all-gathers."""


def execution_style(zero: str) -> str:
    """The style of a run from its ``ExecutionOptions.zero`` value."""
    return SHARDED if zero in SHARDED_ZERO else MODEL_PARALLEL


def group_keys(family: str | None, dtype: str, style: str) -> list[str]:
    """The groups a run belongs to, most specific first."""
    fam = family or "other"
    return [
        f"{fam}/{dtype}/{style}",
        f"{fam}/*/{style}",
        f"{fam}/{dtype}/*",
        f"{fam}/*/*",
        "*/*/*",
    ]


def summarize(errors: Iterable[tuple[list[str], float, float | None]]) -> dict[str, Any]:
    """Per group key: mean and worst |throughput error| (and memory where published) and row
    counts, from (group keys, throughput error, memory error or None) per run."""
    groups: dict[str, dict[str, list[float]]] = {}
    for keys, throughput, memory in errors:
        for key in keys:
            g = groups.setdefault(key, {"t": [], "m": []})
            g["t"].append(abs(throughput))
            if memory is not None:
                g["m"].append(abs(memory))
    out = {}
    for key, g in sorted(groups.items()):
        summary: dict[str, Any] = {
            "throughput_mean": round(sum(g["t"]) / len(g["t"]), 4),
            "throughput_max": round(max(g["t"]), 4),
            "rows": len(g["t"]),
            "memory_rows": len(g["m"]),
        }
        if g["m"]:
            summary["memory_mean"] = round(sum(g["m"]) / len(g["m"]), 4)
            summary["memory_max"] = round(max(g["m"]), 4)
        out[key] = summary
    return out


def lookup(
    groups: Mapping[str, Mapping[str, Any]], family: str | None, dtype: str, style: str
) -> tuple[str, Mapping[str, Any]] | None:
    """(group key, summary) of the most specific group with runs, or None."""
    for key in group_keys(family, dtype, style):
        if key in groups and groups[key].get("rows", 0) > 0:
            return key, groups[key]
    return None
