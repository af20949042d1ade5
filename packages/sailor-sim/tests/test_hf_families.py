"""More Hugging Face families read from config.json: OLMo/OLMo-2, StarCoder2, Phi-2, Command-R
(cohere, cohere2), Falcon, gpt-oss, GLM-4, DBRX, StableLM, EXAONE, InternLM2; and the named
refusals of state-space and encoder-decoder models.

Each config holds the architecture fields of the model's config.json on the Hugging Face Hub,
written to a temporary folder (nothing is downloaded). Each asserted total is derived by hand
from the architecture (the arithmetic is in the comment, module by module as the model's
modeling_*.py builds them) and agrees with the figure the model's authors publish, which the
comment quotes; a count that only agreed approximately would mean a misread architecture.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sailor_sim import Job, Plan, Simulator, UnknownNameError, ValidationError, get_model
from sailor_sim.model import moe as moe_mod
from sailor_sim.simulate import timing
from sailor_sim.simulate.network import LinkCurve

OLMO2_7B = {  # allenai/OLMo-2-1124-7B
    "model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "attention_bias": False,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
    "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000,
    "tie_word_embeddings": False, "vocab_size": 100352,
}  # fmt: skip
OLMO_1B = {  # allenai/OLMo-1B-hf
    "model_type": "olmo", "attention_bias": False, "clip_qkv": None, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 2048,
    "num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16,
    "rope_theta": 10000.0, "tie_word_embeddings": True, "vocab_size": 50304,
}  # fmt: skip
STARCODER2_7B = {  # bigcode/starcoder2-7b (no tie_word_embeddings: Starcoder2Config's true)
    "model_type": "starcoder2", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 4608,
    "intermediate_size": 18432, "max_position_embeddings": 16384, "norm_epsilon": 1e-05,
    "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4,
    "residual_dropout": 0.0, "sliding_window": 4096, "use_bias": True, "vocab_size": 49152,
}  # fmt: skip
STARCODER2_15B = {  # bigcode/starcoder2-15b
    "model_type": "starcoder2", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 6144,
    "intermediate_size": 24576, "max_position_embeddings": 16384, "norm_epsilon": 1e-05,
    "num_attention_heads": 48, "num_hidden_layers": 40, "num_key_value_heads": 4,
    "sliding_window": 4096, "tie_word_embeddings": False, "use_bias": True, "vocab_size": 49152,
}  # fmt: skip
PHI_2 = {  # microsoft/phi-2
    "model_type": "phi", "attention_dropout": 0.0, "embd_pdrop": 0.0, "hidden_act": "gelu_new",
    "hidden_size": 2560, "intermediate_size": 10240, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False,
    "resid_pdrop": 0.1, "tie_word_embeddings": False, "vocab_size": 51200,
}  # fmt: skip
COMMAND_R = {  # CohereForAI/c4ai-command-r-v01
    "model_type": "cohere", "attention_bias": False, "hidden_act": "silu", "hidden_size": 8192,
    "intermediate_size": 22528, "layer_norm_eps": 1e-05, "logit_scale": 0.0625,
    "max_position_embeddings": 8192, "num_attention_heads": 64, "num_hidden_layers": 40,
    "num_key_value_heads": 64, "use_qk_norm": False, "vocab_size": 256000,
}  # fmt: skip
COMMAND_R_PLUS = {  # CohereForAI/c4ai-command-r-plus
    "model_type": "cohere", "attention_bias": False, "hidden_act": "silu", "hidden_size": 12288,
    "intermediate_size": 33792, "layer_norm_eps": 1e-05, "logit_scale": 0.8333333333333334,
    "max_position_embeddings": 8192, "num_attention_heads": 96, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "use_qk_norm": True, "vocab_size": 256000,
}  # fmt: skip
COMMAND_R7B = {  # CohereForAI/c4ai-command-r7b-12-2024
    "model_type": "cohere2", "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "layer_norm_eps": 1e-05, "logit_scale": 0.25,
    "max_position_embeddings": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "sliding_window_pattern": 4,
    "vocab_size": 256000,
}  # fmt: skip
FALCON_7B = {  # tiiuae/falcon-7b (FalconConfig's defaults fill the rest: tied, GELU, 4h)
    "model_type": "falcon", "alibi": False, "bias": False, "hidden_dropout": 0.0,
    "hidden_size": 4544, "layer_norm_epsilon": 1e-05, "multi_query": True,
    "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
    "parallel_attn": True, "vocab_size": 65024,
}  # fmt: skip
FALCON_40B = {  # tiiuae/falcon-40b
    "model_type": "falcon", "alibi": False, "bias": False, "hidden_dropout": 0.0,
    "hidden_size": 8192, "layer_norm_epsilon": 1e-05, "new_decoder_architecture": True,
    "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
    "parallel_attn": True, "vocab_size": 65024,
}  # fmt: skip
FALCON_RW_1B = {  # tiiuae/falcon-rw-1b: sequential block, ALiBi, biases
    "model_type": "falcon", "alibi": True, "bias": True, "hidden_size": 2048,
    "multi_query": False, "new_decoder_architecture": False, "num_attention_heads": 32,
    "num_hidden_layers": 24, "parallel_attn": False, "vocab_size": 50304,
}  # fmt: skip
GPT_OSS_20B = {  # openai/gpt-oss-20b
    "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "rms_norm_eps": 1e-05, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "vocab_size": 201088,
}  # fmt: skip
GPT_OSS_120B = {  # openai/gpt-oss-120b
    **GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}  # fmt: skip
GLM_4_9B = {  # THUDM/glm-4-9b-hf
    "model_type": "glm", "attention_bias": True, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 13696, "max_position_embeddings": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 2,
    "partial_rotary_factor": 0.5, "rms_norm_eps": 1.5625e-07, "tie_word_embeddings": False,
    "vocab_size": 151552,
}  # fmt: skip
GLM_4_9B_0414 = {**GLM_4_9B, "model_type": "glm4", "max_position_embeddings": 32768}
DBRX = {  # databricks/dbrx-base
    "model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40,
    "max_seq_len": 32768, "vocab_size": 100352, "tie_word_embeddings": False,
    "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_jitter_eps": 0, "moe_loss_weight": 0.05,
                   "moe_num_experts": 16, "moe_top_k": 4, "ffn_act_fn": {"name": "silu"}},
}  # fmt: skip
STABLELM_3B = {  # stabilityai/stablelm-3b-4e1t
    "model_type": "stablelm", "hidden_act": "silu", "hidden_size": 2560,
    "intermediate_size": 6912, "layer_norm_eps": 1e-05, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "partial_rotary_factor": 0.25, "tie_word_embeddings": False, "use_qkv_bias": False,
    "vocab_size": 50304,
}  # fmt: skip
STABLELM2_1_6B = {  # stabilityai/stablelm-2-1_6b
    **STABLELM_3B, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
    "use_qkv_bias": True, "vocab_size": 100352,
}  # fmt: skip
EXAONE_7_8B = {  # LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct
    "model_type": "exaone", "activation_function": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_layers": 32,
    "tie_word_embeddings": False, "vocab_size": 102400,
}  # fmt: skip
INTERNLM2_7B = {  # internlm/internlm2-7b
    "model_type": "internlm2", "bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False, "vocab_size": 92544,
}  # fmt: skip

# (name, config, total, active (MoE) or None, how the total adds up and what is published)
TOTALS = [
    # 32 x (attention 4 x 4096^2 = 67,108,864 + SwiGLU 3 x 4096 x 11,008 = 135,266,304 + two
    # 4,096 post norms + q_norm and k_norm over all 32 x 128 channels: 2 x 4,096)
    # = 32 x 202,391,552 + final norm 4,096 + untied 2 x 100,352 x 4,096 = 7,298,617,344.
    # Published: 7.3B (allenai/OLMo-2-1124-7B on the Hub).
    ("olmo2-7b", OLMO2_7B, 7_298_617_344, None),
    # 16 x (4 x 2048^2 + 3 x 2048 x 8192) = 1,073,741,824, norms without parameters, tied
    # 50,304 x 2,048 = 103,022,592: 1,176,764,416. Published: "1B" (OLMo paper, arXiv
    # 2402.00838, Table 1); a parametric norm would add 33 x 4,096.
    ("olmo-1b", OLMO_1B, 1_176_764_416, None),
    # 32 x (q, o 2 x (4608^2 + 4608) + k, v 2 x (4608 x 512 + 512) = 47,196,160 + c_fc/c_proj
    # 2 x 4608 x 18432 + 18432 + 4608 = 169,892,352 + two LayerNorms 4 x 4608) = 6,947,422,208
    # + final LayerNorm 9,216 + tied 49,152 x 4,608 = 226,492,416: 7,173,923,840.
    # Published: 7B (StarCoder2 paper, arXiv 2402.19173); 7.17B on its Hub page.
    ("starcoder2-7b", STARCODER2_7B, 7_173_923_840, None),
    # 40 x (81,802,240 attention + 302,020,608 MLP + 24,576 norms) + 12,288 + untied
    # 2 x 49,152 x 6,144: 15,957,889,024. Published: 15B (the paper), 16B on its Hub page.
    ("starcoder2-15b", STARCODER2_15B, 15_957_889_024, None),
    # 32 x (q, k, v, dense 4 x (2560^2 + 2560) = 26,224,640 + fc1, fc2 2 x 2560 x 10240 +
    # 10,240 + 2,560 = 52,441,600 + one shared LayerNorm 5,120) = 2,517,483,520 + final
    # LayerNorm 5,120 + embedding 131,072,000 + head 131,072,000 and its bias 51,200:
    # 2,779,683,840. Published: 2.7B (microsoft/phi-2 model card).
    ("phi-2", PHI_2, 2_779_683_840, None),
    # 40 x (4 x 8192^2 = 268,435,456 + 3 x 8192 x 22528 = 553,648,128 + one 8,192 norm
    # weight) + 8,192 + tied 256,000 x 8,192 = 2,097,152,000: 34,980,831,232.
    # Published: 35B (c4ai-command-r-v01 model card).
    ("command-r", COMMAND_R, 34_980_831_232, None),
    # 64 x (q, o 2 x 12288^2 + k, v 2 x 12288 x 1024 = 327,155,712 + q/k norms (96 + 8) x 128
    # = 13,312 + 3 x 12288 x 33792 = 1,245,708,288 + 12,288) + 12,288 + tied 256,000 x 12,288:
    # 103,810,674,688. Published: 104B (c4ai-command-r-plus model card).
    ("command-r-plus", COMMAND_R_PLUS, 103_810_674_688, None),
    # 32 x (2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040 + 3 x 4096 x 14336 = 176,160,768 + 4,096)
    # + 4,096 + tied 256,000 x 4,096: 8,028,033,024. Published: 8.03B on its Hub page.
    ("command-r7b", COMMAND_R7B, 8_028_033_024, None),
    # 32 x (query_key_value 4544 x (4544 + 2 x 64) = 21,229,568 + dense 4544^2 = 20,647,936 +
    # 2 x 4544 x 18176 = 165,183,488 + one LayerNorm 9,088) = 6,626,242,560 + 9,088 + tied
    # 65,024 x 4,544 = 295,469,056: 6,921,720,704. Published: 7B (tiiuae/falcon-7b card).
    ("falcon-7b", FALCON_7B, 6_921_720_704, None),
    # 60 x (query_key_value 8192 x (128 + 2 x 8) x 64 = 75,497,472 + dense 67,108,864 +
    # 2 x 8192 x 32768 = 536,870,912 + ln_attn and ln_mlp 4 x 8,192) = 40,770,600,960 +
    # 16,384 + tied 65,024 x 8,192 = 532,676,608: 41,303,293,952. Published: 40B.
    ("falcon-40b", FALCON_40B, 41_303_293_952, None),
    # 24 x (query_key_value 2048 x 6144 + 6144 + dense 2048^2 + 2048 + 2 x 2048 x 8192 +
    # 8192 + 2048 + two LayerNorms 4 x 2048 = 50,358,272) + 4,096 + tied 50,304 x 2,048:
    # 1,311,625,216. Published: 1.3B (tiiuae/falcon-rw-1b card).
    ("falcon-rw-1b", FALCON_RW_1B, 1_311_625_216, None),
    # Attention per block: q 2880 x 4096 + 4096, k and v 2 x (2880 x 512 + 512), o 4096 x 2880
    # + 2880, sinks 64 = 26,550,144 (x 24 = 0.64B). MoE per block: router 2880 x 32 + 32 and
    # 32 experts x (gate_up 2880 x 5760 + 5760 + down 2880 x 2880 + 2880 = 24,891,840) =
    # 796,631,072 (x 24 = 19.12B). Norms 24 x 5,760 + 2,880; untied 2 x 201,088 x 2,880 =
    # 1,158,266,880 (1.16B): 20,914,757,184. Active: 4 experts of 32.
    # Published (gpt-oss model card, arXiv 2508.10925, Table 1): 20.91B total, 3.61B active,
    # MLP 19.12B, attention 0.64B, embedding + unembedding 1.16B.
    ("gpt-oss-20b", GPT_OSS_20B, 20_914_757_184, 4_187_440_704),
    # 36 blocks, 128 experts: attention 36 x 26,550,144; MoE 36 x (368,768 router +
    # 128 x 24,891,840); norms 36 x 5,760 + 2,880; embeddings 1,158,266,880: 116,829,156,672.
    # Published (same table): 116.83B total, 5.13B active, MLP 114.71B, attention 0.96B.
    ("gpt-oss-120b", GPT_OSS_120B, 116_829_156_672, 5_711_982_912),
    # 40 x (q 4096^2 + 4096, k, v 2 x (4096 x 256 + 256), o 4096^2 = 35,656,192 + 3 x 4096 x
    # 13696 = 168,296,448 + 8,192) + 4,096 + untied 2 x 151,552 x 4,096: 9,399,951,360.
    # Published: 9.4B (THUDM/glm-4-9b-hf on the Hub).
    ("glm-4-9b", GLM_4_9B, 9_399_951_360, None),
    # GLM-4-0414's two more norms per block: + 40 x 2 x 4,096 = 327,680.
    ("glm-4-9b-0414", GLM_4_9B_0414, 9_400_279_040, None),
    # 40 x (Wqkv 6144 x (6144 + 2 x 1024) + out_proj 6144^2 = 88,080,384 + router 6144 x 16 +
    # 16 experts x 3 x 6144 x 10752 = 3,170,992,128 + two bias-free LayerNorms 12,288) +
    # 6,144 + untied 2 x 100,352 x 6,144: 131,596,523,520; 4 experts active: 36,469,708,800.
    # Published: 132B total, 36B active (databricks/dbrx-base model card).
    ("dbrx", DBRX, 131_596_523_520, 36_469_708_800),
    # 32 x (4 x 2560^2 + 3 x 2560 x 6912 + two LayerNorms 4 x 2560) + 5,120 + untied
    # 2 x 50,304 x 2,560: 2,795,443,200. Published: 2,795,443,200 (stablelm-3b-4e1t card).
    ("stablelm-3b", STABLELM_3B, 2_795_443_200, None),
    # 24 x (4 x 2048^2 + q/k/v biases 6,144 + 3 x 2048 x 5632 + 4 x 2048) + 4,096 + untied
    # 2 x 100,352 x 2,048: 1,644,515,328. Published: 1.6B (stablelm-2-1_6b card).
    ("stablelm-2-1.6b", STABLELM2_1_6B, 1_644_515_328, None),
    # 32 x (41,943,040 + 176,160,768 + 8,192) + 4,096 + untied 2 x 102,400 x 4,096:
    # 7,818,448,896. Published: 7.8B (the model's name and its model card).
    ("exaone-3.0-7.8b", EXAONE_7_8B, 7_818_448_896, None),
    # Llama-3-8B's blocks (32 x 218,112,000) + 4,096 + untied 2 x 92,544 x 4,096:
    # 7,737,708,544. Published: 7B class; 7.74B on internlm/internlm2-7b's Hub page.
    ("internlm2-7b", INTERNLM2_7B, 7_737_708_544, None),
]


def _write(tmp_path, name: str, cfg: dict):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def _spec(tmp_path, name: str, cfg: dict):
    return get_model(str(_write(tmp_path, name, cfg)))


def _input_embedding(spec) -> int:
    return (spec.vocab_size - spec.vocab_padding) * spec.hidden_size


@pytest.mark.parametrize("name,cfg,total,active", TOTALS, ids=[t[0] for t in TOTALS])
def test_totals_add_up_to_the_architecture(tmp_path, name, cfg, total, active):
    spec = _spec(tmp_path, name, cfg)
    assert spec.total_params() == total
    assert spec.active_params() == (total if active is None else active)
    assert spec.vocab_size % 128 == 0 and spec.unpadded_vocab_size in (None, cfg.get("vocab_size"))


def test_gpt_oss_active_counts_match_the_model_card(tmp_path):
    """The gpt-oss card's active counts leave out the input embedding (a lookup, no matmul)
    and keep the unembedding: 3.61B and 5.13B, to the printed digits."""
    for cfg, billions in ((GPT_OSS_20B, 3.61), (GPT_OSS_120B, 5.13)):
        spec = _spec(tmp_path, f"oss{billions}", cfg)
        assert round((spec.active_params() - _input_embedding(spec)) / 1e9, 2) == billions


def test_parallel_block_norms_stash_and_tp_all_reduces(tmp_path):
    """A parallel block (Phi-2) has one norm, stashes the block input and the norm output
    once for both branches, and under TP sums attention and MLP outputs before one
    all-reduce: 2 per block (1 forward, 1 backward) instead of 4; Falcon-40B's two norms
    give the MLP its own input: 3."""
    phi = _spec(tmp_path, "phi", PHI_2)
    sequential = replace(phi, parallel_block=False)
    assert "mlp_norm" not in phi.param_terms(1)
    assert sequential.params(1) - phi.params(1) == 2 * 2560  # the second LayerNorm
    mine, theirs = (m.stash_terms(1, 1, 2048, "bf16", 2) for m in (phi, sequential))
    assert set(theirs) - set(mine) == {"mlp_norm_input", "mlp_input"}
    assert sum(theirs.values()) - sum(mine.values()) == 2 * 2048 * 2560 * 2
    assert (phi.tp_all_reduces_per_block, sequential.tp_all_reduces_per_block) == (2, 4)
    link = LinkCurve(450e9, 5e-6, "test")
    args = (0, phi.head_layer_id, 1, 2048, "bf16", link, 2)
    ratio = timing.tp_comm_time(phi, *args) / timing.tp_comm_time(sequential, *args)
    assert ratio == pytest.approx((2 * 32 + 2) / (4 * 32 + 2), rel=1e-12)
    falcon40 = _spec(tmp_path, "falcon40", FALCON_40B)
    assert falcon40.param_terms(1)["mlp_norm"] == 2 * 8192  # ln_mlp beside ln_attn
    assert "mlp_input" in falcon40.stash_terms(1, 1, 2048, "bf16", 8)
    assert falcon40.tp_all_reduces_per_block == 3
    assert falcon40.tp_forward_all_reduce_share == pytest.approx(1 / 3)


PYTHIA_1B = {  # EleutherAI/pythia-1b
    "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2048,
    "intermediate_size": 8192, "max_position_embeddings": 2048, "num_attention_heads": 8,
    "num_hidden_layers": 16, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True, "vocab_size": 50304,
}  # fmt: skip


def test_gpt_neox_reads_its_parallel_residual(tmp_path):
    """GPTNeoXLayer adds attention and MLP, each behind its own LayerNorm, to the same input
    when use_parallel_residual is true (Hugging Face's default; Pythia): 3 TP all-reduces per
    block (the summed outputs once, each norm's input gradient once); without it the block
    is sequential (4). Parameters are the same two norms either way: Pythia-1B stays at its
    published 1,011,781,632."""
    pythia = _spec(tmp_path, "pythia", PYTHIA_1B)
    assert (pythia.parallel_block, pythia.parallel_norms) == (True, 2)
    assert pythia.tp_all_reduces_per_block == 3
    assert pythia.total_params() == 1_011_781_632
    default = {k: v for k, v in PYTHIA_1B.items() if k != "use_parallel_residual"}
    assert _spec(tmp_path, "default", default).parallel_block
    sequential = _spec(tmp_path, "seq", {**PYTHIA_1B, "use_parallel_residual": False})
    assert not sequential.parallel_block and sequential.tp_all_reduces_per_block == 4
    assert sequential.total_params() == pythia.total_params()
    assert "mlp_norm_input" not in pythia.stash_terms(1, 1, 2048, "bf16", 2)
    assert "mlp_norm_input" in sequential.stash_terms(1, 1, 2048, "bf16", 2)


def test_non_parametric_norms_hold_nothing(tmp_path):
    olmo = _spec(tmp_path, "olmo", OLMO_1B)
    assert olmo.param_terms(1)["attention_norm"] == olmo.param_terms(1)["mlp_norm"] == 0
    assert olmo.param_terms(olmo.head_layer_id)["final_norm"] == 0
    affine = replace(olmo, norm_affine=True)  # LayerNorm weight and bias: 2 x 2048 each
    assert affine.total_params() - olmo.total_params() == (2 * 16 + 1) * 2 * 2048
    assert not olmo.simulated_only_features  # the zoo builds parameter-free norms


def test_whole_projection_qk_norms_split_with_tp_and_reduce_their_statistics(tmp_path):
    """OLMo-2's q_norm/k_norm hold a weight per q and k channel (TP splits them with the
    heads) and, normalising across heads a TP group splits, all-reduce per-token statistics:
    two small all-reduces per block more than Command-R+'s per-head norms of the same size."""
    olmo2 = _spec(tmp_path, "olmo2", OLMO2_7B)
    assert olmo2.param_terms(1)["attention_qk_norm"] == 4096 + 4096
    assert olmo2.param_terms(1, 8)["attention_qk_norm"] == 1024
    per_head = replace(olmo2, qk_norm_kind="per_head")
    assert per_head.params(1, 8) == olmo2.params(1, 8)
    link = LinkCurve(450e9, 5e-6, "test")
    args = (0, olmo2.head_layer_id, 1, 4096, "bf16", link, 8)
    extra = timing.tp_comm_time(olmo2, *args) - timing.tp_comm_time(per_head, *args)
    one = 2 * 7 / 8 * (4096 * 8) / link.bandwidth(4096 * 8 / 8) + 2 * 7 * link.latency_s
    assert extra == pytest.approx(2 * 32 * one, rel=1e-9)
    cmdr_plus = _spec(tmp_path, "cmdr+", COMMAND_R_PLUS)
    assert cmdr_plus.param_terms(1)["attention_qk_norm"] == (96 + 8) * 128
    # the runtime's zoo builds both kinds, and OLMo-2's norms after attention and MLP
    assert olmo2.post_norms and not cmdr_plus.post_norms
    assert not olmo2.simulated_only_features and not cmdr_plus.simulated_only_features


def test_norms_after_attention_and_mlp_exclude_the_other_layouts(tmp_path):
    """Post-norms (OLMo-2) hold and stash what pre-norms do; combined with sandwich norms or
    a parallel block they describe no model, and are refused naming the field."""
    olmo2 = _spec(tmp_path, "olmo2", OLMO2_7B)
    pre = replace(olmo2, post_norms=False)
    assert olmo2.total_params() == pre.total_params()
    assert olmo2.stash_terms(1, 1, 2048, "bf16", 2) == pre.stash_terms(1, 1, 2048, "bf16", 2)
    for other in ({"sandwich_norm": True}, {"parallel_block": True}):
        with pytest.raises(ValidationError, match="post_norms") as e:
            replace(olmo2, **other)
        assert e.value.field == "post_norms"


def test_sinks_head_bias_and_expert_biases(tmp_path):
    oss = _spec(tmp_path, "oss", GPT_OSS_20B)
    terms = oss.param_terms(1, 8)
    assert terms["attention_sinks"] == 64 // 8
    # per expert: gate/up biases 2 x 2880 split by TP, the down bias replicated
    assert terms["mlp_experts_bias"] == 32 * (2 * 2880 // 8 + 2880)
    assert terms["mlp_router_bias"] == 32
    # an expert-parallel rank holds its experts' biases with their weights
    held = moe_mod.routed_expert_params(oss, 1, 1, 1)
    assert held == 32 * 24_891_840
    assert moe_mod.experts_held(oss, 1, 1, 1, 4) == held // 4
    from sailor_sim.simulate.features.fp8 import _is_linear_weight

    assert not _is_linear_weight("attention_sinks")  # no FP8 copy of 64 scalars
    phi = _spec(tmp_path, "phi", PHI_2)
    assert phi.param_terms(phi.head_layer_id, 4)["lm_head_bias"] == 51200 // 4
    # a vocabulary padded to 51,072 rows: the bias's 72 padding rows are left out of the
    # total as the matrices' are, so 200 fewer tokens remove 200 x (2 x 2560 + 1)
    padded = _spec(tmp_path, "phi-odd", {**PHI_2, "vocab_size": 51000})
    assert padded.vocab_size == 51072 and padded.vocab_padding == 72
    assert phi.total_params() - padded.total_params() == 200 * (2 * 2560 + 1)


@pytest.mark.parametrize(
    "name,cfg,tp",
    [
        ("olmo2-7b", OLMO2_7B, 4),
        ("starcoder2-7b", STARCODER2_7B, 4),
        ("phi-2", PHI_2, 2),
        ("command-r7b", COMMAND_R7B, 8),
        ("falcon-7b", FALCON_7B, 1),  # 71 heads: no TP degree above 1 divides them
        ("falcon-40b", FALCON_40B, 8),
        ("gpt-oss-20b", GPT_OSS_20B, 8),
        ("glm-4-9b", GLM_4_9B, 2),
        ("dbrx", DBRX, 8),
        ("stablelm-2-1.6b", STABLELM2_1_6B, 4),
        ("exaone-3.0-7.8b", EXAONE_7_8B, 8),
        ("internlm2-7b", INTERNLM2_7B, 8),
        ("olmo-1b", OLMO_1B, 2),
    ],
)
def test_each_family_simulates(tmp_path, name, cfg, tp):
    path = _write(tmp_path, name, cfg)
    job = Job.create(str(path), 32, 2048, "bf16")
    plan = Plan.uniform(job, "H100-80", "us-central1-a", pp=2, dp=2, tp=tp)
    estimate = Simulator().estimate(job, plan)
    assert 0 < estimate.iteration_time_s < float("inf")
    assert (estimate.time_breakdown_s["tp_comm"] > 0) == (tp > 1)
    assert estimate.peak_memory_bytes > 0
    # the runtime's model zoo refuses what it does not build, naming it
    spec = job.model
    features = spec.simulated_only_features
    assert ("attention_sinks" in features) == spec.attention_sinks
    assert "parallel_block" not in features and "lm_head_bias" not in features  # built


# (config, a size field it needs, that field's name in the error)
MISSING = [
    (OLMO2_7B, "intermediate_size", "intermediate_size"),
    (STARCODER2_7B, "num_key_value_heads", None),  # optional: GQA defaults to MHA
    (STARCODER2_7B, "hidden_size", "hidden_size"),
    (PHI_2, "vocab_size", "vocab_size"),
    (COMMAND_R, "num_hidden_layers", "num_hidden_layers"),
    (FALCON_40B, "num_attention_heads", "num_attention_heads"),
    (GPT_OSS_20B, "num_local_experts", "num_local_experts"),
    (GLM_4_9B, "max_position_embeddings", "max_position_embeddings"),
    (DBRX, "d_model", "d_model"),
    (EXAONE_7_8B, "num_layers", "num_layers"),
    (INTERNLM2_7B, "intermediate_size", "intermediate_size"),
]


@pytest.mark.parametrize(
    "cfg,key,field", MISSING, ids=[f"{c['model_type']}-{k}" for c, k, _ in MISSING]
)
def test_a_missing_size_field_is_named(tmp_path, cfg, key, field):
    cut = {k: v for k, v in cfg.items() if k != key}
    if field is None:  # documented default: read, not refused
        assert _spec(tmp_path, "cut", cut).num_kv_heads == cut["num_attention_heads"]
        return
    with pytest.raises(ValidationError, match=f"needs '{field}'") as e:
        _spec(tmp_path, "cut", cut)
    assert e.value.field == field


@pytest.mark.parametrize(
    "cfg,key,value,field",
    [
        (OLMO2_7B, "hidden_size", "4096", "hidden_size"),
        (STARCODER2_7B, "use_bias", "true", "use_bias"),
        (PHI_2, "num_key_value_heads", 8.5, "num_key_value_heads"),
        (FALCON_40B, "num_kv_heads", True, "num_kv_heads"),
        (FALCON_7B, "parallel_attn", 1, "parallel_attn"),
        (GPT_OSS_20B, "num_experts_per_tok", 33, "moe.top_k"),
        (COMMAND_R_PLUS, "use_qk_norm", "yes", "use_qk_norm"),
        (DBRX, "ffn_config", [], "ffn_config"),
        (DBRX, "ffn_config", {**DBRX["ffn_config"], "moe_num_experts": 0},
         "ffn_config.moe_num_experts"),
        (STABLELM_3B, "use_parallel_residual", "false", "use_parallel_residual"),
        # sizes no model has: a hidden_size of 10^30 printed 3e26 s per iteration, exit 0
        (STABLELM_3B, "hidden_size", 10**30, "hidden_size"),
        (PHI_2, "vocab_size", 2**40, "vocab_size"),
        (PHI_2, "intermediate_size", 2**40, "ffn_hidden_size"),
        (STABLELM_3B, "max_position_embeddings", 10**12, "max_seq_len"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_type_is_named(tmp_path, cfg, key, value, field):
    with pytest.raises(ValidationError) as e:
        _spec(tmp_path, "bad", {**cfg, key: value})
    assert e.value.field == field


@pytest.mark.parametrize(
    "cfg,key,value",
    [
        (PHI_2, "qk_layernorm", True),
        (COMMAND_R, "attention_bias", True),
        (FALCON_40B, "parallel_attn", False),
        (GPT_OSS_20B, "attention_bias", False),
        (INTERNLM2_7B, "bias", True),
        (STARCODER2_7B, "hidden_act", "silu"),
        (DBRX, "ffn_config", {**DBRX["ffn_config"], "ffn_act_fn": {"name": "gelu"}}),
    ],
)
def test_layouts_the_accounting_lacks_are_refused_by_name(tmp_path, cfg, key, value):
    with pytest.raises(ValidationError) as e:
        _spec(tmp_path, "odd", {**cfg, key: value})
    assert e.value.field.split(".")[0] == key


def test_exaone_without_its_tie_flag_is_refused(tmp_path):
    """EXAONE's config class is remote code, its default unknown here: the flag must be
    written rather than guessed (2.4B ties, 7.8B does not)."""
    cut = {k: v for k, v in EXAONE_7_8B.items() if k != "tie_word_embeddings"}
    with pytest.raises(ValidationError, match="tie_word_embeddings") as e:
        _spec(tmp_path, "exaone", cut)
    assert e.value.field == "tie_word_embeddings"


def test_defaults_the_configs_leave_out_are_the_config_classes(tmp_path):
    # Starcoder2Config ties the embeddings; FalconConfig ties them, uses GELU, 4 x hidden
    # and 2048 positions; Falcon-7B's multi_query means one K and one V head.
    assert _spec(tmp_path, "sc7", STARCODER2_7B).tie_word_embeddings
    falcon = _spec(tmp_path, "f7", FALCON_7B)
    assert falcon.tie_word_embeddings and falcon.num_kv_heads == 1
    assert falcon.ffn_hidden_size == 4 * 4544 and falcon.max_seq_len == 2048
    assert falcon.parallel_block and falcon.block_norms == 1
    rw = _spec(tmp_path, "rw", FALCON_RW_1B)
    assert rw.position == "alibi" and not rw.parallel_block and rw.block_norms == 2


@pytest.mark.parametrize(
    "model_type,kind",
    [
        ("mamba", "state-space"),
        ("mamba2", "state-space"),
        ("falcon_mamba", "state-space"),
        ("jamba", "state-space"),
        ("recurrent_gemma", "state-space"),
        ("t5", "encoder-decoder"),
        ("bart", "encoder-decoder"),
    ],
)
def test_non_transformer_families_are_refused_with_why(tmp_path, model_type, kind):
    cfg = {"model_type": model_type, "hidden_size": 4096, "num_hidden_layers": 64}
    with pytest.raises(ValidationError, match=kind) as e:
        _spec(tmp_path, model_type, cfg)
    assert e.value.field == "model_type"
    assert "decoder-only" in str(e.value)
    assert not isinstance(e.value, UnknownNameError)  # not the generic "not supported"


def test_an_unknown_model_type_still_lists_the_supported_families(tmp_path):
    with pytest.raises(UnknownNameError, match="olmo2.*gpt_oss") as e:
        _spec(tmp_path, "xlnet", {**OLMO2_7B, "model_type": "xlnet"})
    assert e.value.field == "model_type"
