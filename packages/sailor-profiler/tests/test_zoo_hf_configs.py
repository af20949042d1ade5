"""Zoo layers built from Hugging Face config.json models count what ModelSpec counts, and run.

Small configs of each family the reader knows (GeGLU, Q/K/V-only biases, OPT's extra position
rows, tied embeddings, padded vocabulary, parallel blocks, per-head q/k norms, whole-projection
q/k norms and norms after attention and MLP (OLMo-2), parameter-free norms), written to a
temporary folder.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from sailor_profiler.compute.measure import params_per_layer
from sailor_profiler.zoo import build_stage
from sailor_sim import get_model

BASE = {"hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 2}
CONFIGS = {
    "gemma": {
        **BASE,
        "model_type": "gemma",
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "qwen2": {
        **BASE,
        "model_type": "qwen2",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "vocab_size": 300,
    },
    "opt": {
        **BASE,
        "model_type": "opt",
        "ffn_dim": 128,
        "max_position_embeddings": 64,
        "vocab_size": 250,
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_head": 8,
        "n_layer": 2,
        "n_positions": 64,
        "vocab_size": 250,
    },
    "gpt_neox": {  # the sequential variant
        **BASE,
        "model_type": "gpt_neox",
        "use_parallel_residual": False,
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "pythia": {  # Hugging Face's default: a parallel block with two LayerNorms
        **BASE,
        "model_type": "gpt_neox",
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "qwen3": {  # heads wider than hidden / heads, per-head q/k RMSNorms
        **BASE,
        "model_type": "qwen3",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "max_position_embeddings": 64,
        "vocab_size": 256,
        "tie_word_embeddings": False,
    },
    "phi": {  # a parallel block with one LayerNorm, an LM-head bias
        **BASE,
        "model_type": "phi",
        "hidden_act": "gelu_new",
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "partial_rotary_factor": 0.5,
        "resid_pdrop": 0.0,
        "vocab_size": 256,
    },
    "gemma3_text": {  # norms after attention and MLP, per-head q/k norms, wide heads
        **BASE,
        "model_type": "gemma3_text",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "olmo": {  # LayerNorms without parameters
        **BASE,
        "model_type": "olmo",
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "olmo2": {  # q/k norms over the whole projection, norms after attention and MLP
        **BASE,
        "model_type": "olmo2",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
    "cohere-qk-norm": {  # Command-R+: a bias-free LayerNorm per q and k head
        **BASE,
        "model_type": "cohere",
        "use_qk_norm": True,
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    },
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_zoo_counts_and_runs_config_models(tmp_path, family):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[family]))
    spec = get_model(str(path))
    for tp in (1, 2):
        assert params_per_layer(spec.name, tp) == {
            i: spec.params(i, tp) for i in range(spec.num_layer_ids)
        }
    stage = build_stage(spec, 0, spec.head_layer_id, 0, 1, seed=0)
    tokens = torch.randint(0, 250, (2, 16))
    x = stage.layers["0"](tokens)
    for lid in range(1, spec.head_layer_id):
        x = stage.layers[str(lid)](x)
    loss = stage.layers[str(spec.head_layer_id)](x, tokens)
    loss.backward()
    assert torch.isfinite(loss)


def test_zoo_refuses_architectures_it_does_not_build(tmp_path):
    """A mixture-of-experts config is simulated, but the zoo has no expert layers: building it
    must fail naming the feature, not train a dense model of other counts."""
    from sailor_sim import ValidationError

    moe = {
        **BASE,
        "model_type": "mixtral",
        "intermediate_size": 128,
        "num_key_value_heads": 4,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 64,
        "vocab_size": 256,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(moe))
    with pytest.raises(ValidationError, match="does not build moe") as e:
        build_stage(get_model(str(path)), 0, 1, 0, 1, seed=0)
    assert e.value.field == "model"


def test_olmo2_block_is_the_reference_formula(tmp_path):
    """OLMo-2's block as modeling_olmo2.py computes it, written out here from the zoo's own
    weights: q and k RMS-normalised over all their channels before the heads are split out,
    then h = x + norm(attn(x)) and h + norm(mlp(h)) (norms after, not before)."""
    import torch.nn.functional as F

    from sailor_profiler.zoo.layers import _rotary

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["olmo2"]))
    spec = get_model(str(path))
    block = build_stage(spec, 1, 1, dtype=torch.float64, seed=3).layers["1"]
    for p in block.parameters():  # norm weights start at 1: make them matter
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 16, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    a, m = block.attn, block.mlp

    def rms(t, norm):  # each norm at the zoo's eps (1e-6 for q/k, 1e-5 for the others)
        return norm.weight * t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + norm.eps)

    def heads(t, n):
        return t.view(2, 16, n, spec.head_dim).transpose(1, 2)

    q = heads(rms(x @ a.q.weight.T, a.norm_q), 8)
    k = heads(rms(x @ a.k.weight.T, a.norm_k), 4).repeat_interleave(2, dim=1)
    v = heads(x @ a.v.weight.T, 4).repeat_interleave(2, dim=1)
    rope = spec.rope_base
    ctx = F.scaled_dot_product_attention(_rotary(q, rope), _rotary(k, rope), v, is_causal=True)
    h = x + rms(ctx.transpose(1, 2).reshape(2, 16, 64) @ a.o.weight.T, block.norm1)
    up = F.silu(h @ m.gate.weight.T) * (h @ m.up.weight.T)
    want = h + rms(up @ m.down.weight.T, block.norm2)
    torch.testing.assert_close(block(x), want, rtol=1e-12, atol=1e-12)


def _complex_rotary(
    x: torch.Tensor, base: float, dims: int, freq: torch.Tensor | None = None, scale: float = 1.0
) -> torch.Tensor:
    """RoFormer's rotation written as complex numbers (Su et al. 2021, Eq. 34), independently
    of the zoo's rotate-half code: channels j and j + dims/2 of a head form one complex
    number, turned by position x base^(-2j / dims) (or ``freq[j]``) and scaled by ``scale``;
    channels from ``dims`` on pass through."""
    s, half = x.shape[-2], dims // 2
    if freq is None:
        freq = base ** (-2 * torch.arange(half, dtype=torch.float64) / dims)
    magnitude = torch.full((s, half), scale, dtype=torch.float64)
    turn = torch.polar(magnitude, torch.outer(torch.arange(s, dtype=torch.float64), freq))
    z = torch.complex(x[..., :half], x[..., half:dims]) * turn
    return torch.cat([z.real, z.imag, x[..., dims:]], -1)


def test_rotary_base_and_partial_rotary_follow_the_config(tmp_path):
    """rope_theta and partial_rotary_factor reach the attention: q and k rotated on the first
    half of each head's channels at base 500,000 (before, every channel at base 10,000)."""
    import torch.nn.functional as F

    path = tmp_path / "config.json"
    cfg = {**CONFIGS["qwen2"], "rope_theta": 500000.0, "partial_rotary_factor": 0.5}
    path.write_text(json.dumps(cfg))
    spec = get_model(str(path))
    assert (spec.rope_base, spec.rotary_dims) == (500000.0, spec.head_dim // 2)
    attn = build_stage(spec, 1, 1, dtype=torch.float64).layers["1"].attn
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 16, w, dtype=torch.float64, generator=gen) for w in (64, 32, 32))

    def heads(t, n):
        return t.view(2, 16, n, spec.head_dim).transpose(1, 2)

    rot = (500000.0, spec.rotary_dims)
    hq = _complex_rotary(heads(q, 8), *rot)
    hk = _complex_rotary(heads(k, 4), *rot).repeat_interleave(2, dim=1)
    hv = heads(v, 4).repeat_interleave(2, dim=1)
    want = F.scaled_dot_product_attention(hq, hk, hv, is_causal=True)
    got = attn.context(q, k, v)
    torch.testing.assert_close(got, want.transpose(1, 2).reshape(2, 16, 64), rtol=1e-12, atol=0)


def _hf_llama3(freq: torch.Tensor, factor, low, high, trained) -> torch.Tensor:
    """LLaMA-3.1's frequencies as transformers' ``_compute_llama3_parameters`` writes them
    (vectorised; the zoo follows Meta's per-frequency loop)."""
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > trained / low, freq / factor, freq)
    smooth = (trained / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < trained / high) * ~(wavelen > trained / low)
    return torch.where(medium, smoothed, scaled)


def _hf_yarn(base, dims, factor, trained, beta_fast=32, beta_slow=1):
    """YaRN's (frequencies, cos/sin scale) as transformers' ``_compute_yarn_parameters``
    writes them: a linear ramp between the correction dimensions (floored / ceiled)."""

    def correction(rotations):
        return dims * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction(beta_fast)), 0)
    high = min(math.ceil(correction(beta_slow)), dims - 1)
    pos = base ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    ramp = torch.clamp((torch.arange(dims // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    freq = 1 / (factor * pos) * (1 - extrapolation) + 1 / pos * extrapolation
    return freq, 0.1 * math.log(factor) + 1.0


@pytest.mark.parametrize(
    "scaling",
    [
        # LLaMA-3.1's rule (head_dim 8: channel pairs kept, blended and divided at L 100)
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 100},
        # channel pairs extrapolated, ramped and interpolated at L 2000
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2000},
        {"type": "linear", "factor": 4.0},
        # Phi-3's: L = 8 at the top level, so the 16-token test sequence takes long_factor
        {"type": "su", "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 8.0]},
    ],
)  # fmt: skip
def test_rope_scaling_follows_the_config(tmp_path, scaling):
    """A config's rope_scaling reaches the attention: q and k turned by the frequencies (and
    cos/sin scale) transformers computes for it, written out here (before, every model
    trained at RoFormer's frequencies whatever its config said)."""
    import torch.nn.functional as F

    path = tmp_path / "config.json"
    cfg = {**CONFIGS["qwen2"], "rope_theta": 10000.0, "rope_scaling": scaling}
    if "long_factor" in scaling:
        cfg["original_max_position_embeddings"] = 8
    path.write_text(json.dumps(cfg))
    spec = get_model(str(path))
    dims, base = spec.rotary_dims, 10000.0
    plain = base ** (-2 * torch.arange(dims // 2, dtype=torch.float64) / dims)
    scale = 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        freq = _hf_llama3(plain, 8.0, 1.0, 4.0, 100)
        wavelen = 2 * math.pi / plain  # every branch of the rule is taken
        medium = (wavelen > 25) & (wavelen < 100)
        assert (wavelen < 25).any() and (wavelen > 100).any() and medium.any()
    elif kind == "yarn":
        freq, scale = _hf_yarn(base, dims, 4.0, 2000)
        ratio = (freq / plain).tolist()  # 1 (kept), between, 1/4 (interpolated)
        assert scale > 1 and ratio[0] == 1 and ratio[-1] == 0.25 and 0.25 < ratio[1] < 1
    elif kind == "su":  # transformers' _compute_longrope_parameters: factor 64 / 8
        long = torch.tensor(scaling["long_factor"], dtype=torch.float64)
        freq = 1.0 / (long * base ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims))
        scale = math.sqrt(1 + math.log(64 / 8) / math.log(8))
    else:
        freq = plain / 4.0
    attn = build_stage(spec, 1, 1, dtype=torch.float64).layers["1"].attn
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 16, w, dtype=torch.float64, generator=gen) for w in (64, 32, 32))

    def heads(t, n):
        return t.view(2, 16, n, spec.head_dim).transpose(1, 2)

    hq = _complex_rotary(heads(q, 8), base, dims, freq, scale)
    hk = _complex_rotary(heads(k, 4), base, dims, freq, scale).repeat_interleave(2, dim=1)
    hv = heads(v, 4).repeat_interleave(2, dim=1)
    want = F.scaled_dot_product_attention(hq, hk, hv, is_causal=True)
    got = attn.context(q, k, v)
    torch.testing.assert_close(got, want.transpose(1, 2).reshape(2, 16, 64), rtol=1e-12, atol=0)
    unscaled = {**cfg, "rope_scaling": None}
    path.write_text(json.dumps(unscaled))
    other = build_stage(get_model(str(path)), 1, 1, dtype=torch.float64).layers["1"].attn
    assert not torch.allclose(other.context(q, k, v), got)  # the scaling changed something


@pytest.mark.parametrize(
    "change,field",
    [
        ({"rope_theta": "big"}, "rope_theta"),
        ({"rope_theta": 1}, "rope_theta"),
        ({"partial_rotary_factor": 1.5}, "partial_rotary_factor"),
        ({"partial_rotary_factor": 0.375}, "rotary_fraction"),  # 3 of 8 channels: odd
    ],
)
def test_bad_rotary_fields_are_refused_naming_them(tmp_path, change, field):
    from sailor_sim import ValidationError

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["qwen2"], **change}))
    with pytest.raises(ValidationError) as e:
        get_model(str(path))
    assert e.value.field == field
