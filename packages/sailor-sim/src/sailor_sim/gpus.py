"""GPUType: the hardware facts the simulator needs, and the built-in catalog.

Peak FLOP/s are dense (no sparsity) vendor figures; 0 means the GPU has no fast path for that
dtype (e.g. bf16 on V100), in which case fp16 tensor cores are not substituted silently.
Memory sizes are the bytes a process can address as reported by the driver where the original
Sailor configs give them, otherwise the nominal size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import check_dtype
from .errors import UnknownNameError, ValidationError

GiB = 1024**3
TFLOPS = 1e12
GBps = 1e9


@dataclass(frozen=True)
class GPUType:
    name: str
    memory_bytes: int
    fp32_flops: float
    """Peak non-tensor-core fp32 FLOP/s."""
    tf32_flops: float
    """Peak TF32 tensor-core FLOP/s (0 if none); used for fp32 matmuls only when enabled."""
    bf16_flops: float
    fp16_flops: float
    memory_bandwidth: float
    """HBM/GDDR bytes/s."""
    gpus_per_node: int
    intra_node_bandwidth: float
    """Bytes/s per direction between two GPUs of one node (NVLink, or PCIe)."""
    platform: str
    """'sxm', 'pcie' or 'superchip': selects platform-dependent overheads in the simulator."""
    source: str

    def __post_init__(self) -> None:
        for field in (
            "memory_bytes",
            "fp32_flops",
            "memory_bandwidth",
            "gpus_per_node",
            "intra_node_bandwidth",
        ):
            if getattr(self, field) <= 0:
                raise ValidationError(f"must be positive, got {getattr(self, field)}", field=field)
        for field in ("tf32_flops", "bf16_flops", "fp16_flops"):
            if getattr(self, field) < 0:
                raise ValidationError(f"must be >= 0, got {getattr(self, field)}", field=field)

    def peak_flops(self, dtype: str, allow_tf32: bool = False) -> float:
        """Peak matmul FLOP/s for a training dtype; raises if the GPU lacks that dtype."""
        dtype = check_dtype(dtype)
        if dtype == "fp32":
            return max(self.fp32_flops, self.tf32_flops) if allow_tf32 else self.fp32_flops
        peak = self.bf16_flops if dtype == "bf16" else self.fp16_flops
        if peak <= 0:
            raise ValidationError(
                f"{self.name} has no {dtype} support; train in fp16 or fp32", field="dtype"
            )
        return peak

    def supports(self, dtype: str) -> bool:
        dtype = check_dtype(dtype)
        return dtype == "fp32" or (self.bf16_flops if dtype == "bf16" else self.fp16_flops) > 0


def _gpu(name, mem, fp32, tf32, bf16, fp16, bw, per_node, link, platform, source) -> GPUType:
    return GPUType(
        name,
        int(mem),
        fp32 * TFLOPS,
        tf32 * TFLOPS,
        bf16 * TFLOPS,
        fp16 * TFLOPS,
        bw * GBps,
        per_node,
        link * GBps,
        platform,
        source,
    )


_NVIDIA = "NVIDIA datasheet"
_SAILOR_MEM = "memory and GPUs per node: original Sailor basic_cluster_config.json"
GPU_CATALOG: dict[str, GPUType] = {
    g.name: g
    for g in (
        _gpu(
            "H100-80", 80 * GiB, 67, 494.7, 989.4, 989.4, 3350, 8, 450, "sxm", _NVIDIA + " (SXM5)"
        ),
        _gpu("H200", 141e9, 67, 494.7, 989.4, 989.4, 4800, 8, 450, "sxm", _NVIDIA + " (SXM)"),
        _gpu(
            "GH-96",
            102625181696,
            67,
            494.7,
            989.4,
            989.4,
            4000,
            4,
            150,
            "superchip",
            _NVIDIA + " (GH200 96 GB); " + _SAILOR_MEM + "; CSCS Clariden node: 4 GH200",
        ),
        _gpu(
            "A100-80",
            85899345920,
            19.5,
            156,
            312,
            312,
            2039,
            4,
            300,
            "sxm",
            _NVIDIA + " (SXM4); " + _SAILOR_MEM,
        ),
        _gpu(
            "A100-40",
            42338615296,
            19.5,
            156,
            312,
            312,
            1555,
            4,
            300,
            "sxm",
            _NVIDIA + " (SXM4); " + _SAILOR_MEM,
        ),
        _gpu("L4", 24 * GiB, 30.3, 60, 121, 121, 300, 8, 32, "pcie", _NVIDIA + " (GCP g2)"),
        _gpu("T4", 16 * GiB, 8.1, 0, 0, 65, 320, 4, 16, "pcie", _NVIDIA + " (GCP n1 + T4)"),
        _gpu(
            "V100-16",
            17179869184,
            15.7,
            0,
            0,
            125,
            900,
            4,
            150,
            "sxm",
            _NVIDIA + " (SXM2); " + _SAILOR_MEM,
        ),
        _gpu(
            "RTX-3090",
            25769803776,
            35.6,
            35.6,
            71,
            71,
            936,
            8,
            16,
            "pcie",
            "NVIDIA Ampere GA102 whitepaper (fp32 accumulate); " + _SAILOR_MEM,
        ),
        _gpu(
            "RTX-2080",
            11811160064,
            10.1,
            0,
            0,
            40.3,
            448,
            8,
            8,
            "pcie",
            "NVIDIA Turing whitepaper (fp32 accumulate); " + _SAILOR_MEM,
        ),
        _gpu(
            "Titan-RTX",
            25769803776,
            16.3,
            0,
            0,
            130.5,
            672,
            8,
            8,
            "pcie",
            "NVIDIA Turing whitepaper; " + _SAILOR_MEM,
        ),
        # A CPU "GPU" for local runs and tests: one process is one device.
        _gpu(
            "CPU",
            8 * GiB,
            0.1,
            0,
            0.05,
            0.05,
            20,
            8,
            5,
            "cpu",
            "emulated device for local CPU runs; the profiler measures the real numbers",
        ),
        # CPU worker types of local runs (sailor_runtime.agent.cputypes): a rank with N torch
        # threads pinned to N cores. Peaks are placeholders for the analytic fallback only; a
        # local run profiles each type as it runs and plans with the measured times.
        _gpu("cpu-1t", 8 * GiB, 0.05, 0, 0.025, 0.025, 10, 1, 5, "cpu",
             "local CPU worker, 1 thread on 1 core; the profiler measures the real numbers"),
        _gpu("cpu-2t", 8 * GiB, 0.1, 0, 0.05, 0.05, 20, 1, 5, "cpu",
             "local CPU worker, 2 threads on 2 cores; the profiler measures the real numbers"),
    )
}

GPU_ALIASES: dict[str, str] = {
    "h100": "H100-80",
    "h100-80gb": "H100-80",
    "h200": "H200",
    "h200-141": "H200",
    "gh200": "GH-96",
    "gh200-96": "GH-96",
    "a100": "A100-40",
    "a100-40gb": "A100-40",
    "a100-80gb": "A100-80",
    "v100": "V100-16",
    "v100-16gb": "V100-16",
    "rtx3090": "RTX-3090",
    "rtx2080": "RTX-2080",
    "titanrtx": "Titan-RTX",
    "titan-rtx": "Titan-RTX",
}


def get_gpu(name: str | GPUType) -> GPUType:
    """Look a GPU type up by catalog name or alias (case-insensitive)."""
    if isinstance(name, GPUType):
        return name
    exact = GPU_CATALOG.get(name)
    if exact is not None:  # the common case, kept fast for the simulator's inner loop
        return exact
    key = GPU_ALIASES.get(name.lower(), name)
    for gpu_name, gpu in GPU_CATALOG.items():
        if gpu_name.lower() == key.lower():
            return gpu
    raise UnknownNameError(
        f"unknown GPU type {name!r}; known GPU types: {', '.join(GPU_CATALOG)}", field="gpu_type"
    )


def register_gpu(gpu: GPUType) -> None:
    """Add (or replace) a GPU type, e.g. from a catalog file of a cluster's own."""
    GPU_CATALOG[gpu.name] = gpu
