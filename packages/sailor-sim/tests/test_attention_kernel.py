"""The attention core as a causal flash kernel runs it: the tiles at or below the diagonal, at
the kernel's published efficiency; attention that materializes its scores computes the whole
square as GEMMs instead (``analytic.score_matrix_s``)."""

from __future__ import annotations

import pytest

from sailor_sim.catalog.gpus import get_gpu
from sailor_sim.model.spec import FLASH_CAUSAL_TILE, causal_share
from sailor_sim.profiles import analytic, published


def test_a_causal_kernel_computes_the_tiles_at_or_below_the_diagonal() -> None:
    assert FLASH_CAUSAL_TILE == 128
    assert causal_share(100) == 1.0  # one tile: computed whole
    assert causal_share(128) == 1.0
    assert causal_share(256) == pytest.approx(3 / 4)  # 3 of 2 x 2 tiles
    assert causal_share(2048) == pytest.approx(136 / 256)
    assert causal_share(8192) == pytest.approx(65 / 128)
    assert 0.5 < causal_share(131072) < 0.5005  # tends to half
    model = published.model_spec("LLaMA-3-8B", 8192)
    # the convention (MFU) counts the whole square; the kernel does its causal share
    assert model.causal_attention_flops(2, 8192, 2) == pytest.approx(
        model.attention_core_flops(2, 8192, 2) * 65 / 128
    )


def test_the_kernel_efficiency_is_the_published_one_of_its_family() -> None:
    a100, h100, b200 = get_gpu("A100-80"), get_gpu("H100-80"), get_gpu("B200")
    assert analytic.attention_flop_s(a100, "bf16") == pytest.approx(312e12 * 0.50)
    assert analytic.attention_flop_s(h100, "bf16") == pytest.approx(989.4e12 * 0.35)
    assert "2307.08691" in analytic.attention_efficiency(a100)[1]  # FlashAttention-2
    assert "2407.08608" in analytic.attention_efficiency(h100)[1]  # FlashAttention-3's
    # below a large GEMM's on the same hardware
    for fam, (eff, _source) in analytic.ATTENTION_EFFICIENCY.items():
        assert eff < analytic.HARDWARE_MATMUL_EFFICIENCY[fam][0]
    # a family without a figure takes the lowest published one, and says so
    eff, source = analytic.attention_efficiency(b200)
    assert eff == min(e for e, _ in analytic.ATTENTION_EFFICIENCY.values())
    assert "no published figure for B200" in source
    # an uncalibrated GPU/dtype (V100, fp16) keeps its per-GPU forward fit
    v100 = get_gpu("V100-16")
    assert analytic.attention_flop_s(v100, "fp16") == pytest.approx(
        125e12 * analytic.efficiency(v100).forward
    )


def test_materialized_attention_computes_the_whole_square_as_gemms() -> None:
    """Without flash the layer time's causal kernel is replaced by the two batched GEMMs of the
    whole square (at the GEMM efficiency), on top of the score traffic."""
    model = published.model_spec("MPT-7B", 8192)
    for gpu in (get_gpu("A100-80"), get_gpu("H100-80")):
        fit = analytic.calibrated(gpu, "bf16")
        assert fit is not None
        fwd, bwd = analytic.score_matrix_s(model, gpu, "bf16", 1, 8192, 1)
        elements = model.num_heads * 8192 * 8192
        bandwidth = gpu.memory_bandwidth * analytic.MEMORY_EFFICIENCY
        traffic = elements * analytic.SCORE_PASSES_FORWARD * 2 / bandwidth  # bf16, no dropout
        gemms = model.attention_core_flops(1, 8192) / (gpu.peak_flops("bf16") * fit.e_max)
        flash = model.causal_attention_flops(1, 8192) / analytic.attention_flop_s(gpu, "bf16")
        assert fwd == pytest.approx(traffic + gemms - flash)
        back = elements * analytic.SCORE_PASSES_BACKWARD * 2 / bandwidth + 2 * (gemms - flash)
        assert bwd == pytest.approx(back)
        # and the whole block without flash is slower than with it
        layer = analytic.layer_times(model, 1, gpu, "bf16", 1, 8192, 1)
        assert layer[0] + fwd > layer[0] and layer[1] + bwd > layer[1]


def test_flash_attention_at_long_sequences_costs_what_its_causal_tiles_do() -> None:
    """Doubling the sequence of a calibrated block: its GEMMs and elementwise work double, its
    attention core (causal, at the kernel's rate) about quadruples."""
    model = published.model_spec("MPT-1B", 32768)
    h100 = get_gpu("H100-80")
    short = analytic.layer_times(model, 1, h100, "bf16", 1, 16384, 1)[0]
    long = analytic.layer_times(model, 1, h100, "bf16", 1, 32768, 1)[0]
    core = analytic.attention_core_s(model, h100, "bf16", 1, 32768, 1)
    core_short = analytic.attention_core_s(model, h100, "bf16", 1, 16384, 1)
    assert core / core_short == pytest.approx(4 * causal_share(32768) / causal_share(16384))
    overhead = analytic.KERNEL_OVERHEAD_S
    assert long - overhead == pytest.approx(2 * (short - overhead - core_short) + core)
