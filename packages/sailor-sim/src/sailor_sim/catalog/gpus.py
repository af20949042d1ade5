"""GPUType: the hardware facts the simulator needs, and the built-in catalog (``data/gpus.json``).

Peak FLOP/s are dense (no sparsity) vendor figures; 0 means the GPU has no fast path for that
dtype (e.g. bf16 on V100), in which case fp16 tensor cores are not substituted silently.
Memory sizes are the bytes a process can address as reported by the driver where the original
Sailor configs give them, otherwise the nominal size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import revision
from ..dtypes import check_dtype
from ..errors import UnknownNameError, ValidationError
from .readers import check_keys, read_data

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
    """'sxm', 'pcie', 'superchip', 'oam' or 'cpu': selects platform-dependent overheads in the
    simulator (unknown platforms get the 'sxm' ones)."""
    source: str
    """Where the figures come from (vendor datasheet, the original Sailor configs)."""
    vendor: str = "NVIDIA"
    intra_node_link: str = ""
    """What connects the GPUs of a node (NVLink/NVSwitch generation, PCIe), in words."""
    note: str = ""
    """A caveat on the figures, if any."""

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

    def dtype_problem(self, dtype: str) -> str | None:
        """Why this GPU cannot train in ``dtype``, with the dtypes it can (the fix), or None."""
        if self.supports(dtype):
            return None
        can = [d for d in ("bf16", "fp16", "fp32") if self.supports(d)]
        return (
            f"{self.name} cannot train in {dtype} (no {dtype} tensor cores); train in "
            f"{' or '.join(can)} (--precision {can[0]}) or use another GPU type"
        )


def _gpu_from_entry(entry: dict, where: str) -> tuple[GPUType, tuple[str, ...]]:
    check_keys(entry, _GPU_REQUIRED, {"aliases", "note"}, where)
    gpu = GPUType(
        name=entry["name"],
        memory_bytes=int(entry["memory_bytes"]),
        fp32_flops=entry["fp32_tflops"] * TFLOPS,
        tf32_flops=entry["tf32_tflops"] * TFLOPS,
        bf16_flops=entry["bf16_tflops"] * TFLOPS,
        fp16_flops=entry["fp16_tflops"] * TFLOPS,
        memory_bandwidth=entry["memory_bandwidth_gbps"] * GBps,
        gpus_per_node=int(entry["gpus_per_node"]),
        intra_node_bandwidth=entry["intra_node_bandwidth_gbps"] * GBps,
        platform=entry["platform"],
        source=entry["source"],
        vendor=entry["vendor"],
        intra_node_link=entry["intra_node_link"],
        note=entry.get("note", ""),
    )
    return gpu, tuple(entry.get("aliases", ()))


_GPU_REQUIRED = {
    "name",
    "vendor",
    "memory_bytes",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp16_tflops",
    "memory_bandwidth_gbps",
    "gpus_per_node",
    "intra_node_bandwidth_gbps",
    "intra_node_link",
    "platform",
    "source",
}

GPU_CATALOG: dict[str, GPUType] = {}
GPU_ALIASES: dict[str, str] = {}


def _load_catalog() -> None:
    doc = read_data("gpus.json", "sailor-gpus/1")
    for i, entry in enumerate(doc["gpus"]):
        gpu, aliases = _gpu_from_entry(entry, f"data/gpus.json gpus[{i}]")
        GPU_CATALOG[gpu.name] = gpu
        for alias in aliases:
            GPU_ALIASES[alias.lower()] = gpu.name


def get_gpu(name: str | GPUType) -> GPUType:
    """Look a GPU type up by catalog name or alias (case-insensitive)."""
    if isinstance(name, GPUType):
        return name
    if not isinstance(name, str):
        raise UnknownNameError(f"must be a GPU type name, got {name!r:.60}", field="gpu_type")
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
    revision.bump()  # a live Simulator drops the numbers it cached for the old spec


def register_gpu_alias(alias: str, name: str) -> None:
    GPU_ALIASES[alias.lower()] = get_gpu(name).name


_load_catalog()
