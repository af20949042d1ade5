"""Devices the profiler can run on, and how many TP ranks each kind allows.

``cpu``: every TP rank is one local process with its own CPU threads. TP degrees up to
``MAX_CPU_TP`` are allowed: beyond the core count processes only time-share, which still gives
correct memory and parameter numbers but meaningless times, so the limit is a sane process count
rather than the core count (``cpu_tp_limit``), overridable with ``SAILOR_PROFILER_MAX_CPU_TP``.
``cuda`` / ``cuda:N``: every TP rank is one GPU; ``cuda:N`` with TP = t uses GPUs N..N+t-1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import DeviceError

MAX_CPU_TP = 8


@dataclass(frozen=True)
class DeviceSpec:
    """Where to profile: 'cpu' or 'cuda', and the first CUDA index for TP rank 0."""

    kind: str
    index: int = 0

    def for_rank(self, tp_rank: int) -> str:
        """The torch device string of one TP rank."""
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index + tp_rank}"

    @property
    def backend(self) -> str:
        """torch.distributed backend for TP collectives: gloo on CPU, NCCL on GPUs."""
        return "gloo" if self.kind == "cpu" else "nccl"

    @property
    def cuda_base(self) -> int | None:
        """GPU index of TP rank 0 (None on CPU), for ``launch.run_local``."""
        return None if self.kind == "cpu" else self.index

    @property
    def label(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


def cpu_tp_limit() -> int:
    raw = os.environ.get("SAILOR_PROFILER_MAX_CPU_TP")
    return int(raw) if raw and raw.isdigit() and int(raw) > 0 else MAX_CPU_TP


def parse_device(text: str) -> DeviceSpec:
    """Parse 'cpu', 'cuda' or 'cuda:N' and check the device exists on this machine."""
    raw = text.strip().lower()
    if raw == "cpu":
        return DeviceSpec("cpu")
    if raw == "cuda" or raw.startswith("cuda:"):
        index_text = raw.partition(":")[2] or "0"
        if not index_text.isdigit():
            raise DeviceError(f"bad CUDA index in {text!r}; use cuda or cuda:N", field="device")
        index = int(index_text)
        count = cuda_device_count()
        if count == 0:
            raise DeviceError(
                f"{text!r} asked but this machine has no CUDA GPU; use --device cpu",
                field="device",
            )
        if index >= count:
            raise DeviceError(
                f"{text!r} does not exist: this machine has {count} CUDA GPU(s) "
                f"(cuda:0..cuda:{count - 1})",
                field="device",
            )
        return DeviceSpec("cuda", index)
    raise DeviceError(f"unknown device {text!r}; use cpu, cuda or cuda:N", field="device")


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_tp_fits(device: DeviceSpec, tp: int, field: str = "tp", knob: str = "TP") -> None:
    """Raise when the TP degree needs more devices than there are. ``field`` and ``knob`` name
    what asked for ``tp`` processes: `network` checks its --procs here too, whose error told
    users to "use a smaller TP", a flag that command does not have."""
    if tp < 1:
        raise DeviceError(f"{knob} must be >= 1, got {tp}", field=field)
    if device.kind == "cpu":
        limit = cpu_tp_limit()
        if tp > limit:
            raise DeviceError(
                f"{knob} {tp} exceeds the CPU limit of {limit} processes; use a smaller {knob} "
                "(or set SAILOR_PROFILER_MAX_CPU_TP)",
                field=field,
            )
        return
    available = cuda_device_count() - device.index
    if tp > available:
        raise DeviceError(
            f"{knob} {tp} needs {tp} GPUs from cuda:{device.index} but only {available} exist; "
            f"use a smaller {knob} or a lower cuda:N",
            field=field,
        )


# The device name as nvidia-smi, torch.cuda.get_device_name or rocm-smi print it -> catalog
# GPU type. Most specific first; \b keeps L4 from matching L40/L40S and A10 from A100.
_GPU_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"\bGH200\b", "GH-96"),  # Grace Hopper: not an H200 (an H100 die with 96 GB)
    (r"\bH200\b", "H200"),
    (r"\bH100\b.*\bPCIE\b", "H100-PCIe"),
    (r"\bH100\b", "H100-80"),
    (r"\bGB200\b", "GB200"),  # Grace Blackwell (NVL72); \b keeps it apart from B200
    (r"\bB200\b", "B200"),
    (r"\bA100\b", "A100"),  # 40 or 80 GB: decided by the memory
    (r"\bL40S\b", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bA10G?\b", "A10G"),
    (r"\bT4\b", "T4"),
    (r"\bV100\b", "V100-16"),
    (r"\bMI300X\b", "MI300X"),
    (r"\bRTX 3090\b", "RTX-3090"),
    (r"\bRTX 2080 TI\b", "RTX-2080"),
    (r"\bTITAN RTX\b", "Titan-RTX"),
)
MEMORY_TOLERANCE = 0.15
"""Reported memory vs the catalog's (what drivers report, within 1.5 %; ECC and driver versions
move it a little); a variant with other memory (V100 32 GB, GH200 144 GB, H100 NVL 94 GB) is
another GPU and is refused rather than filed as this one."""


def catalog_gpu_type(device_name: str, memory_bytes: int) -> str:
    """The catalog GPU type of a detected device (see ``_GPU_NAME_RULES``); ``DeviceError``
    when the name or its memory matches no catalog GPU."""
    import re

    from sailor_sim import get_gpu

    name = " ".join(device_name.upper().replace("-", " ").split())
    catalog = next((c for pattern, c in _GPU_NAME_RULES if re.search(pattern, name)), None)
    if catalog is None:
        raise DeviceError(
            f"detected GPU {device_name!r} is not in the GPU catalog; pass its type "
            "(--gpu-type) or add it to sailor-sim's data/gpus.json",
            field="gpu_type",
        )
    if catalog == "A100":
        catalog = "A100-80" if memory_bytes > 60 * 2**30 else "A100-40"
    nominal = get_gpu(catalog).memory_bytes
    if memory_bytes and abs(memory_bytes - nominal) > MEMORY_TOLERANCE * nominal:
        raise DeviceError(
            f"detected GPU {device_name!r} has {memory_bytes / 2**30:.1f} GiB but the catalog's "
            f"{catalog} has {nominal / 2**30:.1f} GiB: another variant; pass its type "
            "(--gpu-type) or add it to sailor-sim's data/gpus.json",
            field="gpu_type",
        )
    return catalog


def local_gpu_type(index: int = 0) -> str:
    """The catalog type of this machine's CUDA/ROCm device ``index`` (torch's name and memory)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return catalog_gpu_type(props.name, props.total_memory)
