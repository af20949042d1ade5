"""The compute sweep: every TP degree x microbatch size, then the files the simulator reads.

TP 1 runs in this process; TP t > 1 runs as t local processes (one per device), the TP group
over gloo on CPU or NCCL on GPUs (``launch.run_local``). One launch per TP degree covers every
microbatch size, so process start-up is paid once per degree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sailor_sim import LayerProfile, ProfileEntry, ProfileKey, get_model

from ..devices import check_tp_fits
from ..errors import SweepError
from ..launch import run_local
from ..profiles.store import Record, update_folder
from ..timing import check_repetitions
from .measure import ComputeConfig, LayerResult, compute_worker, merge_ranks, profile_rank


@dataclass(frozen=True)
class SweepResult:
    gpu_type: str
    config: ComputeConfig
    tps: tuple[int, ...]
    rows: tuple[LayerResult, ...]
    provenance: dict


def check_sweep(cfg: ComputeConfig, tps: tuple[int, ...]) -> None:
    """Validate before any work: one clear error naming the field."""
    spec = get_model(cfg.model)
    if not cfg.mbs or any(m < 1 for m in cfg.mbs):
        raise SweepError(f"microbatch sizes must be >= 1, got {list(cfg.mbs)}", field="mbs")
    if not tps:
        raise SweepError("give at least one TP degree", field="tp")
    for tp in tps:
        check_tp_fits(cfg.device, tp)
        problem = spec.tp_problem(tp)
        if problem:
            raise SweepError(
                f"{problem}; TP degrees of {spec.name}: {spec.tp_degrees()}", field="tp"
            )
    if spec.position == "learned" and cfg.seq_len > spec.max_seq_len:
        raise SweepError(
            f"{cfg.seq_len} exceeds the {spec.max_seq_len} learned positions of {spec.name}",
            field="seq",
        )
    if cfg.seq_len < 1:
        raise SweepError(f"must be >= 1, got {cfg.seq_len}", field="seq")
    check_repetitions(cfg.warmup, cfg.reps)


def steps_per_tp(cfg: ComputeConfig) -> int:
    from .measure import layer_ids_to_profile

    return len(layer_ids_to_profile(get_model(cfg.model).num_layers, cfg.blocks)) * len(cfg.mbs)


def run_sweep(
    cfg: ComputeConfig, tps: tuple[int, ...], advance: Callable[[object], None] = lambda _s: None
) -> list[LayerResult]:
    """Profile every TP degree; ``advance`` is called once per (layer, microbatch size)."""
    check_sweep(cfg, tps)
    rows: list[LayerResult] = []
    for tp in tps:
        if tp == 1:
            rows += profile_rank(cfg, progress=advance)
        else:
            per_rank = run_local(
                compute_worker,
                tp,
                (cfg,),
                backend=cfg.device.backend,
                timeout_s=600,
                on_progress=advance,
                cuda_base=cfg.device.cuda_base,
            )
            rows += merge_ranks(per_rank)
    return rows


def to_entries(
    rows: list[LayerResult], cfg: ComputeConfig, gpu_type: str, provenance: dict
) -> tuple[list[ProfileEntry], list[Record]]:
    """Simulator entries for every (mbs, TP) whose layers all fit; a record for each key."""
    spec = get_model(cfg.model)
    entries, records = [], []
    keys = sorted({(r.mbs, r.tp) for r in rows})
    for mbs, tp in keys:
        layers = sorted((r for r in rows if (r.mbs, r.tp) == (mbs, tp)), key=lambda r: r.layer_id)
        base = Record(
            spec.name,
            gpu_type,
            cfg.dtype,
            cfg.seq_len,
            mbs,
            tp,
            "ok",
            "measured",
            provenance=provenance,
        )
        oom = [r for r in layers if r.status != "ok"]
        if oom:
            note = "; ".join(f"layer {r.layer_id}: {r.note}" for r in oom[:3])
            records.append(replace(base, status="oom", note=note))
            continue
        extrapolated = [r.layer_id for r in layers if r.note.startswith("copied")]
        if extrapolated:
            base = replace(
                base,
                note=f"layers {extrapolated[0]}..{extrapolated[-1]} copied from "
                f"profiled blocks (blocks={cfg.blocks})",
            )
        profile = tuple(
            LayerProfile(r.fwd.median, r.bwd.median, r.opt.median, r.memory.stash_bytes)
            for r in layers
        )
        key = ProfileKey(spec.name, gpu_type, cfg.dtype, mbs, tp)
        entries.append(
            ProfileEntry(
                key,
                cfg.seq_len,
                profile,
                "measured",
                includes_tp_comm=True,
                optimizer=cfg.optimizer,
            )
        )
        records.append(base)
    return entries, records


def write_profile(result: SweepResult, out: str | Path) -> list[Path]:
    """Merge the sweep into the profile folder ``out`` (simulator files + provenance)."""
    entries, records = to_entries(
        list(result.rows), result.config, result.gpu_type, result.provenance
    )
    return update_folder(out, entries, records)
