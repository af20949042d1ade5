"""Compute that transfers: the hardware's matmul efficiency (a published GEMM benchmark) and
an explicit, named per-framework term fitted per execution style and GPU family."""

from __future__ import annotations

import pytest

from sailor_sim import ExecutionOptions, Job, Plan, Simulator
from sailor_sim.profiles import analytic

Z = "us-central1-a"


def _estimate(gpu: str, zero: str = "none"):
    job = Job.create("LLaMA-2-7B", 16, 4096, "bf16", "adamw", ExecutionOptions(zero=zero))
    plan = Plan.uniform(job, gpu, Z, dp=1 if zero == "none" else 2, tp=2, microbatch_size=1)
    return Simulator().estimate(job, plan).time_breakdown_s


def test_matmul_efficiency_is_the_hardware_benchmark_not_a_fit():
    """A100 SXM 271.2 / 312 and H100 SXM 794.5 / 989 TFLOP/s (MAMF table)."""
    for (family, _dtype), fit in analytic.CALIBRATION.items():
        e, source = analytic.HARDWARE_MATMUL_EFFICIENCY[family]
        assert fit.e_max == pytest.approx(e) and "Maximum Achievable Matmul" in source
    assert analytic.HARDWARE_MATMUL_EFFICIENCY["ampere"][0] == pytest.approx(0.869, abs=1e-3)
    assert analytic.HARDWARE_MATMUL_EFFICIENCY["hopper"][0] == pytest.approx(0.803, abs=1e-3)


def test_blackwell_matmul_efficiency_is_its_own_benchmark_per_gpu():
    """B200 1745 / 2250 and GB200 1822 / 2500 TFLOP/s (MAMF table): each Blackwell GPU at its
    own measured fraction of its own peak, not Hopper's and not the fp32 default."""
    from sailor_sim.catalog.gpus import GPU_CATALOG

    b200 = analytic.calibrated(GPU_CATALOG["B200"], "bf16")
    gb200 = analytic.calibrated(GPU_CATALOG["GB200"], "bf16")
    assert b200.e_max == pytest.approx(0.7756, abs=1e-4) and "B200" in b200.source
    assert gb200.e_max == pytest.approx(0.7288, abs=1e-4) and "GB200" in gb200.source
    achieved = {g: GPU_CATALOG[g].peak_flops("bf16") * f.e_max for g, f in
                (("B200", b200), ("GB200", gb200))}  # fmt: skip
    assert achieved["GB200"] == pytest.approx(1822e12, rel=1e-3)
    assert achieved["B200"] == pytest.approx(1745e12, rel=1e-3)


def test_framework_term_is_named_and_equals_its_fitted_share():
    """compute x (1 / efficiency - 1), with the committed fit of the estimate's style."""
    terms = _estimate("A100-80")
    f = analytic.FRAMEWORK_EFFICIENCY[("megatron", "ampere")]
    compute = terms["compute"] + terms["recompute"]
    assert 0 < f < 1
    assert terms["framework"] == pytest.approx(compute * (1 / f - 1), rel=1e-6)


def test_sharded_data_parallel_stages_share_one_framework_term():
    """ZeRO-2 and ZeRO-3 run in the same sharded-data-parallel framework (the runtime's FSDP2):
    one framework term, so switching between them changes only the communication; ZeRO-1
    (Megatron's distributed optimizer) keeps the Megatron style's."""
    zero1, zero2, zero3 = (_estimate("H100-80", z) for z in ("zero1", "zero2", "zero3"))
    assert zero2["framework"] == zero3["framework"]
    assert zero1["framework"] < zero2["framework"]
    share = {z: t["framework"] / (t["compute"] + t["recompute"]) for z, t in
             (("zero1", zero1), ("zero2", zero2))}  # fmt: skip
    assert share["zero1"] == pytest.approx(
        1 / analytic.FRAMEWORK_EFFICIENCY[("megatron", "hopper")] - 1
    )
    assert share["zero2"] == pytest.approx(
        1 / analytic.FRAMEWORK_EFFICIENCY[("fsdp", "hopper")] - 1
    )


def test_a_style_without_runs_on_a_family_borrows_the_styles_fit():
    """No published Megatron-style Hopper run: the Megatron framework efficiency fitted on
    Ampere transfers (software overhead), not the Hopper FSDP one."""
    saved = dict(analytic.FRAMEWORK_EFFICIENCY)
    try:
        analytic.set_framework_efficiency({("megatron", "ampere"): 0.8, ("fsdp", "hopper"): 0.5})
        assert analytic.framework_efficiency("megatron", "hopper")[0] == 0.8
        assert analytic.framework_efficiency("fsdp", "hopper")[0] == 0.5
        assert analytic.framework_efficiency("fsdp", "ampere")[0] == 0.5  # style first
        analytic.set_framework_efficiency({("fsdp", "hopper"): 0.5})
        assert analytic.framework_efficiency("megatron", "hopper")[0] == 0.5  # family next
        analytic.set_framework_efficiency({})
        assert analytic.framework_efficiency("megatron", "hopper") is None
        assert _estimate("H100-80")["framework"] == 0.0
    finally:
        analytic.set_framework_efficiency(saved)


def test_measured_profiles_carry_no_framework_term():
    job = Job.create("OPT-350M", 8, 2048, "fp32")
    plan = Plan.uniform(job, "A100-40", Z, dp=2, microbatch_size=1)
    assert Simulator().estimate(job, plan).time_breakdown_s["framework"] == 0.0


def test_trust_names_the_framework_fit_it_used():
    from sailor_sim.simulate import metrics

    job = Job.create("LLaMA-2-7B", 16, 4096, "bf16", "adamw", ExecutionOptions(zero="zero3"))
    plan = Plan.uniform(job, "H100-80", Z, dp=2, microbatch_size=1)
    estimate = Simulator().estimate(job, plan)
    (entry,) = metrics.provenance(estimate.sources, job, plan)
    f = analytic.FRAMEWORK_EFFICIENCY[("fsdp", "hopper")]
    assert f"framework efficiency {f:.2f} (fsdp/hopper)" in entry["trust"]
