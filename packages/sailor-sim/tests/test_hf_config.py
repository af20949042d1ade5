"""Models from Hugging Face config.json files: published parameter counts, exactly.

The configs are the published values of each model's config.json on the Hugging Face Hub
(architecture fields as released), written to a temporary folder; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sailor_sim import (
    Job,
    RopeScaling,
    UnknownNameError,
    ValidationError,
    get_model,
    read_hf_config,
)
from sailor_sim.model.spec import model_from_json, model_wire_name

_LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

# (name, config.json, published total parameter count)
CONFIGS = [
    ("Llama-3.1-8B", _LLAMA_31_8B, 8_030_261_248),
    (
        "Mistral-7B-v0.1",
        {
            "model_type": "mistral",
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "sliding_window": 4096,
            "tie_word_embeddings": False,
            "vocab_size": 32000,
        },
        7_241_732_096,
    ),
    (
        "Qwen2.5-7B",
        {
            "model_type": "qwen2",
            "hidden_act": "silu",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "max_position_embeddings": 131072,
            "num_attention_heads": 28,
            "num_hidden_layers": 28,
            "num_key_value_heads": 4,
            "tie_word_embeddings": False,
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
        7_615_616_512,
    ),
    (
        "gemma-2b",
        {
            "model_type": "gemma",
            "head_dim": 256,
            "hidden_act": "gelu",
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "max_position_embeddings": 8192,
            "num_attention_heads": 8,
            "num_hidden_layers": 18,
            "num_key_value_heads": 1,
            "vocab_size": 256000,
        },
        2_506_172_416,
    ),
    (
        "pythia-1b",
        {
            "model_type": "gpt_neox",
            "hidden_act": "gelu",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "max_position_embeddings": 2048,
            "num_attention_heads": 8,
            "num_hidden_layers": 16,
            "rotary_pct": 0.25,
            "tie_word_embeddings": False,
            "use_parallel_residual": True,
            "vocab_size": 50304,
        },
        1_011_781_632,
    ),
    (
        "opt-125m",
        {
            "model_type": "opt",
            "activation_function": "relu",
            "do_layer_norm_before": True,
            "dropout": 0.1,
            "attention_dropout": 0.0,
            "enable_bias": True,
            "ffn_dim": 3072,
            "hidden_size": 768,
            "max_position_embeddings": 2048,
            "num_attention_heads": 12,
            "num_hidden_layers": 12,
            "vocab_size": 50272,
            "word_embed_proj_dim": 768,
        },
        125_239_296,
    ),
    (
        "gpt2",
        {
            "model_type": "gpt2",
            "activation_function": "gelu_new",
            "attn_pdrop": 0.1,
            "n_ctx": 1024,
            "n_embd": 768,
            "n_head": 12,
            "n_layer": 12,
            "n_positions": 1024,
            "resid_pdrop": 0.1,
            "vocab_size": 50257,
        },
        124_439_808,
    ),
    (
        # microsoft/Phi-3-mini-4k-instruct; the count is keras-hub's phi3_presets.py
        # ("params": 3821079552) for the same checkpoint
        "Phi-3-mini-4k",
        {
            "model_type": "phi3",
            "hidden_act": "silu",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "max_position_embeddings": 4096,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 32,
            "tie_word_embeddings": False,
            "vocab_size": 32064,
        },
        3_821_079_552,
    ),
    (
        # google/gemma-3-1b-pt; the count is keras-hub's gemma3_presets.py ("params":
        # 999885952 for gemma3_1b): 4 heads x head_dim 256 != hidden, one KV head, sandwich
        # norms and per-head q/k norms, tied embeddings
        "gemma-3-1b",
        {
            "model_type": "gemma3_text",
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "max_position_embeddings": 32768,
            "num_attention_heads": 4,
            "num_hidden_layers": 26,
            "num_key_value_heads": 1,
            "query_pre_attn_scalar": 256,
            "sliding_window": 512,
            "vocab_size": 262144,
        },
        999_885_952,
    ),
]


def _write(tmp_path, name: str, cfg: dict):
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("name,cfg,published", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_published_parameter_counts(tmp_path, name, cfg, published):
    spec = get_model(str(_write(tmp_path, name, cfg)))
    assert spec.total_params() == published
    # the padded vocabulary divides every power-of-two TP degree up to 128
    assert spec.vocab_size % 128 == 0 and spec.vocab_size - cfg["vocab_size"] < 128
    assert spec.vocab_size - spec.vocab_padding == cfg["vocab_size"]


def test_tied_head_is_counted_once_but_held_per_stage(tmp_path):
    gpt2 = next(cfg for name, cfg, _ in CONFIGS if name == "gpt2")
    spec = get_model(str(_write(tmp_path, "gpt2", gpt2)))
    held = sum(spec.params(i) for i in range(spec.num_layer_ids))
    assert spec.tie_word_embeddings
    assert held - spec.total_params() == spec.vocab_size * 768 + spec.vocab_padding * 768
    assert spec.unpadded_vocab_size == 50257 and spec.vocab_size == 50304


def test_llama_31_config_matches_the_catalog_entry(tmp_path):
    path = _write(tmp_path, "llama", _LLAMA_31_8B)
    from_file, catalog = get_model(str(path)), get_model("LLaMA-3.1-8B")
    assert from_file.name == str(path.resolve())
    for i in range(catalog.num_layer_ids):
        assert from_file.param_terms(i, 8) == catalog.param_terms(i, 8)
    # a folder holding config.json works too, and a Job round-trips through its name
    assert get_model(str(path.parent)) == from_file
    job = Job.create(str(path), 64, 8192, "bf16")
    assert Job.from_dict(job.to_dict()) == job and Job.from_proto(job.to_proto()) == job


def test_strict_reader_names_the_field(tmp_path):
    bad = dict(_LLAMA_31_8B)
    del bad["intermediate_size"]
    with pytest.raises(ValidationError, match="needs 'intermediate_size'") as e:
        read_hf_config(_write(tmp_path, "missing", bad))
    assert e.value.field == "intermediate_size"
    # t5 has its own refusal (encoder-decoder: test_hf_families.py); xlnet has none
    with pytest.raises(UnknownNameError, match="model_type 'xlnet'") as e:
        read_hf_config(_write(tmp_path, "xlnet", {**_LLAMA_31_8B, "model_type": "xlnet"}))
    assert e.value.field == "model_type"
    opt350 = {**CONFIGS[5][1], "hidden_size": 1024, "word_embed_proj_dim": 512}
    with pytest.raises(ValidationError) as e:
        read_hf_config(_write(tmp_path, "opt350", opt350))
    assert e.value.field == "word_embed_proj_dim"
    with pytest.raises(ValidationError) as e:  # no head_dim, and heads do not divide hidden
        no_head_dim = {k: v for k, v in CONFIGS[3][1].items() if k != "head_dim"}
        read_hf_config(_write(tmp_path, "gemma7", {**no_head_dim, "hidden_size": 3004}))
    assert e.value.field == "head_dim"
    with pytest.raises(ValidationError, match="does not exist") as e:
        get_model(str(tmp_path / "nowhere" / "config.json"))
    assert e.value.field == "model"
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ValidationError, match="not a readable JSON"):
        get_model(str(tmp_path / "junk.json"))


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_key_value_heads", 8.7),  # int() read 8
        ("num_key_value_heads", "8"),
        ("num_key_value_heads", True),  # int() read 1: multi-query attention
        ("tie_word_embeddings", "false"),  # bool() read True: the head counted once
        ("attention_bias", 1),
    ],
)
def test_optional_fields_are_read_as_written_or_refused(tmp_path, field, value):
    """Optional integer and true/false fields were coerced: 8.7 kv heads became 8 and the
    string "false" tied the embeddings, each a different model without a word."""
    with pytest.raises(ValidationError, match=field) as e:
        read_hf_config(_write(tmp_path, "coerced", {**_LLAMA_31_8B, field: value}))
    assert e.value.field == field
    absent = {k: v for k, v in _LLAMA_31_8B.items() if k != field}
    for i, cfg in enumerate((absent, {**absent, field: None})):  # Hugging Face's default
        assert read_hf_config(_write(tmp_path, f"default{i}", cfg)).num_layers == 32


@pytest.mark.parametrize(
    "value",
    [
        "yes",
        8.0,
        ["llama3"],
        {"factor": 8.0},  # no type: which frequencies is unknown
        {"rope_type": "llama4", "factor": 8.0},
        {"type": 3, "factor": 2.0},
        {"rope_type": "linear", "factor": "8"},
        {"rope_type": "linear", "factor": 0},
    ],
)
def test_a_rope_scaling_of_no_known_kind_is_refused(tmp_path, value):
    """``rope_scaling`` was never read, so "yes" passed as a scaled rotary model."""
    with pytest.raises(ValidationError, match="rope_scaling") as e:
        read_hf_config(_write(tmp_path, "rope", {**_LLAMA_31_8B, "rope_scaling": value}))
    assert e.value.field.startswith("rope_scaling")


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"rope_type": "default"},
        {"type": "linear", "factor": 4.0},  # the older key
        {"type": "dynamic", "factor": 2.0},
        {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
        {"rope_type": "longrope", "long_factor": [1.0] * 64, "short_factor": [1.0] * 64},
        {"type": "su", "long_factor": [2.0] * 64, "short_factor": [1.0] * 64},  # Phi-3's
        {"type": "mrope", "mrope_section": [16, 24, 24]},
        {"type": "ntk", "factor": 4},
    ],
)
def test_a_known_rope_scaling_reads_with_the_same_costs(tmp_path, value):
    """Scaled rotary frequencies change numerics, not shapes: every figure is the same."""
    scaled = read_hf_config(_write(tmp_path, "rope", {**_LLAMA_31_8B, "rope_scaling": value}))
    plain = read_hf_config(_write(tmp_path, "plain", {**_LLAMA_31_8B, "rope_scaling": None}))
    assert scaled.total_params() == plain.total_params() == CONFIGS[0][2]
    ignored = {"name": "", "rope_scaling": None}
    assert {**vars(scaled), **ignored} == {**vars(plain), **ignored}


def test_a_followed_rope_scaling_reaches_the_spec(tmp_path):
    """LLaMA-3.1's llama3 scaling as written (before, read and dropped: the zoo trained it at
    RoFormer's frequencies); transformers 5's rope_parameters too; kinds the zoo does not
    follow (LongRoPE) leave none; L defaults to max_position_embeddings (dynamic NTK)."""
    spec = read_hf_config(_write(tmp_path, "llama31", _LLAMA_31_8B))
    assert spec.rope_scaling == RopeScaling("llama3", 8.0, 8192, 1.0, 4.0)
    assert get_model("LLaMA-3.1-8B").rope_scaling == spec.rope_scaling  # the catalog's too
    v5 = {k: v for k, v in _LLAMA_31_8B.items() if k not in ("rope_scaling", "rope_theta")}
    v5["rope_parameters"] = {**_LLAMA_31_8B["rope_scaling"], "rope_theta": 500000.0}
    assert read_hf_config(_write(tmp_path, "v5", v5)).rope_scaling == spec.rope_scaling
    mrope = {"rope_type": "mrope", "mrope_section": [16, 24, 24]}  # multimodal: not followed
    cfg = {**_LLAMA_31_8B, "rope_scaling": mrope}
    assert read_hf_config(_write(tmp_path, "mrope", cfg)).rope_scaling is None
    # Phi-3-mini-128k writes L at the top level; factor = 131072 / 4096
    su = {"type": "su", "long_factor": [2.0] * 64, "short_factor": [1.5] * 64}
    cfg = {**_LLAMA_31_8B, "original_max_position_embeddings": 4096, "rope_scaling": su}
    long = read_hf_config(_write(tmp_path, "long", cfg))
    assert long.rope_scaling == RopeScaling(
        "longrope", 32.0, 4096, short_factor=(1.5,) * 64, long_factor=(2.0,) * 64
    )
    wire = model_from_json(model_wire_name(long))
    assert wire == long and hash(wire) == hash(long)
    cfg = {**_LLAMA_31_8B, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    dynamic = read_hf_config(_write(tmp_path, "dyn", cfg)).rope_scaling
    assert (dynamic.kind, dynamic.original_max_position_embeddings) == ("dynamic", 131072)
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    yarn |= {"truncate": False, "beta_fast": 16}
    got = read_hf_config(_write(tmp_path, "yarn", {**_LLAMA_31_8B, "rope_scaling": yarn}))
    assert got.rope_scaling == RopeScaling("yarn", 32.0, 4096, beta_fast=16, truncate=False)
    wire = model_from_json(model_wire_name(got))  # a server or worker builds the same model
    assert wire == got and wire.rope_scaling == got.rope_scaling


@pytest.mark.parametrize(
    "value,problem",
    [
        ({"rope_type": "llama3", "factor": 8.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn"}, "factor"),
        ({"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "truncate"),
        ({"rope_type": "yarn", "factor": 4.0, "beta_fast": -1}, "beta_fast"),
        ({"rope_type": "linear", "factor": 4.0, "mscale": "x"}, "mscale"),
        ({"rope_type": "longrope", "long_factor": [1.0] * 64}, "short_factor"),
        ({"rope_type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, "channel"),
        ({"rope_type": "longrope", "long_factor": [1] * 64, "short_factor": ["a"] * 64}, "short"),
        ({"rope_type": "linear", "factor": 2.0, "long_factor": [1.0]}, "belong to longrope"),
    ],
)
def test_a_followed_rope_scaling_with_bad_fields_is_refused(tmp_path, value, problem):
    with pytest.raises(ValidationError, match=problem) as e:
        read_hf_config(_write(tmp_path, "rope", {**_LLAMA_31_8B, "rope_scaling": value}))
    assert e.value.field.startswith("rope_scaling")


def test_catalog_has_the_common_sizes_with_published_counts():
    published = {
        "LLaMA-2-7B": 6_738_415_616,
        "LLaMA-2-13B": 13_015_864_320,
        "LLaMA-2-70B": 68_976_648_192,
        "LLaMA-3.1-8B": 8_030_261_248,
        "LLaMA-3.1-70B": 70_553_706_496,
        "Mistral-7B": 7_241_732_096,
        "Qwen2.5-7B": 7_615_616_512,
        "MPT-7B": 6_649_286_656,
        "MPT-1B": 1_315_950_592,  # llm-foundry's benchmark README NumParams
    }
    for name, count in published.items():
        assert get_model(name).total_params() == count, name
    # Megatron-LM scaling table (arXiv 2104.04473, Table 1), billions as printed there
    table = {"GPT-1.7B": 1.7, "GPT-18B": 18.4, "GPT-145B": 145.6, "GPT-530B": 529.6}
    for name, billions in table.items():
        assert round(get_model(name).total_params() / 1e9, 1) == pytest.approx(billions, abs=0.06)
    assert get_model("gpt-1t").total_params() == pytest.approx(1008.0e9, rel=1e-3)
    # the old names keep working
    for old, new in (
        ("OPT-350", "OPT-350M"),
        ("gpt-neo-2.7", "GPT-Neo-2.7B"),
        ("llama-3-8", "LLaMA-3-8B"),
    ):
        assert get_model(old).name == new


def test_profiles_of_a_config_model_stay_in_their_folder(tmp_path):
    from sailor_sim import ProfileStore, get_gpu, load_profile_dir, save_profile_dir
    from sailor_sim.profiles.store import analytic_entry

    spec = get_model(str(_write(tmp_path, "llama", _LLAMA_31_8B)))
    store = ProfileStore([analytic_entry(spec, get_gpu("H100-80"), "bf16", 1, 8, 4096)])
    out = tmp_path / "profiles"
    written = save_profile_dir(store, out)
    assert [p.parent for p in written] == [out]
    back = load_profile_dir(out)
    assert back.entry(spec.name, "H100-80", "bf16", 1, 8, 4096).key.model == spec.name


def test_a_vision_and_text_gemma3_config_names_its_text_config(tmp_path):
    """The multimodal Gemma-3 config wraps the language model in 'text_config': refused with
    the fix, not read as a model it is not."""
    cfg = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}
    with pytest.raises(ValidationError, match="text_config") as e:
        read_hf_config(_write(tmp_path, "gemma-3-4b-it", cfg))
    assert e.value.field == "model_type"


EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "configs").glob("*/config.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_every_example_config_reads(path):
    """The configs the READMEs point users to stay readable as the reader changes."""
    spec = get_model(str(path))
    assert spec.total_params() > 0 and spec.num_layer_ids == spec.num_layers + 2


def test_the_phi_4_example_adds_up_to_its_architecture():
    """Phi-4 ("14.7B" on its model card): 14,659,507,200 by hand from the architecture (40
    blocks of 65,536,000 attention and 275,251,200 SwiGLU weights with two 5,120 norms, an
    untied 100,352 x 5,120 embedding and head, the final norm)."""
    phi4 = next(p for p in EXAMPLES if p.parent.name == "phi-4")
    assert get_model(str(phi4)).total_params() == 14_659_507_200


def test_granite_is_read_as_llama_with_its_multipliers_ignored(tmp_path):
    """IBM Granite 3.x (granite-3.1-8b's config.json) is Llama plus four scalar multipliers
    without parameters: its parameter and FLOP counts are those of the same config read as
    Llama (8.17 B, as its model card)."""
    granite = {
        "model_type": "granite", "hidden_act": "silu", "hidden_size": 4096,
        "intermediate_size": 12800, "max_position_embeddings": 131072,
        "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
        "tie_word_embeddings": True, "vocab_size": 49155, "attention_bias": False,
        "mlp_bias": False, "embedding_multiplier": 12.0, "attention_multiplier": 0.0078125,
        "residual_multiplier": 0.22, "logits_scaling": 16.0,
    }  # fmt: skip
    as_llama = {k: v for k, v in granite.items() if "multiplier" not in k and k != "logits_scaling"}
    as_llama["model_type"] = "llama"
    specs = []
    for name, cfg in (("granite", granite), ("llama", as_llama)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
        specs.append(get_model(str(tmp_path / name / "config.json")))
    a, b = specs
    assert a.total_params() == b.total_params()
    assert 8.1e9 < a.total_params() < 8.2e9
    flops = [sum(m.forward_flops(i, 1, 4096) for i in range(m.num_layer_ids)) for m in specs]
    assert flops[0] == flops[1] > 0


def test_a_config_folder_named_like_a_catalog_model_is_read(tmp_path, monkeypatch):
    """'hf download mistralai/Mistral-7B-v0.3 --local-dir mistral-7b' then '--model
    mistral-7b': the name is also a catalog alias (Mistral-7B, v0.1: vocabulary 32000), which
    won, so the file the user pointed at was silently replaced by another model (while the
    default dtype was read from that file). An existing config on disk is what was meant."""
    v03 = {**dict(CONFIGS[1][1]), "vocab_size": 32768, "sliding_window": None}
    (tmp_path / "mistral-7b").mkdir()
    (tmp_path / "mistral-7b" / "config.json").write_text(json.dumps(v03))
    monkeypatch.chdir(tmp_path)
    for name in ("mistral-7b", "mistral-7b/config.json"):
        spec = get_model(name)
        assert spec.vocab_size == 32768 and spec.name.endswith("config.json"), name
    assert Job.create("mistral-7b", 8, 4096).model.vocab_size == 32768
    assert get_model("Mistral-7B").vocab_size == 32000  # no such folder: the catalog
