"""CPU worker types: what a CPU rank process really is, named for it.

``cpu-<N>t`` is a rank that runs N torch intra-op threads pinned to N cores of this machine:
N consecutive cores (wrapping) of those the process may use, from the agent's first core
(``sailor worker --first-core``; ``sailor run --local`` gives worker i the core after the
previous workers' cores, so ranks spread over the machine instead of piling onto core 0).
Two types differ in what a rank can do, not in a label: a ``cpu-2t`` rank multiplies matrices
on two cores, a ``cpu-1t`` rank on one. The profiler measures each type as it runs (same
threads, same pinning), and its profile is filed under its own name; nothing CPU-side carries
a GPU name.

The agent hands a rank its type through the environment (``THREADS_ENV``, ``CPUS_ENV``); the
engine's worker applies it before building the model (``apply_from_env``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import SailorRuntimeError

THREADS_ENV = "SAILOR_RANK_THREADS"
CPUS_ENV = "SAILOR_RANK_CPUS"
_NAME = re.compile(r"^cpu-(\d+)t$")


@dataclass(frozen=True)
class CpuWorkerType:
    name: str
    threads: int
    cpus: tuple[int, ...]
    """Cores the rank is pinned to."""

    def env(self) -> dict[str, str]:
        # PASSIVE: idle OpenMP threads sleep instead of spinning. On shared cores a spinning
        # thread steals the core its sibling needs (measured on the 2-core VM under load: a
        # 1024x256x768 matmul on 2 threads took 24.5 ms spinning, 7.8 ms passive).
        return {
            THREADS_ENV: str(self.threads),
            CPUS_ENV: ",".join(map(str, self.cpus)),
            "OMP_NUM_THREADS": str(self.threads),
            "OMP_WAIT_POLICY": "PASSIVE",
        }


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_worker_type(name: str, first_core: int = 0) -> CpuWorkerType | None:
    """The CPU worker type ``name`` stands for, pinned from ``first_core`` on; None when it is
    not one (a GPU type)."""
    m = _NAME.match(name.strip().lower())
    if not m:
        return None
    threads, cpus = int(m.group(1)), usable_cpus()
    if not 1 <= threads <= len(cpus):
        raise SailorRuntimeError(
            f"{name} needs {threads} cores but this machine lets us use {len(cpus)}; use "
            f"cpu-1t..cpu-{len(cpus)}t",
            field="gpu_type",
        )
    chosen = sorted({cpus[(first_core + k) % len(cpus)] for k in range(threads)})
    return CpuWorkerType(name.lower(), threads, tuple(chosen))


def apply_from_env() -> int | None:
    """In a rank: pin to the agent's cores and set torch's threads; the thread count, or None
    when the agent set no type (then the caller keeps its default)."""
    threads = os.environ.get(THREADS_ENV)
    if not threads:
        return None
    cpus = os.environ.get(CPUS_ENV, "")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    import torch

    torch.set_num_threads(int(threads))
    return int(threads)
