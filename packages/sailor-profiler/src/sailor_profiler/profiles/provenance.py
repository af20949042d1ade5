"""Where a measurement came from: the GPU type it is filed under, and the machine details.

Profiles are keyed by a catalog GPU type (``sailor_sim.GPU_CATALOG``); ``gpu_type_for`` maps
this machine's device to it ('CPU' for the CPU, the CUDA device name otherwise), and
``--gpu-type`` overrides it (e.g. a GPU the catalog knows under another name).
"""

from __future__ import annotations

import datetime as dt
import platform
import re
import socket
import subprocess

from sailor_sim import get_gpu

from ..devices import DeviceSpec
from ..errors import DeviceError

# Patterns (regex, case-insensitive, word-bounded) of torch.cuda.get_device_name -> catalog
# name; first match wins: GH200 before H200, "L4" must not match "L40S".
_CUDA_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bGH200\b", "GH-96"),
    (r"\bH200\b", "H200"),
    (r"\bH100\b", "H100-80"),
    (r"\bA100\b.*\b80GB\b", "A100-80"),
    (r"\bA100\b", "A100-40"),
    (r"\bL4\b", "L4"),
    (r"\bT4\b", "T4"),
    (r"\bV100\b", "V100-16"),
    (r"\b3090\b", "RTX-3090"),
    (r"\b2080\b", "RTX-2080"),
    (r"\bTITAN RTX\b", "Titan-RTX"),
)


def cuda_name_to_gpu_type(name: str) -> str | None:
    for pattern, gpu in _CUDA_NAMES:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return gpu
    return None


def device_name(device: DeviceSpec) -> str:
    if device.kind == "cpu":
        return platform.processor() or platform.machine() or "cpu"
    import torch

    return torch.cuda.get_device_name(device.index)


def gpu_type_for(device: DeviceSpec, override: str | None = None) -> str:
    """The catalog GPU type to file measurements under (validated)."""
    if override is not None:  # "" is an unknown type, not "detect it"
        return get_gpu(override).name
    if device.kind == "cpu":
        return "CPU"
    name = device_name(device)
    gpu = cuda_name_to_gpu_type(name)
    if gpu is None:
        raise DeviceError(
            f"GPU {name!r} is not in the catalog; pass --gpu-type NAME (register it first)",
            field="gpu_type",
        )
    return get_gpu(gpu).name


def provenance(device: DeviceSpec, gpu_type: str, **extra) -> dict:
    """Machine, software and time of a measurement (JSON-ready)."""
    import torch

    info = {
        "gpu_type": gpu_type,
        "device": device.label,
        "device_name": device_name(device),
        "host": socket.gethostname(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if device.kind == "cuda":
        info["cuda"] = torch.version.cuda
        info["driver"] = _driver_version()
        nccl = torch.cuda.nccl.version()  # a tuple in recent torch, an int in older ones
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return {**info, **extra}


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else "unknown"
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"
