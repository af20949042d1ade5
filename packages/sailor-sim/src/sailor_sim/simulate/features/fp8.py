"""FP8 training (``ExecutionOptions.fp8``): the transformer blocks' linear layers run their
GEMMs in FP8, as NVIDIA Transformer Engine (TE) recipes do inside bf16/fp16 training.

- Scaling recipes (per-tensor): 'delayed' scales each tensor by the amax history of earlier
  steps (TE ``DelayedScaling``); 'current' computes the amax of the tensor itself first (TE
  ``Float8CurrentScaling``), one more read of each quantized tensor. Micikevicius et al.,
  "FP8 Formats for Deep Learning" (2022, arXiv 2209.05433), Sec. 4.
- Peaks: ``data/fp8.json`` (sourced dense datasheet figures); GPU types without FP8 tensor cores
  (Ampere and older) refuse the option, naming it.
- Time (``fp8_time_delta``): the block GEMMs' share of a layer's bf16 time (analytic) shrinks
  by (bf16 peak x bf16 efficiency) / (fp8 peak x fp8 efficiency), the FP8 GEMM efficiency from
  the published GEMM benchmark where it gives the GPU (``analytic.GPU_FP8_MATMUL_EFFICIENCY``:
  H100 SXM 70.9 % of the FP8 peak vs 80.3 % of the bf16 peak), else the bf16 one; the
  attention core (flash) and the LM head stay in bf16 (Megatron-Core with TE keeps the output
  layer out of FP8). The quantize kernels are added at the memory bandwidth: each linear input
  in forward and each output gradient in backward read in 16 bits and written in 8 (3 B per
  element), plus a read for the amax under current scaling (2 B).
- Memory: master weights, gradients and optimizer states are those of bf16 mixed precision
  (TE keeps bf16/fp32 parameters and fp32 optimizer states); in addition every linear weight
  has cached FP8 copies, row-wise and column-wise (the transpose that backward needs), 1 B
  each (TE caches them across the microbatches of a step: ``is_first_microbatch``); the linear
  layers keep their FP8 inputs for backward instead of 16-bit ones (``fp8_stash``).
"""

from __future__ import annotations

from functools import lru_cache

from ... import revision
from ...catalog.gpus import TFLOPS, GPUType
from ...catalog.readers import check_keys, read_data
from ...dtypes import dtype_bytes
from ...errors import ValidationError
from ...profiles.analytic import (
    MEMORY_EFFICIENCY,
    calibrated,
    efficiency,
    fp8_matmul_efficiency,
)

FP8_WEIGHT_COPIES = 2
"""Cached FP8 copies per linear weight: row-wise and column-wise (transposed), 1 B each."""
QUANTIZE_BYTES = 3
"""Bytes per element of a quantize kernel: read 16 bits, write 8."""
AMAX_BYTES = 2
"""Current scaling reads each tensor once more for its amax before quantizing it."""


@lru_cache(maxsize=1)
def fp8_peaks() -> dict[str, tuple[float, str]]:
    """GPU type name -> (dense FP8 FLOP/s, source), from ``data/fp8.json``."""
    doc = read_data("fp8.json", "sailor-fp8/1")
    table = {}
    for i, entry in enumerate(doc["gpus"]):
        check_keys(entry, {"name", "fp8_tflops", "source"}, set(), f"data/fp8.json gpus[{i}]")
        table[entry["name"]] = (entry["fp8_tflops"] * TFLOPS, entry["source"])
    return table


_REGISTERED: dict[str, tuple[float, str]] = {}
"""GPU type name -> (dense FP8 FLOP/s, source) of GPUs a catalog file adds (``fp8_tflops``),
ahead of ``data/fp8.json``'s."""


def register_fp8_peak(name: str, flops: float, source: str) -> None:
    """State the dense FP8 peak of GPU type ``name`` (a ``--catalog`` GPU's ``fp8_tflops``)."""
    _REGISTERED[name] = (flops, source)
    revision.bump()  # a live Simulator drops the FP8 times it cached


def fp8_peak(gpu: GPUType) -> float:
    """Dense FP8 FLOP/s of ``gpu``; 0 when it has no FP8 tensor cores (or none was stated)."""
    return _REGISTERED.get(gpu.name, fp8_peaks().get(gpu.name, (0.0, "")))[0]


def fp8_speedup_bound(gpu: GPUType, dtype: str) -> float:
    """FP8 GEMM time / 16-bit GEMM time at the same shape: (16-bit peak / FP8 peak) / (FP8
    efficiency relative to bf16, ``analytic.fp8_matmul_efficiency``). H100 SXM: 0.5 / (70.9 /
    80.3) = 0.566, not the peak ratio 0.5."""
    return gpu.peak_flops(dtype) / fp8_peak(gpu) / fp8_matmul_efficiency(gpu)[0]


def check_fp8(recipe: str, gpu: GPUType, dtype: str) -> None:
    """Refuse FP8 on a GPU without FP8 tensor cores, naming the option."""
    if recipe != "none" and fp8_peak(gpu) <= 0:
        with_fp8 = ", ".join({**fp8_peaks(), **_REGISTERED})
        raise ValidationError(
            f"{gpu.name} has no FP8 tensor cores; train in {dtype} without fp8 "
            f"(--precision {dtype}) or use one of {with_fp8} (a --catalog GPU with FP8 states "
            "its dense fp8_tflops)",
            field="options.fp8",
        )


def fp8_gpus_problem(recipe: str, gpus) -> str | None:
    """Why none of ``gpus`` can train in FP8 (a planner's inventory), or None."""
    if recipe == "none" or any(fp8_peak(g) > 0 for g in gpus):
        return None
    names = ", ".join(g.name for g in gpus)
    return f"none of {names} has FP8 tensor cores; use bf16 or add H100/H200/B200/MI300X GPUs"


def _linear_io_widths(model, layer_id: int, tp: int) -> tuple[float, float]:
    """(sum of the block's linear-layer input widths, sum of their output widths) per token on
    one TP rank: what forward quantizes (inputs) and backward quantizes (output gradients)."""
    h, q, kv = model.hidden_size, model.q_width, model.kv_size
    ffn = model.mlp_width(layer_id) / tp
    up_out = ffn * (2 if model.gated_mlp else 1)
    inputs = h + q / tp + h + ffn  # qkv, attention output, MLP up (and gate), MLP down
    outputs = (q + 2 * kv) / tp + h + up_out + h
    return inputs, outputs


def fp8_time_delta(
    model, layer_id: int, gpu: GPUType, dtype: str, mbs: int, seq: int, tp: int, recipe: str
) -> tuple[float, float]:
    """(forward s, backward s) to add to a layer's 16-bit time when its block GEMMs run in FP8
    under ``recipe``: negative where the GEMM saving exceeds the quantize kernels. Only
    transformer blocks change; the embedding and the head stay in 16 bits."""
    if recipe == "none" or model.layer_kind(layer_id) != "block":
        return 0.0, 0.0
    peak16 = gpu.peak_flops(dtype)
    tokens = mbs * seq
    gemm_flops = 2.0 * tokens * model.active_matmul_params(layer_id, tp)
    fit = calibrated(gpu, dtype)
    fwd_eff = fit.e_max if fit else efficiency(gpu).forward
    bwd_eff = fit.e_max if fit else efficiency(gpu).backward
    saved = 1.0 - fp8_speedup_bound(gpu, dtype)
    fwd_saved = gemm_flops / (peak16 * fwd_eff) * saved
    bwd_saved = 2.0 * gemm_flops / (peak16 * bwd_eff) * saved
    per_element = QUANTIZE_BYTES + (AMAX_BYTES if recipe == "current" else 0)
    inputs, outputs = _linear_io_widths(model, layer_id, tp)
    bandwidth = gpu.memory_bandwidth * MEMORY_EFFICIENCY
    fwd_cast = tokens * inputs * per_element / bandwidth
    bwd_cast = tokens * outputs * per_element / bandwidth
    return fwd_cast - fwd_saved, bwd_cast - bwd_saved


def fp8_weight_copy_bytes(model, first: int, last: int, tp: int) -> int:
    """Bytes of the cached FP8 weight copies of layers first..last on one GPU of a TP group:
    every linear weight of the transformer blocks (not the embedding or head, not norms)."""
    total = 0
    for layer_id in range(max(first, 1), min(last, model.num_layers) + 1):
        terms = model.param_terms(layer_id, tp)
        total += sum(v for k, v in terms.items() if _is_linear_weight(k))
    return FP8_WEIGHT_COPIES * total


def _is_linear_weight(term: str) -> bool:
    if "norm" in term or term.endswith("bias") or term in ("mlp_router", "attention_sinks"):
        return False
    return term.startswith(("attention_", "mlp"))


_FP8_INPUTS = ("qkv_input", "attention_out_input", "mlp_input")
"""Stashed linear-layer inputs that TE keeps in FP8 (the down projection's input is the last
part of ``mlp_hidden``)."""


def fp8_stash(model, layer_id: int, terms: dict[str, int], dtype: str) -> dict[str, int]:
    """A block's stash terms with the linear inputs kept in FP8 (1 B per element)."""
    if model.layer_kind(layer_id) != "block":
        return terms
    e = dtype_bytes(dtype)
    out = {k: (v // e if k in _FP8_INPUTS else v) for k, v in terms.items()}
    stored = 3 if model.gated_mlp else 2  # the MLP's activation output is the last of them
    down_input = terms["mlp_hidden"] // stored
    out["mlp_hidden"] = terms["mlp_hidden"] - down_input + down_input // e
    return out
