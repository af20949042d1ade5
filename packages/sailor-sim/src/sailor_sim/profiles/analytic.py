"""Analytic (roofline) per-layer estimates, used when no profile entry exists.

A layer's forward time is ``max(FLOPs / (peak * efficiency), bytes / (memory bandwidth *
MEMORY_EFFICIENCY)) + KERNEL_OVERHEAD_S``; backward does twice the FLOPs (Narayanan et al. 2021,
Sec. 5.1: backward = 2x forward). The efficiency is an achieved fraction of peak per GPU type
(``COMPUTE_EFFICIENCY``), each fitted to measured per-layer times and recording its source. For
fp32 training, matmuls run on TF32 tensor cores where the GPU has them, as Megatron-LM enables
(``torch.backends.cuda.matmul.allow_tf32``); the efficiencies are relative to that peak.

Mixed precision (bf16/fp16) layers whose GPU family has a calibration on published training runs
(``data/published_runs.json``, fitted by ``bench/sim_published.py --fit`` into
``data/compute_efficiency.json``) are timed as the sum of two kinds of kernels that run one after
the other in eager PyTorch (they do not overlap):

- matmuls at ``e_max * min(1, flops_per_matmul / knee_flops)`` of the tensor-core peak, per
  (family, dtype) -- a GEMM reaches its plateau once it fills every SM for several waves; the
  published rows support no knee so far (``knee_flops`` 1 = none);
- elementwise kernels (norms, residual adds, the MLP activation, RoPE; the head's logits cast,
  log-softmax and their gradients) at ``MEMORY_EFFICIENCY`` of the memory bandwidth, their
  bytes counted from the architecture (``elementwise_bytes``). They grow with tokens x hidden,
  the matmuls with tokens x hidden^2, so they are what makes small models (MPT-125M: ~20 % of
  its time) slower per FLOP than large ones -- not the matmul size.

The file names the rows it was fitted on and the leave-one-source-out error of the fit.

TP communication is *not* part of these estimates: the simulator adds it (``tp_comm``) for every
entry whose ``includes_tp_comm`` is false.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import revision
from ..catalog.gpus import GPUType
from ..dtypes import dtype_bytes
from ..errors import ValidationError
from ..model.spec import ModelSpec

_FIT = "fit to original Sailor profiles_tmp.json, OPT-350 blocks, fp32, mbs 1-8, tp 1"


@dataclass(frozen=True)
class Efficiency:
    forward: float
    """Achieved fraction of peak matmul FLOP/s in the forward pass."""
    backward: float
    source: str


COMPUTE_EFFICIENCY: dict[str, Efficiency] = {
    "GH-96": Efficiency(0.158, 0.104, _FIT),
    "A100-40": Efficiency(0.21, 0.154, _FIT),
    "A100-80": Efficiency(0.26, 0.176, _FIT),
    "V100-16": Efficiency(0.61, 0.50, _FIT),
    "Titan-RTX": Efficiency(0.54, 0.42, _FIT),
    "RTX-2080": Efficiency(0.83, 0.635, _FIT),
    "RTX-3090": Efficiency(0.44, 0.32, _FIT),
    # No profiles in the Sailor artifacts: borrowed from the closest architecture.
    "H100-80": Efficiency(0.158, 0.104, "assumed equal to GH-96 (same Hopper SM, same peak)"),
    "H200": Efficiency(0.158, 0.104, "assumed equal to GH-96 (same Hopper SM, same peak)"),
    "L4": Efficiency(0.44, 0.32, "assumed equal to RTX-3090 (Ada/Ampere consumer SM)"),
    "T4": Efficiency(0.61, 0.50, "assumed equal to V100-16 relative to fp32 peak"),
    "CPU": Efficiency(0.5, 0.5, "placeholder for the emulated CPU device; profile it"),
}
DEFAULT_EFFICIENCY = Efficiency(0.3, 0.25, "default for GPU types without a fit")
MEMORY_EFFICIENCY = 0.7
"""Achieved fraction of peak memory bandwidth for elementwise kernels (STREAM-like)."""
KERNEL_OVERHEAD_S = 20e-6
"""Launch and framework overhead per layer and pass (~10 kernels x ~2 us)."""
ADAM_BYTES_PER_PARAM = {"fp32": 28, "bf16": 34, "fp16": 34}
"""Memory traffic of one Adam step per parameter: read p, g, m, v and write p, m, v (fp32);
mixed precision also reads the 16-bit grad and writes the 16-bit weight copy."""
SGD_BYTES_PER_PARAM = {"fp32": 16, "bf16": 22, "fp16": 22}
"""SGD with momentum: read p, g, buf and write p, buf (fp32)."""


CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "data" / "compute_efficiency.json"
GPU_FAMILY = {
    "A100": "ampere",
    "H100": "hopper",
    "H200": "hopper",
    "GH-96": "hopper",
    "B200": "blackwell",
    "GB200": "blackwell",
}
"""GPU type name prefix -> architecture family whose calibrated efficiency it shares (same SM,
same tensor-core generation), e.g. A100-40 and A100-80, or a variant such as H100-96-..."""
GEMMS_PER_BLOCK = 6
"""QKV, attention scores, attention context, attention output, MLP up, MLP down: the block's
forward FLOPs divided by this is its mean matmul size."""


@dataclass(frozen=True)
class MatmulEfficiency:
    """Achieved fraction of peak of a mixed-precision matmul of ``flops`` FLOPs."""

    e_max: float
    """Plateau efficiency of large matmuls (fraction of the dense tensor-core peak)."""
    knee_flops: float
    """Matmul size below which efficiency falls proportionally (launch/wave bound)."""
    source: str

    def at(self, flops: float) -> float:
        return self.e_max * min(1.0, flops / self.knee_flops)


_MAMF = (
    "Maximum Achievable Matmul FLOPS, bf16, best shape (stas00/ml-engineering "
    "compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison table')"
)
_MAMF_BLACKWELL = (
    f"{_MAMF}; the Blackwell rows as of stas00/ml-engineering's fork Mu-L/ml-engineering "
    "commit 330ebdd, torch 2.7.1+cu128 (B200) and 2.10.0.dev20250916+cu130 (GB200)"
)
HARDWARE_MATMUL_EFFICIENCY: dict[str, tuple[float, str]] = {
    "ampere": (271.2 / 312, f"A100 SXM 271.2 of 312 TFLOP/s: {_MAMF}"),
    "hopper": (794.5 / 989, f"H100 SXM 794.5 of 989 TFLOP/s: {_MAMF}"),
    "blackwell": (1745.0 / 2250, f"B200 SXM 1745.0 of 2250 TFLOP/s: {_MAMF_BLACKWELL}"),
}
"""GPU family -> the fraction of its dense tensor-core peak a large matmul reaches on the
hardware alone (a published GEMM benchmark, no framework in it): the calibrated matmul
efficiency. What training frameworks lose on top is ``FRAMEWORK_EFFICIENCY``. fp16 runs on the
same tensor cores at the same peak: the bf16 figure. Blackwell has no published training run in
the calibration corpus: its figure is the GEMM benchmark alone, never fitted to a training run."""
GPU_MATMUL_EFFICIENCY: dict[str, tuple[float, str]] = {
    "GB200": (1822.0 / 2500, f"GB200 SXM 1822.0 of 2500 TFLOP/s: {_MAMF_BLACKWELL}"),
}
"""GPU type name prefix -> its own measured fraction where it differs from its family's: the
GB200's Blackwell GPU is specified at a higher peak (2500 vs 2250 TFLOP/s, 1200 vs 1000 W) than
it reaches in the same benchmark (72.9 % vs the B200's 77.6 %)."""

_MAMF_FP8 = (
    "Maximum Achievable Matmul FLOPS, 'FP8 (float8_e4m3fn)' table, best shape, next to the "
    "'BF16' table of the same README (stas00/ml-engineering compute/accelerator/README.md, "
    "'Maximum Achievable Matmul FLOPS comparison table', as of the fork Mu-L/ml-engineering "
    "commit 330ebdd93ba8b41b6c8e11b6acd46d03d53ea1ec; the H100 SXM rows also in stas00's "
    "commit b9e29720eebd4aa946fa9678975385efbc90a777)"
)
GPU_FP8_MATMUL_EFFICIENCY: dict[str, tuple[float, float, str]] = {
    # H100 SXM: FP8 1402.6 of 1979 TFLOP/s (70.9 %); BF16 794.5 of 989 (80.3 %).
    "H100-80": (
        1402.6 / 1979,
        794.5 / 989,
        f"H100 SXM fp8 1402.6 of 1979, bf16 794.5 of 989 TFLOP/s: {_MAMF_FP8}",
    ),
    # H200 SXM: FP8 1453.4 of 1979 (73.4 %); its BF16 row is the H100 SXM's ('H200 is the same').
    "H200": (
        1453.4 / 1979,
        794.5 / 989,
        f"H200 SXM fp8 1453.4 of 1979 TFLOP/s, bf16 the H100 SXM row 794.5 of 989 ('H200 is "
        f"the same'): {_MAMF_FP8}",
    ),
    # B200 SXM: FP8 3432.5 of 4500 (76.3 %); BF16 1745.0 of 2250 (77.6 %).
    "B200": (
        3432.5 / 4500,
        1745.0 / 2250,
        f"B200 SXM fp8 3432.5 of 4500, bf16 1745.0 of 2250 TFLOP/s: {_MAMF_FP8}",
    ),
    # GB200 SXM: FP8 3615.6 of 5000 (72.3 %); BF16 1822.0 of 2500 (72.9 %).
    "GB200": (
        3615.6 / 5000,
        1822.0 / 2500,
        f"GB200 SXM fp8 3615.6 of 5000, bf16 1822.0 of 2500 TFLOP/s: {_MAMF_FP8}",
    ),
}
"""GPU type name prefix -> (FP8 matmul efficiency, the same table's bf16 matmul efficiency of
that GPU, source): the fraction of the dense FP8 peak an FP8 GEMM reaches in the published
benchmark, which is lower than the bf16 fraction on every GPU the table gives (FP8 GEMMs are
more bound by memory and epilogue at the same shape). Only GPUs whose own row the table has:
the catalog's GH-96 (GH200 96 GB HBM3) is not the table's GH200 (900 W, 141 GiB HBM3e, FP8
1535.0 of 1979) and MI300X has no FP8 figure; they keep their bf16 efficiency for FP8 GEMMs."""


def fp8_matmul_efficiency(gpu: GPUType) -> tuple[float, str]:
    """(FP8 GEMM efficiency relative to the GPU's bf16 GEMM efficiency, source): an FP8 GEMM
    runs at (bf16 efficiency) x this ratio of the FP8 peak, so a calibrated bf16 efficiency equal
    to the benchmark's bf16 fraction gives exactly the benchmark's FP8 fraction. 1.0 where the
    benchmark has no FP8 row for this GPU (the bf16 efficiency is used)."""
    own = next((v for p, v in GPU_FP8_MATMUL_EFFICIENCY.items() if gpu.name.startswith(p)), None)
    if own is None:
        return 1.0, "no published FP8 GEMM figure for this GPU: its bf16 matmul efficiency"
    fp8, bf16, source = own
    return fp8 / bf16, source


def load_calibration(path: Path = CALIBRATION_FILE) -> dict[tuple[str, str], MatmulEfficiency]:
    """(family, dtype) -> matmul efficiency for the families the calibration file covers:
    the hardware's (``HARDWARE_MATMUL_EFFICIENCY``), or the file's own e_max where it gives
    one (older files fitted it); empty without the file."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    out = {}
    for key, v in doc["efficiency"].items():
        fam, dtype = key.split("/")
        e_max, source = HARDWARE_MATMUL_EFFICIENCY.get(fam, (v.get("e_max"), path.name))
        if e_max is not None:
            out[(fam, dtype)] = MatmulEfficiency(e_max, v.get("knee_flops", 1.0), source)
    return out


def load_framework_efficiency(path: Path = CALIBRATION_FILE) -> dict[tuple[str, str], float]:
    """(execution style, family) -> fitted framework efficiency (``framework_efficiency``)."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    return {
        tuple(key.split("/")): float(value)
        for key, value in doc.get("framework_efficiency", {}).items()
    }


CALIBRATION: dict[tuple[str, str], MatmulEfficiency] = load_calibration()
FRAMEWORK_EFFICIENCY: dict[tuple[str, str], float] = load_framework_efficiency()
"""(style, family) -> the fraction of the hardware's compute speed a training framework of
that execution style reaches (``trust.execution_style``: 'megatron' or 'fsdp'): kernel launch
and Python overhead, synchronisation, memory-bound kernels the layer model does not count.
Fitted by ``bench/sim_published.py --fit`` on published runs; the simulator charges the rest as
the named ``framework`` term of every analytic estimate (``framework_efficiency``)."""


def framework_efficiency(style: str, family: str | None) -> tuple[float, str] | None:
    """(efficiency, which fit) for a style and GPU family: its own fit; else the style's
    fits on other families (frameworks transfer: their overhead is software); else the
    family's other style; None without any fit."""
    table = FRAMEWORK_EFFICIENCY
    if (style, family) in table:
        return table[(style, family)], f"{style}/{family}"
    same_style = [v for (s, _), v in table.items() if s == style]
    if same_style:
        return sum(same_style) / len(same_style), f"{style}/* (no {style} runs on {family})"
    same_family = [v for (_, f), v in table.items() if f == family]
    if same_family:
        return sum(same_family) / len(same_family), f"*/{family} (no {style} runs)"
    return None


def set_framework_efficiency(table: dict[tuple[str, str], float]) -> None:
    """Replace the fitted framework efficiencies (bench/sim_published.py's fit)."""
    FRAMEWORK_EFFICIENCY.clear()
    FRAMEWORK_EFFICIENCY.update(table)


def calibration_validation(path: Path = CALIBRATION_FILE) -> dict:
    """The committed calibration's validation on the published runs, as ``bench/sim_published.py
    --fit`` wrote it: 'uncalibrated', 'in_sample' and 'leave_one_source_out' summaries (mean and
    max relative error of throughput and memory, row counts); {} without the file."""
    return _validation_of(path)


def _validation_of(path: Path) -> dict:
    """The 'validation' object of a committed JSON file, parsed once per content of the file
    (a bench's ``--write`` is parsed again; reading the bytes is cheap, parsing is not); {}
    without it. Every estimate's provenance asks for it; the object is shared: read it, do not
    edit it."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    kept = _VALIDATIONS.get(str(path))
    if kept is None or kept[0] != data:
        kept = _VALIDATIONS[str(path)] = (data, json.loads(data).get("validation", {}))
    return kept[1]


_VALIDATIONS: dict[str, tuple[bytes, dict]] = {}
"""Path -> (its bytes, their validation object): the latest version read of each file."""


FEATURES_FILE = CALIBRATION_FILE.with_name("published_features.json")


def features_validation(path: Path = FEATURES_FILE) -> dict:
    """The simulator's error on the published runs that use FP8, context or expert
    parallelism (none of which the calibration corpus has), as ``bench/sim_features.py
    --write`` stored it: rows, throughput mean and worst |error|, their GPUs and features; {}
    without it. Nothing is fitted on those runs."""
    return _validation_of(path)


def set_calibration(table: dict[tuple[str, str], MatmulEfficiency]) -> None:
    """Replace the calibrated efficiencies (the fit in bench/sim_published.py tries candidates;
    build a new Simulator afterwards, since simulators cache their per-layer numbers)."""
    CALIBRATION.clear()
    CALIBRATION.update(table)


_STATED_FAMILY: dict[str, str] = {}
"""GPU type name -> architecture family a catalog file states for it (``architecture``)."""


def register_gpu_family(name: str, family: str) -> None:
    """State the architecture of GPU type ``name`` (a ``--catalog`` GPU's ``architecture``):
    its calibrated efficiencies are then the family's (an H800 or H20 is a Hopper, though
    no name prefix says so). Raises ValidationError for a family with no calibration."""
    families = sorted(set(GPU_FAMILY.values()))
    if family not in families:
        raise ValidationError(
            f"{family!r:.40} has no calibration; use one of {', '.join(families)} "
            "(the SM generation: an H800 or H20 is hopper) or leave it out (uncalibrated)",
            field="architecture",
        )
    _STATED_FAMILY[name] = family
    revision.bump()  # a live Simulator drops the times it cached


def gpu_family(gpu: GPUType) -> str | None:
    """The calibrated architecture family of ``gpu``: the one its catalog entry states, else
    the one its name's prefix names (``GPU_FAMILY``), else None (uncalibrated)."""
    stated = _STATED_FAMILY.get(gpu.name)
    if stated is not None:
        return stated
    return next((f for prefix, f in GPU_FAMILY.items() if gpu.name.startswith(prefix)), None)


def calibrated(gpu: GPUType, dtype: str) -> MatmulEfficiency | None:
    """The published-run calibration for this GPU and dtype, if there is one (fp32 runs keep
    the per-GPU fit to the Sailor profiles)."""
    family = gpu_family(gpu)
    fit = None if family is None else CALIBRATION.get((family, dtype))
    own = next((v for p, v in GPU_MATMUL_EFFICIENCY.items() if gpu.name.startswith(p)), None)
    if fit is None or own is None:
        return fit
    return MatmulEfficiency(own[0], fit.knee_flops, own[1])


def efficiency(gpu: GPUType) -> Efficiency:
    return COMPUTE_EFFICIENCY.get(gpu.name, DEFAULT_EFFICIENCY)


def matmul_size(model: ModelSpec, layer_id: int, flops: float) -> float:
    """Mean FLOPs of one matmul of this layer's forward pass (the head is one matmul)."""
    return flops / (GEMMS_PER_BLOCK if model.layer_kind(layer_id) == "block" else 1)


LOGIT_BYTES_FORWARD = 16
"""Bytes moved per logit element in the forward pass of the loss, mixed precision: write the
16-bit logits (2), cast to fp32 (read 2, write 4), log-softmax (read 4, write 4)."""
LOGIT_BYTES_BACKWARD = 18
"""... and in backward: the log-softmax gradient (read output 4, read grad 4, write 4), cast
back to 16 bits (read 4, write 2)."""


def elementwise_bytes(model: ModelSpec, layer_id: int, mbs: int, seq: int, tp: int, e: int):
    """Bytes the forward pass of a layer moves through memory-bound (non-matmul) kernels on
    one GPU of a TP group: per token, two norms (read + write h each), two residual adds
    (read 2h, write h each), the MLP activation (GELU: read + write ffn; SwiGLU: SiLU read +
    write ffn, then the product read 2 ffn, write ffn), RoPE on q and k (read + write). The
    head: the loss over the logits (``LOGIT_BYTES_FORWARD`` per element). Backward moves about
    twice as much (a gradient in and one out per saved input); the caller doubles it."""
    tokens, h = mbs * seq, model.hidden_size
    kind = model.layer_kind(layer_id)
    if kind == "head":
        return tokens * (model.vocab_size // tp) * LOGIT_BYTES_FORWARD
    if kind != "block":
        return 0
    ffn = model.mlp_width(layer_id) / tp  # MoE: the routed slots' and shared experts' width
    per_token = 4 * h + 6 * h + (5 * ffn if model.gated_mlp else 2 * ffn)
    if model.position == "rotary":
        per_token += 2 * (model.q_width + model.kv_size) // tp
    return int(tokens * per_token * e)


SCORE_PASSES_FORWARD = 4
"""Times each element of a block's (b, a, s, s) attention scores crosses HBM in the forward
pass of attention without flash: QK^T writes the scores, one fused scale-mask-softmax kernel
reads them and writes the probabilities, the context matmul reads those (Megatron-LM's
``FusedScaleMaskSoftmax``, megatron/core/fusions/fused_softmax.py). Flash attention keeps them
in on-chip memory (Dao et al. 2022, Sec. 3.2): none."""
SCORE_PASSES_BACKWARD = 6
"""... and in backward: the context matmul's backward writes the probabilities' gradient, the
softmax backward reads it and the probabilities and writes the scores' gradient, which the
QK^T backward reads twice (for dQ and dK)."""
DROPOUT_PASSES = 2
"""Attention dropout adds, each way, one read and one write of the probabilities plus one byte
of mask per element (written forward, read backward; Korthikanti et al. 2022, Sec. 4.1)."""


def score_matrix_s(model: ModelSpec, gpu: GPUType, dtype: str, mbs: int, seq: int, tp: int):
    """(forward s, backward s) one block of attention without flash spends moving its
    materialized score matrix through memory, at ``MEMORY_EFFICIENCY`` of the bandwidth: memory
    bound, and absent from matmul FLOP counts, so it is what makes such attention slower than
    flash at long sequences (it grows with s^2 while the block's matmuls grow with s); plus,
    where the layer times hold a causal flash kernel, the whole square's two GEMMs in its
    place (they compute the tiles flash skips, at the GEMM rate)."""
    elements = mbs * (model.num_heads / tp) * seq * seq
    e = dtype_bytes(dtype)
    attn_p = model.dropout if model.attention_dropout is None else model.attention_dropout
    per_way = DROPOUT_PASSES * e + 1 if attn_p > 0 else 0
    bandwidth = gpu.memory_bandwidth * MEMORY_EFFICIENCY
    # Calibrated layer times hold a causal flash kernel's core (``calibrated_times``); this
    # attention computes the whole square as two batched GEMMs instead, then masks it.
    swap = 0.0
    fit = calibrated(gpu, dtype)
    if fit is not None:
        gemms = model.attention_core_flops(mbs, seq, tp) / (gpu.peak_flops(dtype) * fit.e_max)
        swap = gemms - attention_core_s(model, gpu, dtype, mbs, seq, tp)
    forward = elements * (SCORE_PASSES_FORWARD * e + per_way) / bandwidth + swap
    backward = elements * (SCORE_PASSES_BACKWARD * e + per_way) / bandwidth + 2 * swap
    return forward, backward


def calibrated_times(
    model: ModelSpec, layer_id: int, gpu: GPUType, dtype: str, mbs: int, seq: int, tp: int, fit
) -> tuple[float, float]:
    """(forward s, backward s) with a published-run calibration: matmuls at the fitted
    efficiency plus elementwise kernels at the memory bandwidth, one after the other."""
    flops = model.forward_flops(layer_id, mbs, seq, tp)
    matmul_s = 0.0  # the embedding: a gather, no matmul
    if flops:
        gemm_rate = gpu.peak_flops(dtype) * fit.at(matmul_size(model, layer_id, flops))
        if model.layer_kind(layer_id) == "block":  # the attention core: a kernel of its own
            matmul_s = attention_core_s(model, gpu, dtype, mbs, seq, tp)
            flops -= model.attention_core_flops(mbs, seq, tp)
        matmul_s += flops / gemm_rate
    e = dtype_bytes(dtype)
    bandwidth = gpu.memory_bandwidth * MEMORY_EFFICIENCY
    fwd_bytes = elementwise_bytes(model, layer_id, mbs, seq, tp, e)
    if model.layer_kind(layer_id) == "head":
        bwd_bytes = fwd_bytes * LOGIT_BYTES_BACKWARD / LOGIT_BYTES_FORWARD
    else:
        bwd_bytes = 2 * fwd_bytes
    if model.layer_kind(layer_id) == "embedding":  # a gather: its rows in, gradients out
        fwd_bytes = bwd_bytes = 2 * mbs * seq * model.hidden_size * e
    fwd = matmul_s + fwd_bytes / bandwidth + KERNEL_OVERHEAD_S
    bwd = 2 * matmul_s + bwd_bytes / bandwidth + KERNEL_OVERHEAD_S
    return fwd, bwd


def layer_times(
    model: ModelSpec, layer_id: int, gpu: GPUType, dtype: str, mbs: int, seq: int, tp: int
) -> tuple[float, float]:
    """(forward s, backward s) of one layer on one GPU of a TP group, TP communication excluded."""
    fit = calibrated(gpu, dtype)
    if fit is not None:
        return calibrated_times(model, layer_id, gpu, dtype, mbs, seq, tp, fit)
    peak = gpu.peak_flops(dtype, allow_tf32=True)
    flops = model.forward_flops(layer_id, mbs, seq, tp)
    eff = efficiency(gpu)
    # Bytes touched: weights once, activations in and out a few times (elementwise ops).
    e = dtype_bytes(dtype)
    traffic = model.params(layer_id, tp) * e + 8 * mbs * seq * model.hidden_size * e
    mem_s = traffic / (gpu.memory_bandwidth * MEMORY_EFFICIENCY)
    fwd_compute = flops / (peak * eff.forward) if flops else 0.0  # the embedding: a gather
    bwd_compute = 2 * flops / (peak * eff.backward) if flops else 0.0
    fwd = max(fwd_compute, mem_s) + KERNEL_OVERHEAD_S
    bwd = max(bwd_compute, 2 * mem_s) + KERNEL_OVERHEAD_S
    return fwd, bwd


ATTENTION_EFFICIENCY: dict[str, tuple[float, str]] = {
    "ampere": (
        0.50,
        "FlashAttention-2 on A100: '50-73% of the theoretical maximum FLOPs/s' (Dao 2023, "
        "arXiv 2307.08691, abstract); its lower end, the backward pass's, which holds 2.5 of "
        "the 3.5 units of a training step's attention work",
    ),
    "hopper": (
        0.35,
        "FlashAttention-2 on H100: 'only 35% utilization' (Shah et al. 2024, FlashAttention-3, "
        "arXiv 2407.08608, abstract), the kernel the published Hopper runs of the corpus used",
    ),
}
"""GPU family -> the fraction of its dense 16-bit peak a causal flash attention kernel reaches
on the FLOPs it computes (``ModelSpec.causal_attention_flops``): a published kernel
benchmark, not a fit. Attention's tiles are small matmuls interleaved with the online
softmax, so they run well below a large GEMM (``HARDWARE_MATMUL_EFFICIENCY``: 0.87 and 0.80).
FlashAttention-3 reaches 0.75 on H100 (same source): a run with it is faster than this. A
family without a figure takes the lowest published one."""


def attention_efficiency(gpu: GPUType) -> tuple[float, str]:
    """(fraction of peak, source) of ``gpu``'s flash attention kernel."""
    found = ATTENTION_EFFICIENCY.get(gpu_family(gpu) or "")
    if found is not None:
        return found
    least = min(ATTENTION_EFFICIENCY.values())
    return least[0], f"no published figure for {gpu.name}: the lowest published one ({least[1]})"


def attention_flop_s(gpu: GPUType, dtype: str) -> float:
    """Achieved FLOP/s of the attention core (flash) on the FLOPs it computes: the published
    kernel figure (``ATTENTION_EFFICIENCY``) where the GPU and dtype have a published-run
    calibration, else the GPU's per-GPU forward fit as before."""
    if calibrated(gpu, dtype) is not None:
        return gpu.peak_flops(dtype, allow_tf32=True) * attention_efficiency(gpu)[0]
    return gpu.peak_flops(dtype, allow_tf32=True) * efficiency(gpu).forward


def attention_core_s(model: ModelSpec, gpu: GPUType, dtype: str, mbs: int, seq: int, tp: int):
    """Forward seconds of one block's attention core under a causal flash kernel: the tiles
    at or below the diagonal (``causal_attention_flops``) at ``attention_flop_s``."""
    return model.causal_attention_flops(mbs, seq, tp) / attention_flop_s(gpu, dtype)


def optimizer_time(params: int, gpu: GPUType, dtype: str, optimizer: str) -> float:
    """Seconds of one optimizer step over ``params`` parameters (memory bound)."""
    table = SGD_BYTES_PER_PARAM if optimizer == "sgd" else ADAM_BYTES_PER_PARAM
    return params * table[dtype] / (gpu.memory_bandwidth * MEMORY_EFFICIENCY)
