"""The MFU denominator of the local CPU worker types: the cores' physical peak."""

from __future__ import annotations

from pathlib import Path

import pytest

from sailor_sim import Plan, plan_peak_flops
from sailor_sim.catalog.hostcpu import (
    core_peak_flops,
    cpu_type_peak_flops,
    flops_per_cycle,
    parse_cpuinfo,
)

XEON_SPR = {"sse2", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}
ZEN4 = {"sse2", "avx2", "fma", "avx512f", "avx512_bf16"}


@pytest.mark.parametrize(
    ("flags", "dtype", "expected"),
    [
        (XEON_SPR, "fp32", 64),
        (XEON_SPR, "bf16", 1024),  # AMX
        (ZEN4, "bf16", 128),  # AVX-512 BF16: twice the fp32 rate
        (ZEN4, "fp16", 64),  # fp16 computes through fp32
        ({"sse2", "avx2", "fma"}, "fp32", 32),
        ({"sse2", "avx2"}, "fp32", 16),  # no FMA: multiply and add apart
        ({"sse2"}, "bf16", 8),
    ],
)
def test_flops_per_cycle_follow_the_widest_instruction(flags, dtype, expected):
    assert flops_per_cycle(flags, dtype) == expected


def test_cpuinfo_gives_the_first_core_s_flags_and_the_highest_clock():
    text = "processor\t: 0\ncpu MHz\t\t: 2000.5\nflags\t\t: fpu avx2 fma\n\n" \
           "processor\t: 1\ncpu MHz\t\t: 3100.0\nflags\t\t: fpu\n"  # fmt: skip
    flags, hz = parse_cpuinfo(text)
    assert flags == {"fpu", "avx2", "fma"} and hz == pytest.approx(3.1e9)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux's /proc/cpuinfo")
def test_a_cpu_type_s_peak_is_its_cores_and_mfu_uses_it():
    one = cpu_type_peak_flops("cpu-1t", "bf16")
    assert one == core_peak_flops("bf16") and one >= core_peak_flops("fp32") > 1e9
    assert cpu_type_peak_flops("cpu-4t", "bf16") == pytest.approx(4 * one)
    assert cpu_type_peak_flops("A100-40", "bf16") is None  # GPUs keep the catalog's peak
    replica = {"tp": 1, "zone": "local", "microbatch_size": 1, "num_microbatches": 1}
    replicas = [{"gpu_type": t, **replica} for t in ("cpu-2t", "cpu-1t")]
    plan = Plan.from_dict({"stages": [{"first_layer": 0, "last_layer": 7, "replicas": replicas}]})
    assert plan_peak_flops(plan, "bf16") == pytest.approx(3 * one)
