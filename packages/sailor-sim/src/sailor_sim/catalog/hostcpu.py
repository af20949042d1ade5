"""The dense peak FLOP/s of this machine's CPU cores: the MFU denominator of the local CPU
worker types (``cpu-Nt``: N torch threads pinned to N cores of the machine the run is on).

The catalog's ``cpu-Nt`` peaks are placeholders for the analytic fallback (a local run
profiles the type as it runs), so an MFU over them is not a utilization: a bf16 run on a core
with AVX-512 BF16 measured 280 %. The peak here is physical, from what the CPU declares:
clock x FLOPs per cycle of the widest matmul instruction its flags name, per core. Where a
microarchitecture executes that instruction at half rate (AMD Zen 4 double-pumps 512-bit
FMAs) the figure is an upper bound, so an MFU over it never exceeds what the core can do.

FLOPs per cycle per core (one FMA = 2 FLOPs):
- fp32, AVX-512F: two 512-bit FMA units x 16 lanes x 2 = 64 (Intel Xeon Scalable, Intel 64
  and IA-32 Architectures Optimization Reference Manual, Sec. 2.2/17.1: two FMA ports);
- fp32, AVX2 + FMA: two 256-bit FMA units x 8 lanes x 2 = 32 (Haswell and later, Zen 2+);
- fp32, SSE only: 4 lanes x 2 (one mul + one add port) = 8;
- bf16, AVX-512 BF16 (VDPBF16PS: 32 bf16 products summed pairwise into 16 fp32 per 512-bit
  instruction): twice the fp32 rate, 128;
- bf16, AMX-BF16: 1024 per core ("4th Gen Intel Xeon Scalable processor can perform 2048 INT8
  or 1024 BF16 operations per cycle", en.wikipedia.org/wiki/Advanced_Matrix_Extensions, citing
  Intel's "Accelerate Artificial Intelligence (AI) Workloads with Intel AMX");
- fp16 (and bf16 without those flags) computes through fp32: the fp32 rate.
The clock is the highest the kernel reports (``cpuinfo_max_freq``, else ``cpu MHz``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("avx2", 32))
"""(flag, fp32 FLOPs per cycle per core), widest first; SSE_FLOPS_PER_CYCLE without them."""
SSE_FLOPS_PER_CYCLE = 8
BF16_FLOPS_PER_CYCLE = (("amx_bf16", 1024), ("avx512_bf16", 128))
"""(flag, bf16 FLOPs per cycle per core), widest first; else the fp32 rate."""
_CPU_TYPE = re.compile(r"cpu-(\d+)t")


def flops_per_cycle(flags: set[str], dtype: str) -> int:
    """Dense FLOPs per cycle of one core with CPU ``flags`` at ``dtype`` (module docstring)."""
    fp32 = next((n for f, n in FP32_FLOPS_PER_CYCLE if f in flags), SSE_FLOPS_PER_CYCLE)
    if fp32 == 32 and "fma" not in flags:
        fp32 = 16  # AVX2 without FMA: separate multiply and add
    if dtype == "bf16":
        return max(fp32, next((n for f, n in BF16_FLOPS_PER_CYCLE if f in flags), 0))
    return fp32


def parse_cpuinfo(text: str) -> tuple[set[str], float]:
    """(flags of the first core, highest ``cpu MHz`` in Hz) of a /proc/cpuinfo text."""
    flags: set[str] = set()
    mhz = 0.0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "cpu MHz":
            try:
                mhz = max(mhz, float(value))
            except ValueError:
                continue
    return flags, mhz * 1e6


@functools.lru_cache(maxsize=1)
def _host() -> tuple[set[str], float] | None:
    try:
        flags, hz = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None
    try:  # the highest clock the core may run at, where the kernel says
        hz = max(hz, int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
                         .read_text()) * 1e3)  # fmt: skip
    except (OSError, ValueError):
        pass
    return (flags, hz) if flags and hz > 0 else None


def core_peak_flops(dtype: str) -> float | None:
    """Peak dense FLOP/s of one core of this machine at ``dtype``, or None where the CPU does
    not say (no /proc/cpuinfo)."""
    host = _host()
    if host is None:
        return None
    flags, hz = host
    return hz * flops_per_cycle(flags, dtype)


def cpu_type_peak_flops(gpu_type: str, dtype: str) -> float | None:
    """The peak of a local CPU worker type ``cpu-Nt`` (N cores of this machine), or None for
    any other type or where the CPU does not say."""
    match = _CPU_TYPE.fullmatch(gpu_type)
    core = core_peak_flops(dtype) if match else None
    return None if core is None else int(match.group(1)) * core
