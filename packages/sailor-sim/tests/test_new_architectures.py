"""Architectures beyond the dense GPT/LLaMA block, read from their Hugging Face config.json:
mixture-of-experts (Mixtral, Qwen-MoE, DeepSeek-V3 with latent attention), explicit head
widths (Gemma, Qwen3), Gemma-2's sandwich norms, ALiBi (BLOOM, MPT) and squared ReLU
(Nemotron). Parameter counts are checked against the figures the model authors publish.

The configs hold the architecture fields of each model's config.json on the Hugging Face Hub
(written to a temporary folder; nothing is downloaded).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sailor_sim import ValidationError, get_model

MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "vocab_size": 129280,
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "head_dim": 128,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "num_hidden_layers": 48,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}
QWEN15_MOE_A27B = {
    "model_type": "qwen2_moe",
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 24,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 1,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}
GEMMA_7B = {
    "model_type": "gemma",
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "head_dim": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 28,
    "max_position_embeddings": 8192,
    "vocab_size": 256000,
}
GEMMA2_9B = {
    "model_type": "gemma2",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "head_dim": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "num_hidden_layers": 42,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "vocab_size": 256000,
}
QWEN3_8B = {
    "model_type": "qwen3",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "head_dim": 128,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 36,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}
BLOOM_176B = {
    "model_type": "bloom",
    "hidden_size": 14336,
    "n_head": 112,
    "n_layer": 70,
    "vocab_size": 250880,
}
MPT_7B = {
    "model_type": "mpt",
    "d_model": 4096,
    "n_heads": 32,
    "n_layers": 32,
    "expansion_ratio": 4,
    "max_seq_len": 2048,
    "vocab_size": 50432,
    "no_bias": True,
    "attn_config": {"alibi": True},
}
MINITRON_8B = {
    "model_type": "nemotron",
    "hidden_act": "relu2",
    "hidden_size": 4096,
    "intermediate_size": 16384,
    "head_dim": 128,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 4096,
    "partial_rotary_factor": 0.5,
    "tie_word_embeddings": False,
    "vocab_size": 256000,
}


def _spec(tmp_path, name: str, cfg: dict):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return get_model(str(folder / "config.json"))


def _embedding_params(spec) -> int:
    rows = spec.vocab_size - spec.vocab_padding
    return rows * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)


# (name, config, published total, source); exact where the source prints every digit.
EXACT_TOTALS = [
    ("mixtral", MIXTRAL_8X7B, 46_702_792_704, "mistral.ai/news/mixtral-of-experts: 46.7B"),
    ("bloom", BLOOM_176B, 176_247_271_424, "huggingface.co/bigscience/bloom model card"),
    ("mpt-alibi", MPT_7B, 6_649_286_656, "catalog MPT-7B (llm-foundry)"),
]


@pytest.mark.parametrize(
    "name,cfg,published,source", EXACT_TOTALS, ids=[c[0] for c in EXACT_TOTALS]
)
def test_totals_against_published_counts(tmp_path, name, cfg, published, source):
    assert _spec(tmp_path, name, cfg).total_params() == published, source


def test_non_embedding_counts_printed_in_the_gemma_reports(tmp_path):
    # Gemma (arXiv 2403.08295) Table 2 and Gemma 2 (arXiv 2408.00118) Table 2 print
    # non-embedding and embedding parameters to the digit (Gemma's embedding figure counts
    # 128 padding rows: 256128 x 3072).
    gemma = _spec(tmp_path, "gemma7b", GEMMA_7B)
    assert gemma.total_params() - _embedding_params(gemma) == 7_751_248_896
    assert gemma.head_dim == 256 and gemma.q_width == 4096 != gemma.hidden_size
    gemma2 = _spec(tmp_path, "gemma2", GEMMA2_9B)
    assert gemma2.total_params() - _embedding_params(gemma2) == 8_324_201_984
    assert _embedding_params(gemma2) == 917_504_000


def test_qk_norms_stash_their_inputs(tmp_path):
    """Qwen3's per-head q/k RMSNorms need their inputs in backward: q and k before the norms
    are stashed beside the normed ones the attention keeps (bytes of q + k per token and GPU
    of a TP group, in the training dtype); a model without q/k norms has no such term."""
    qwen3 = _spec(tmp_path, "qwen3", QWEN3_8B)
    terms = qwen3.stash_terms(1, 2, 4096, "bf16", tp=4, flash_attention=True)
    q_plus_k = 2 * 4096 * (qwen3.q_width + qwen3.kv_size) // 4 * 2
    assert terms["qk_norm_input"] == terms["query_key"] == q_plus_k
    plain = dataclasses.replace(qwen3, qk_norm=False)
    assert "qk_norm_input" not in plain.stash_terms(1, 2, 4096, "bf16", tp=4, flash_attention=True)


def test_post_norms_stash_their_inputs(tmp_path):
    """Gemma-2's norms after attention and after the MLP, and BLOOM's norm after the
    embedding, read tensors every TP rank holds whole (the all-reduced outputs; the looked-up
    embeddings): each keeps one (b, s, h) input for backward, split by sequence parallelism."""
    from sailor_sim import ExecutionOptions
    from sailor_sim.spec.options import stash_bytes

    gemma2 = _spec(tmp_path, "gemma2", GEMMA2_9B)
    sbh_e = 2 * 4096 * gemma2.hidden_size * 2  # mbs 2, 4096 tokens, bf16
    terms = gemma2.stash_terms(1, 2, 4096, "bf16", tp=4, flash_attention=True)
    assert terms["attention_post_norm_input"] == terms["mlp_post_norm_input"] == sbh_e
    args = (gemma2, 1, 2, 4096, "bf16", 4)
    plain = stash_bytes(*args, ExecutionOptions(), True)
    split = stash_bytes(*args, ExecutionOptions(sequence_parallel=True), True)
    without = dataclasses.replace(gemma2, sandwich_norm=False)
    assert plain - stash_bytes(without, *args[1:], ExecutionOptions(), True) == 2 * sbh_e
    assert (
        split - stash_bytes(without, *args[1:], ExecutionOptions(sequence_parallel=True), True)
        == 2 * sbh_e // 4
    )
    bloom = _spec(tmp_path, "bloom", BLOOM_176B)
    embedding = bloom.stash_terms(0, 1, 2048, "bf16", tp=8)
    assert embedding["embedding_norm_input"] == 2048 * bloom.hidden_size * 2


def test_selective_op_matmuls_are_as_wide_as_the_heads(tmp_path):
    """Qwen3-8B's queries are 32 x 128 = 4096 wide on a 4096 hidden state, Gemma-7B's
    16 x 256 = 4096 on 3072: the q projection and the attention output matmul are as wide as
    the heads, not as the hidden state."""
    from sailor_sim.spec.options import block_matmuls

    gemma = _spec(tmp_path, "gemma7b", GEMMA_7B)
    q, k, v, o = block_matmuls(gemma, 2)[:4]
    assert q == (4096 // 2, 4096) and o == (3072, 4096)


def test_qwen3_dense_and_moe_against_the_model_cards(tmp_path):
    # huggingface.co/Qwen/Qwen3-8B: 8.2B total, 6.95B non-embedding.
    dense = _spec(tmp_path, "qwen3", QWEN3_8B)
    assert round(dense.total_params() / 1e9, 1) == 8.2
    assert round((dense.total_params() - _embedding_params(dense)) / 1e9, 2) == 6.95
    assert dense.param_terms(1)["attention_qk_norm"] == 2 * 128
    # huggingface.co/Qwen/Qwen3-30B-A3B: 30.5B total, 3.3B activated, 29.9B non-embedding.
    moe = _spec(tmp_path, "qwen3moe", QWEN3_30B_A3B)
    assert round(moe.total_params() / 1e9, 1) == 30.5
    assert round((moe.total_params() - _embedding_params(moe)) / 1e9, 1) == 29.9
    assert moe.active_params() / 1e9 == pytest.approx(3.3, abs=0.06)
    # huggingface.co/Qwen/Qwen1.5-MoE-A2.7B: 14.3B in total.
    qwen15 = _spec(tmp_path, "qwen15moe", QWEN15_MOE_A27B)
    assert round(qwen15.total_params() / 1e9, 1) == 14.3
    assert qwen15.moe.shared_expert_gate and qwen15.moe.shared_ffn == 5632


def test_mixtral_and_deepseek_v3_total_and_active(tmp_path):
    mixtral = _spec(tmp_path, "mixtral", MIXTRAL_8X7B)
    assert round(mixtral.active_params() / 1e9, 1) == 12.9  # mistral.ai: 12.9B active
    # DeepSeek-V3 technical report (arXiv 2412.19437), abstract: 671B total, 37B activated;
    # the 14B multi-token-prediction module is extra (685B on the Hub).
    v3 = _spec(tmp_path, "dsv3", DEEPSEEK_V3)
    assert int(v3.total_params() / 1e9) == 671
    assert int(v3.active_params() / 1e9) == 37
    assert v3.mla is not None and not v3.is_moe_block(3) and v3.is_moe_block(4)
    assert "mlp_experts" not in v3.param_terms(1) and "mlp_router_bias" in v3.param_terms(61)


def test_moe_flops_count_the_routed_experts_only(tmp_path):
    mixtral = _spec(tmp_path, "mixtral", MIXTRAL_8X7B)
    terms = mixtral.param_terms(1)
    dense_equivalent = terms["attention_qkv"] + terms["attention_out"] + terms["mlp_router"]
    top2 = terms["mlp_experts"] * 2 // 8
    flops = mixtral.forward_flops(1, 1, 4096)
    core = mixtral.attention_core_flops(1, 4096)
    assert flops == pytest.approx(2 * 4096 * (dense_equivalent + top2) + core)
    # TP splits experts like a dense MLP; the router stays whole
    assert mixtral.param_terms(1, 8)["mlp_experts"] * 8 == terms["mlp_experts"]
    assert mixtral.param_terms(1, 8)["mlp_router"] == terms["mlp_router"]


def test_moe_stash_grows_with_top_k_and_capacity(tmp_path):
    from dataclasses import replace

    mixtral = _spec(tmp_path, "mixtral", MIXTRAL_8X7B)
    base = mixtral.activation_stash_bytes(1, 1, 4096, "bf16", flash_attention=True)
    top1 = replace(mixtral, moe=replace(mixtral.moe, top_k=1))
    assert top1.activation_stash_bytes(1, 1, 4096, "bf16", flash_attention=True) < base
    capped = replace(mixtral, moe=replace(mixtral.moe, capacity_factor=1.25))
    assert capped.activation_stash_bytes(1, 1, 4096, "bf16", flash_attention=True) > base
    assert capped.forward_flops(1, 1, 4096) > mixtral.forward_flops(1, 1, 4096)


def test_alibi_and_squared_relu_have_no_extra_parameters(tmp_path):
    bloom = _spec(tmp_path, "bloom", BLOOM_176B)
    assert bloom.position == "alibi" and "position_embeddings" not in bloom.param_terms(0)
    assert bloom.param_terms(0)["embedding_norm"] == 2 * 14336
    minitron = _spec(tmp_path, "minitron", MINITRON_8B)
    assert minitron.mlp == "relu2" and not minitron.gated_mlp
    assert minitron.param_terms(1)["mlp"] == 2 * 4096 * 16384  # up and down only
    assert minitron.q_width == 48 * 128
    # squared ReLU stores its input and output, like GELU
    assert minitron.stash_terms(1, 1, 4096, "bf16")["mlp_hidden"] == 4096 * 16384 * 2 * 2


def test_moe_configs_refuse_what_is_not_modelled(tmp_path):
    with pytest.raises(ValidationError) as e:
        _spec(tmp_path, "sparse2", {**QWEN3_30B_A3B, "decoder_sparse_step": 2})
    assert e.value.field == "decoder_sparse_step"
    with pytest.raises(ValidationError) as e:
        _spec(tmp_path, "topk", {**MIXTRAL_8X7B, "num_experts_per_tok": 9})
    assert e.value.field == "moe.top_k"
    with pytest.raises(ValidationError) as e:
        _spec(
            tmp_path,
            "noexperts",
            {k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"},
        )
    assert e.value.field == "num_local_experts"


CONFIGS = Path(__file__).resolve().parents[3] / "examples" / "configs"


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma-3-1b", "OPT-350M"])
def test_cached_stash_terms_equal_each_layers_own(name):
    """``ModelSpec.stash_terms`` is cached per layer shape (kind, MoE or dense MLP): every
    layer id of a model with dense and MoE blocks (DeepSeek-V3's first three are dense), an
    embedding and a head gets what its own computation gives, and callers get their own dict."""
    from sailor_sim import get_model

    source = CONFIGS / name / "config.json"
    model = get_model(str(source) if source.is_file() else name)
    for layer in range(model.num_layer_ids):
        for mbs, tp, flash in ((1, 1, False), (2, 1, True), (4, 2, False)):
            if model.tp_problem(tp):
                continue
            own = model._stash_terms(layer, mbs, 1024, "bf16", tp, flash)
            assert model.stash_terms(layer, mbs, 1024, "bf16", tp, flash) == own, (layer, mbs)
    if model.moe is not None:  # the dense and the MoE blocks differ: one cache entry each
        assert model.stash_terms(1, 1, 1024, "bf16") != model.stash_terms(
            model.num_layers, 1, 1024, "bf16"
        )
    mine = model.stash_terms(1, 1, 1024, "bf16")
    mine["extra"] = 1
    assert "extra" not in model.stash_terms(1, 1, 1024, "bf16")


def test_deepseek_v3s_mtp_module_is_said_to_be_left_out(tmp_path):
    """num_nextn_predict_layers was dropped silently: an estimate of DeepSeek-V3 did not say
    that its ~11.6B-parameter MTP module (and its FLOPs and memory) were not counted."""
    import sailor_sim

    v3 = _spec(tmp_path, "dsv3", DEEPSEEK_V3)
    assert v3.unmodelled_mtp_layers == 1
    e = sailor_sim.estimate(DEEPSEEK_V3, "H100-80", gbs=64, tp=8, pp=16, dp=8, seq=4096,
                            dtype="bf16", options={"expert_parallel": 8})  # fmt: skip
    (note,) = [n for n in e.notes if "num_nextn_predict_layers" in n]
    assert "left out" in note and "~11.6B parameters" in note
    job = sailor_sim.Job.from_proto(e.job.to_proto())  # the count travels with the model
    assert job.model.unmodelled_mtp_layers == 1
    without = {k: v for k, v in DEEPSEEK_V3.items() if k != "num_nextn_predict_layers"}
    plain = sailor_sim.estimate(without, "H100-80", gbs=64, tp=8, pp=16, dp=8, seq=4096,
                                dtype="bf16", options={"expert_parallel": 8})  # fmt: skip
    assert not any("multi-token" in n for n in plain.notes)
    with pytest.raises(ValidationError) as err:
        get_model({**DEEPSEEK_V3, "num_nextn_predict_layers": "1"})
    assert err.value.field == "num_nextn_predict_layers"


MISTRAL_7B_V01 = {  # mistralai/Mistral-7B-v0.1: every layer attends within 4096 tokens
    "model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_a_sliding_window_timed_as_full_attention_is_said(tmp_path):
    """sliding_window was dropped silently: Mistral-7B-v0.1 at 16384 tokens was timed as
    full causal attention with no word that its layers attend within 4096 tokens."""
    import sailor_sim

    def notes(cfg, seq):
        e = sailor_sim.estimate(cfg, "H100-80", gbs=8, tp=8, seq=seq)
        return [n for n in e.notes if "sliding window" in n]

    (note,) = notes(MISTRAL_7B_V01, 16384)
    assert "4096-token sliding window" in note and "over-counted" in note
    assert notes(MISTRAL_7B_V01, 4096) == []  # within the window: exact
    off = {**MISTRAL_7B_V01, "model_type": "qwen2", "use_sliding_window": False}
    assert notes(off, 16384) == [] and get_model(off).unmodelled_sliding_window == 0
    with pytest.raises(ValidationError) as err:
        get_model({**MISTRAL_7B_V01, "sliding_window": "4096"})
    assert err.value.field == "sliding_window"
