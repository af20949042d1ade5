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


def check_tp_fits(device: DeviceSpec, tp: int) -> None:
    """Raise when the TP degree needs more devices than there are."""
    if tp < 1:
        raise DeviceError(f"TP degree must be >= 1, got {tp}", field="tp")
    if device.kind == "cpu":
        limit = cpu_tp_limit()
        if tp > limit:
            raise DeviceError(
                f"TP {tp} exceeds the CPU limit of {limit} processes; use a smaller TP "
                "(or set SAILOR_PROFILER_MAX_CPU_TP)",
                field="tp",
            )
        return
    available = cuda_device_count() - device.index
    if tp > available:
        raise DeviceError(
            f"TP {tp} needs {tp} GPUs from cuda:{device.index} but only {available} exist; "
            "use a smaller TP or a lower cuda:N",
            field="tp",
        )
