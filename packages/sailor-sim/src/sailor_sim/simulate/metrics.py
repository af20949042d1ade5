"""How fast, how efficient, what it costs where, and how much to trust an estimate.

Throughput in tokens/s (and per GPU), model FLOP/s per GPU and MFU, model FLOPs utilization
(Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, Appendix B): training
FLOPs per token = 6N + 12 L H Q T, with N the parameters that take part in a matmul (all but the
input embedding lookups; a tied matrix counts once, as the LM head), L layers, H heads of size Q
(H Q = hidden size) and T the sequence length; the 12 L H Q T term is the attention scores and
context (forward + backward, no causal halving, as PaLM). MFU divides the achieved model FLOP/s
by the plan's peak: each GPU's dense peak at the job's dtype (fp32 jobs: the TF32 tensor-core
peak where the GPU has one, as the simulator's analytic profiles assume); a local CPU worker
type's peak is its cores' (``catalog.hostcpu``: clock x FLOPs per cycle of the CPU's widest
matmul instructions), not the catalog's placeholder. Recomputation is not counted (model FLOPs,
not hardware FLOPs).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..catalog.gpus import get_gpu
from ..catalog.hostcpu import cpu_type_peak_flops
from ..catalog.prices import outside_only
from ..catalog.zones import DEFAULT_REGIONS, default_zone, get_zone

GiB = 1024**3


@dataclass(frozen=True)
class Throughput:
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_token: float
    model_tflops_per_gpu: float
    """Achieved model TFLOP/s per GPU (mean over the plan's GPUs)."""
    peak_tflops_per_gpu: float
    """Mean dense peak TFLOP/s of the plan's GPUs at the job's dtype."""
    mfu: float
    """Model FLOPs utilization: achieved / peak, in [0, 1]."""

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def model_flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token, 6N + 12 L H Q T (PaLM, Appendix B); N counts the weights a
    token uses, so a mixture-of-experts model counts its top-k routed experts only (the
    'activated' parameters of MoE reports), and the attention term uses the heads' own
    query/key and value widths (MLA)."""
    # 12 L H Q T is 6 L H (d_qk + d_v) T: QK^T over the query/key width, the context over
    # the value width. MLA's heads differ from hidden / heads (DeepSeek-V3: d_qk 192, d_v 128
    # where hidden / heads is 56), so the widths are the model's own (equal to head_dim
    # otherwise, which leaves PaLM's formula as it was).
    per_head = model.qk_head_dim + model.v_head_dim
    attention = 6 * model.num_layers * model.num_heads * per_head * seq_len
    unrouted = model.total_params() - model.active_params()
    return 6.0 * (model.matmul_params() - unrouted) + attention


def _peak(gpu_type: str, dtype: str) -> float:
    gpu = get_gpu(gpu_type)
    if not gpu.supports(dtype):
        return 0.0
    if gpu.platform == "cpu":
        cores = cpu_type_peak_flops(gpu_type, dtype)
        if cores is not None:
            return cores
    return gpu.peak_flops(dtype, allow_tf32=True)


def plan_peak_flops(plan, dtype: str) -> float:
    """Dense peak FLOP/s of all of the plan's GPUs at ``dtype`` (0 for a GPU without it)."""
    gpus = Counter()  # looked up once per GPU type, not per replica
    for stage in plan.stages:
        for r in stage.replicas:
            gpus[r.gpu_type] += r.tp
    return sum(_peak(gpu, dtype) * n for gpu, n in gpus.items())


def throughput(job, plan, estimate) -> Throughput:
    """Tokens/s, model TFLOP/s per GPU and MFU of an estimate of ``plan`` for ``job``."""
    gpus = plan.num_gpus
    tokens_per_s = estimate.samples_per_s * job.sequence_length
    per_token = model_flops_per_token(job.model, job.sequence_length)
    peak = plan_peak_flops(plan, job.dtype)
    achieved = tokens_per_s * per_token
    return Throughput(
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        model_flops_per_token=per_token,
        model_tflops_per_gpu=achieved / gpus / 1e12,
        peak_tflops_per_gpu=peak / gpus / 1e12,
        mfu=achieved / peak if peak > 0 else 0.0,
    )


def gpus_by_type(plan) -> dict[str, int]:
    """GPU count per GPU type of a plan (every replica holds ``tp`` GPUs)."""
    counts: dict[str, int] = {}
    for stage in plan.stages:
        for r in stage.replicas:
            counts[r.gpu_type] = counts.get(r.gpu_type, 0) + r.tp
    return counts


OUTSIDE_ROW = "other"
"""The ``cost_by_provider`` row of prices outside the clouds (rentals, a user catalog's)."""


def cost_by_provider(plan, providers=None, regions=None) -> list[dict[str, Any]]:
    """$/hour of the plan's GPUs at each provider, on demand and spot, rounded to cents as the
    price lists are, with the sources; providers lacking one of the plan's GPU types get
    ``None`` and say which one. ``providers``: default all three clouds, ``[]`` none (no rows).
    Each provider's region is the one given in ``regions``, else the one the plan's replicas
    use on that provider, else its default region. When one of the plan's GPU types is priced
    only outside the clouds (``prices.outside_only``: a rental price, or a catch-all from a
    user catalog), a last row ``other`` (region '-') holds that price: the clouds' rows never
    borrow it."""
    if providers is None:
        providers = list(DEFAULT_REGIONS)
    counts = gpus_by_type(plan)
    regions = {**plan_regions(plan), **(regions or {})}
    rows = []
    for provider in providers:
        zone = default_zone(provider, regions.get(provider))
        row = {"provider": provider, "region": get_zone(zone).region}
        rows.append({**row, **_priced(counts, zone, catch_all=False)})
    if rows and any(outside_only(g) for g in counts):
        rows.append({"provider": OUTSIDE_ROW, "region": "-", **_priced(counts, "local")})
    return rows


def plan_regions(plan) -> dict[str, str]:
    """Provider -> the region of the plan's first replica on that provider."""
    out: dict[str, str] = {}
    zones = dict.fromkeys(r.zone for stage in plan.stages for r in stage.replicas)  # in order
    for name in zones:  # each zone looked up once, not per replica
        zone = get_zone(name)
        out.setdefault(zone.provider, zone.region)
    return out


def _priced(counts: dict[str, int], zone: str, catch_all: bool = True) -> dict[str, Any]:
    """The cost fields of one ``cost_by_provider`` row: ``counts`` GPUs (type -> count) in
    ``zone``, on demand and spot; ``None`` and what is ``missing`` when a type has no price."""
    from ..catalog.prices import price_entry
    from ..errors import PriceUnavailableError

    try:
        entries = [(n, price_entry(g, zone, catch_all=catch_all)) for g, n in counts.items()]
    except PriceUnavailableError as exc:
        return {"usd_per_hour": None, "spot_usd_per_hour": None, "missing": str(exc)}
    try:
        spot = sum(
            n * price_entry(g, zone, True, catch_all=catch_all)[0] for g, n in counts.items()
        )
    except PriceUnavailableError:  # priced on demand only (a rental, a user catalog's price)
        spot = None
    return {
        "usd_per_hour": _cents(sum(n * price for n, (price, _) in entries)),
        "spot_usd_per_hour": None if spot is None else _cents(spot),
        "sources": [source for _, (_, source) in entries],
    }


def _cents(usd: float) -> float:
    return round(usd, 2)


# What each profile source means, and the validation error measured for it (bench/ scripts).
PROVENANCE: dict[str, str] = {
    "measured": "measured profile",
    "imported": "imported profile",
    "interpolated": "interpolated profile",
    "analytic": "calibrated analytic",
}
"""Profile source kind -> provenance label (analytic entries without a published-run calibration
for their GPU family and dtype are labelled 'uncalibrated analytic')."""
IMPORTED_VALIDATION: dict[str, Any] = {
    "method": "leave-one-out over the 15 GH200 OPT-350 fp32 runs of the original Sailor "
    "(bench/sim_validation.py)",
    "throughput_mean": 0.0311,
    "throughput_max": 0.0766,
    "memory_mean": 0.0495,
    "memory_max": 0.0950,
}
"""What bench/sim_validation.py prints for imported profiles (time error read as throughput
error: one iteration's tokens are fixed)."""
_NOT_VALIDATED = {"method": "none: no published or reference runs validate this source"}


def _calibrated_validation(which: str) -> dict[str, Any]:
    """One summary of the committed calibration file (``analytic.calibration_validation``)."""
    from ..profiles import analytic

    summary = analytic.calibration_validation().get(which)
    if not summary:
        return dict(_NOT_VALIDATED)
    method = {
        "leave_one_source_out": "leave-one-source-out",
        "uncalibrated": "no calibration",
    }.get(which, which)
    rows = (
        f"{summary.get('rows', '?')} published runs, {summary.get('memory_rows', '?')} with memory"
    )
    keys = ("throughput_mean", "throughput_max", "memory_mean", "memory_max")
    out: dict[str, Any] = {k: summary[k] for k in keys if k in summary}
    out["method"] = f"{method} on {rows} (bench/sim_published.py, {analytic.CALIBRATION_FILE.name})"
    return out


def _group_validation(gpu, job) -> dict[str, Any]:
    """The leave-one-source-out error of the published runs most like this estimate (its GPU
    family, precision and execution style, widened until a group has runs: ``trust``)."""
    from ..profiles import analytic, trust

    groups = analytic.calibration_validation().get("leave_one_source_out_by_group", {})
    style = trust.execution_style(job.options.zero)
    found = trust.lookup(groups, analytic.gpu_family(gpu), job.dtype, style)
    if found is None:
        return _calibrated_validation("leave_one_source_out")
    key, summary = found
    out: dict[str, Any] = {k: v for k, v in summary.items() if k.endswith(("_mean", "_max"))}
    out["group"] = key
    out["method"] = (
        f"leave-one-source-out on the {summary['rows']} published runs of group {key} "
        f"(family/precision/style; bench/sim_published.py, {analytic.CALIBRATION_FILE.name})"
    )
    return _with_features(out, job)


def _features_used(job) -> list[str]:
    """What ``job`` runs that the calibration corpus (dense bf16/fp16 runs) has no run of."""
    o = job.options
    used = [("fp8", o.fp8 != "none"), ("cp", o.context_parallel > 1), ("ep", o.expert_parallel > 1)]
    return [name for name, on in used if on]


def _with_features(out: dict[str, Any], job) -> dict[str, Any]:
    """``out`` (a group's validation) for a job that uses FP8, context or expert parallelism:
    that group's runs have none of them, so the error quoted is the larger of the group's and
    that of the published runs that use them (``bench/sim_features.py``: predicted, nothing
    fitted), both kept. Quoting the group alone, an FP8 H100 estimate claimed the 3 % of
    NeMo's bf16 H100 runs where FP8 is validated on Blackwell runs at 9 % mean."""
    from ..profiles import analytic

    used = _features_used(job)
    features = analytic.features_validation() if used else {}
    if not features:
        return out
    out = {**out, "features": copy.deepcopy(features)}  # the cached file's object is shared
    for key in ("throughput_mean", "throughput_max"):
        out[key] = max(out.get(key, 0.0), features[key])
    out["method"] += (
        f"; {'/'.join(used)}: none in those runs, so the larger of their error and that of the "
        f"{features['rows']} published runs using fp8/cp/ep ({', '.join(features['gpus'])}; "
        f"{features['throughput_mean']:.1%} mean / {features['throughput_max']:.1%} worst, "
        "predicted, not fitted; bench/sim_features.py)"
    )
    return out


def _framework_note(gpu, job) -> str:
    """Which fitted framework efficiency the estimate's ``framework`` term used (its own
    style and family, or one borrowed: ``analytic.framework_efficiency``)."""
    from ..profiles import analytic, trust

    style = trust.execution_style(job.options.zero)
    found = analytic.framework_efficiency(style, analytic.gpu_family(gpu))
    if found is None:
        return "; no framework term (no fit)"
    return f"; framework efficiency {found[0]:.2f} ({found[1]})"


def _analytic_entries(source: str, job, plan) -> list[dict[str, Any]]:
    """One provenance entry per GPU type of an analytic estimate: calibrated on published runs
    (its leave-one-source-out error) or not (the error of the uncalibrated model there)."""
    from ..profiles import analytic

    out = []
    for gpu_type in gpus_by_type(plan):
        gpu = get_gpu(gpu_type)
        fit = analytic.calibrated(gpu, job.dtype) if job.dtype != "fp32" else None
        if fit is not None:
            label, validation = "calibrated analytic", _group_validation(gpu, job)
            detail = (
                f"efficiency calibrated on published runs ({analytic.CALIBRATION_FILE.name})"
                f"{_framework_note(gpu, job)}"
            )
        elif job.dtype == "fp32":  # per-GPU fits to Sailor's fp32 profiles, none held out
            label = "uncalibrated analytic"
            validation = {"method": f"none held out: {analytic.efficiency(gpu).source}"}
            detail = "fp32: no published-run calibration"
        else:
            label, validation = "uncalibrated analytic", _calibrated_validation("uncalibrated")
            detail = f"no published-run calibration for {gpu.name} in {job.dtype}"
        out.append(
            {
                "source": source,
                "kind": "analytic",
                "gpu_type": gpu.name,
                "provenance": label,
                "validation": validation,
                "trust": f"{label} ({gpu.name}): {_error_text(validation)}; {detail}",
            }
        )
    return out


def _error_text(validation: dict[str, Any]) -> str:
    if "throughput_mean" not in validation:
        return f"validation {validation['method']}"
    text = (
        f"throughput error {validation['throughput_mean']:.1%} mean / "
        f"{validation['throughput_max']:.1%} worst"
    )
    if "memory_mean" in validation and validation["memory_mean"] == validation["memory_mean"]:
        text += (
            f", memory {validation['memory_mean']:.1%} mean / {validation['memory_max']:.1%} worst"
        )
    return f"{text}, {validation['method']}"


def provenance(sources, job=None, plan=None) -> list[dict[str, Any]]:
    """Each estimate source with its provenance (measured profile / imported profile /
    calibrated analytic / uncalibrated analytic) and the validation error of that provenance:
    ``validation`` holds mean and worst relative errors with the method that measured them
    (imported: bench/sim_validation.py's leave-one-out; analytic: the committed calibration's
    leave-one-source-out on published runs, or the uncalibrated model's error there)."""
    out: list[dict[str, Any]] = []
    for source in sources:
        kind = source.split(":")[0]
        if kind == "analytic" and job is not None and plan is not None:
            out += _analytic_entries(source, job, plan)
            continue
        label = PROVENANCE.get(kind, "unknown source")
        validation = dict(IMPORTED_VALIDATION if kind == "imported" else _NOT_VALIDATED)
        out.append(
            {
                "source": source,
                "kind": kind,
                "provenance": label,
                "validation": validation,
                "trust": f"{label}: {_error_text(validation)}",
            }
        )
    return out
