"""What GPUs this node has: detected CUDA devices, or a declared type and count (emulation)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from sailor_sim import SailorSimError, get_gpu, get_zone

from ..errors import RegistrationError

MAX_GPUS_PER_NODE = 64
"""No node sold today has more; more is a typo or a hostile registration."""


@dataclass(frozen=True)
class NodeGpus:
    gpu_type: str
    count: int
    memory_bytes: int
    zone: str

    def __post_init__(self) -> None:
        try:
            gpu = get_gpu(self.gpu_type)
            get_zone(self.zone)
        except SailorSimError as exc:
            raise RegistrationError(str(exc), field="gpus") from None
        object.__setattr__(self, "gpu_type", gpu.name)
        if not 1 <= self.count <= MAX_GPUS_PER_NODE:
            raise RegistrationError(
                f"count {self.count} is impossible; a node has 1..{MAX_GPUS_PER_NODE} GPUs",
                field="gpus.count",
            )
        # A declared memory above twice the catalog's is not that GPU type.
        if self.memory_bytes < 0 or self.memory_bytes > 2 * gpu.memory_bytes:
            raise RegistrationError(
                f"{self.memory_bytes} bytes is impossible for a {gpu.name} "
                f"({gpu.memory_bytes} bytes in the catalog); send 0 for the catalog value",
                field="gpus.memory_bytes",
            )
        if self.memory_bytes == 0:
            object.__setattr__(self, "memory_bytes", gpu.memory_bytes)

    def to_proto(self):
        from ..proto import agent_pb2

        return agent_pb2.GpuInfo(
            gpu_type=self.gpu_type,
            count=self.count,
            memory_bytes=self.memory_bytes,
            zone=self.zone,
        )

    @classmethod
    def from_proto(cls, msg) -> NodeGpus:
        return cls(msg.gpu_type, msg.count, msg.memory_bytes, msg.zone)

    def describe(self) -> str:
        return f"{self.count}x {self.gpu_type}@{self.zone}"


def _catalog_name(smi_name: str, memory_mib: int) -> str:
    """nvidia-smi's name -> catalog type (``sailor_profiler.devices.catalog_gpu_type``: GH200
    is not an H200, L40S is not an L4, a 32 GB V100 is not the catalog's 16 GB one)."""
    from sailor_profiler import DeviceError, catalog_gpu_type

    try:
        return catalog_gpu_type(smi_name, memory_mib * 2**20)
    except DeviceError as exc:
        raise RegistrationError(str(exc), field="gpu_type") from None


def detect_cuda() -> tuple[str, int, int] | None:
    """(catalog type, count, memory bytes) of this node's CUDA GPUs, or None without any.
    nvidia-smi first (no CUDA context); else torch's view (ROCm builds, containers without
    nvidia-smi)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return _detect_torch()
    rows = [line.rsplit(",", 1) for line in out.strip().splitlines() if line.strip()]
    if not rows:
        return None
    name, mem = rows[0][0].strip(), int(float(rows[0][1]))
    return _catalog_name(name, mem), len(rows), 0


def _detect_torch() -> tuple[str, int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return _catalog_name(props.name, props.total_memory // 2**20), torch.cuda.device_count(), 0


def node_gpus(gpu_type: str | None, count: int | None, zone: str) -> NodeGpus:
    """Declared GPUs when a type is given (emulation), else detected CUDA GPUs."""
    if gpu_type is not None and not gpu_type.strip():
        raise RegistrationError(
            "is empty; name the device type (cpu-<N>t or a GPU type), or leave --gpu-type out "
            "to detect CUDA GPUs",
            field="--gpu-type",
        )
    if gpu_type:
        return NodeGpus(gpu_type, count if count is not None else 1, 0, zone)
    found = detect_cuda()
    if found is None:
        raise RegistrationError(
            "no CUDA GPU found; declare the GPUs to emulate, e.g. --gpu-type CPU --gpus 1",
            field="gpu_type",
        )
    detected_type, detected_count, _ = found
    return NodeGpus(detected_type, count or detected_count, 0, zone)
