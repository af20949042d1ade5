"""Read a decoder-only model from a local Hugging Face ``config.json`` (no torch, no network).

Families (``model_type``): llama, mistral, granite, qwen2, qwen3, phi3 (Phi-3, Phi-3.5-mini, Phi-4),
gemma, gemma2, gemma3_text, nemotron (squared ReLU), bloom and mpt (ALiBi), gpt_neox, opt,
gpt2, and the mixture-of-experts mixtral,
qwen2_moe, qwen3_moe, deepseek_v2/deepseek_v3 (latent attention). The reader is strict: an
unknown ``model_type``, a missing field that sets a size, or an architecture choice the
accounting does not model (e.g. OPT's ``word_embed_proj_dim`` != ``hidden_size``, MoE layers
interleaved with dense ones other than DeepSeek's leading dense blocks) raises
``ValidationError`` naming the field and the fix. Attention variants without parameters
(Gemma-2's sliding window and logit soft-capping, partial rotary) leave the counts unchanged
and are timed as full attention.
Fields whose absence Hugging Face itself fills with a documented default (``num_key_value_heads``
= heads, ``tie_word_embeddings`` per family, ``attention_bias``) take that default;
when present they are read as written (an integer never truncated, a flag true or false).

The vocabulary is padded to a multiple of 128 (Megatron's make-vocab-size-divisible-by; every
power-of-two TP degree up to 128 divides it) and the tokenizer's size is kept in
``ModelSpec.unpadded_vocab_size``, so ``total_params()`` equals the published count.
The model's name is the config file's absolute path, so a ``Job`` written to JSON or proto and
read back (planner server, runtime) finds the same file.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..catalog.readers import padded_vocab_fields
from ..errors import SailorSimError, UnknownNameError, ValidationError
from .mla import MLASpec
from .moe import MoESpec

_GATED_GELU = ("gelu", "gelu_pytorch_tanh", "gelu_new")


def looks_like_config_path(name: str) -> bool:
    """A model argument that names a file or folder rather than a catalog model."""
    return name.endswith(".json") or "/" in name or Path(name).is_dir()


def read_hf_fields(path: str | Path) -> tuple[tuple[str, Any], ...]:
    """The ModelSpec keyword arguments of a Hugging Face ``config.json`` (or a folder holding
    one), as sorted (name, value) pairs; ``model.read_hf_config`` builds the spec."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        raise ValidationError(
            f"{file} does not exist; pass a catalog model name or the path of a Hugging Face "
            "config.json",
            field="model",
        )
    file = file.resolve()
    stat = file.stat()
    return _read_cached(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_cached(file: str, _mtime_ns: int, _size: int):
    try:
        cfg = json.loads(Path(file).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(
            f"{file} is not a readable JSON file ({exc})", field="model"
        ) from None
    if not isinstance(cfg, dict):
        raise ValidationError(f"{file} is not a JSON object", field="model")
    return tuple(sorted(fields_from_hf_dict(cfg, name=file).items()))


def fields_from_hf_dict(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """ModelSpec keyword arguments from the parsed dictionary of a Hugging Face config
    (``name`` labels the model)."""
    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type in _REFUSED:
        _REFUSED[model_type](_Config(cfg, name))  # raises, naming the fix
    if not isinstance(model_type, str) or model_type not in _READERS:
        raise UnknownNameError(
            f"{name}: model_type {model_type!r} is not supported; supported decoder-only "
            f"families: {', '.join(SUPPORTED)} (or use a catalog model)",
            field="model_type",
        )
    try:
        fields = _READERS[model_type](_Config(cfg, name))
        # Frozen specs, not dicts: the fields are hashed (the reader's cache).
        if isinstance(fields.get("moe"), dict):
            fields["moe"] = MoESpec(**fields["moe"])
        if isinstance(fields.get("mla"), dict):
            fields["mla"] = MLASpec(**fields["mla"])
        return {"name": name, **fields, **padded_vocab_fields(fields["vocab_size"])}
    except SailorSimError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        # A field of the wrong type deep in a reader: the same clear error as a missing one.
        raise ValidationError(f"{name}: malformed config ({exc!r:.120})", field="model") from None


class _Config:
    """A config dictionary whose reads of required fields name the field when it is missing."""

    def __init__(self, cfg: dict[str, Any], name: str) -> None:
        self.cfg, self.name = cfg, name
        self.model_type = cfg["model_type"]

    def need(self, key: str) -> Any:
        value = self.cfg.get(key)
        if value is None:
            raise ValidationError(
                f"{self.name}: a {self.model_type} config.json needs {key!r}; add it (see the "
                "model's config on the Hugging Face Hub)",
                field=key,
            )
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValidationError(f"{self.name}: {key!r} is {value!r}", field=key)
        return value

    def int(self, key: str) -> int:
        value = self.need(key)
        if not isinstance(value, int) or value <= 0:
            raise ValidationError(
                f"{self.name}: {key!r} must be a positive integer, got {value!r}", field=key
            )
        return value

    def get(self, key: str, default: Any) -> Any:
        value = self.cfg.get(key)
        return default if value is None else value

    def count(self, key: str, default: int, minimum: int = 1) -> int:
        """An optional integer field, ``default`` when absent: never truncated or coerced
        (int() read 8.7 kv heads as 8, "8" as 8 and true as 1, as ``inputs.integral`` refuses)."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.refuse(key, f"{key!r} must be an integer >= {minimum}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """An optional true/false field, ``default`` when absent (bool() read the string
        "false" as True)."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.refuse(key, f"{key!r} must be true or false, got {value!r}")
        return value

    def refuse(self, key: str, problem: str) -> ValidationError:
        return ValidationError(f"{self.name}: {problem}", field=key)

    def head_dim_field(self, hidden: int, heads: int) -> dict:
        """``attention_head_dim`` when the config's head_dim differs from hidden / heads
        (Gemma-7B, Qwen3), else nothing (the spec derives it)."""
        head_dim = self.cfg.get("head_dim")
        if head_dim is None:
            if hidden % heads:
                raise self.refuse(
                    "head_dim",
                    f"hidden_size {hidden} is not divisible by {heads} heads; add 'head_dim'",
                )
            return {}
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0:
            raise self.refuse(
                "head_dim", f"'head_dim' must be a positive integer, got {head_dim!r}"
            )
        return {} if head_dim * heads == hidden else {"attention_head_dim": head_dim}


def _llama_like(c: _Config, *, mlp: str, tie_default: bool, qkv_bias: bool | None) -> dict:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    bias = c.flag("attention_bias", False)
    if c.flag("mlp_bias", False) != bias:
        raise c.refuse("mlp_bias", "mlp_bias different from attention_bias is not modelled")
    fields = dict(
        family=_FAMILY.get(c.model_type, c.model_type),
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=c.count("num_key_value_heads", heads),
        ffn_hidden_size=c.int("intermediate_size"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_position_embeddings"),
        position="rotary",
        norm="rmsnorm",
        mlp=mlp,
        bias=bias,
        tie_word_embeddings=c.flag("tie_word_embeddings", tie_default),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        **c.head_dim_field(hidden, heads),
    )
    if qkv_bias is not None:
        fields["qkv_bias"] = qkv_bias
    return fields


def _llama(c: _Config) -> dict:
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise c.refuse("hidden_act", f"hidden_act {act!r}: only 'silu' (SwiGLU) is modelled")
    return _llama_like(c, mlp="swiglu", tie_default=False, qkv_bias=None)


def _qwen2(c: _Config) -> dict:
    # Qwen2 puts biases on Q, K and V only (modeling_qwen2.py), whatever attention_bias says.
    fields = _llama(c)
    fields.update(bias=False, qkv_bias=True)
    return fields


def _gemma(c: _Config) -> dict:
    act = c.get("hidden_activation", c.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in _GATED_GELU:
        raise c.refuse("hidden_activation", f"{act!r}: Gemma's gated GELU is expected")
    return _llama_like(c, mlp="geglu", tie_default=True, qkv_bias=None)


def _qwen3(c: _Config) -> dict:
    return _llama(c) | {"qk_norm": True}


def _gemma2(c: _Config) -> dict:
    # Gemma-2: norms before and after attention and the MLP (modeling_gemma2.py); sliding
    # window and soft-capping have no parameters.
    return _gemma(c) | {"sandwich_norm": True}


def _gemma3(c: _Config) -> dict:
    # Gemma-3: Gemma-2's four norms per block plus per-head q/k RMSNorms (modeling_gemma3.py:
    # q_norm and k_norm of head_dim, as Qwen3's); its 5:1 sliding-window layers have no
    # parameters (timed as full attention, as Gemma-2's).
    return _gemma2(c) | {"qk_norm": True}


def _gemma3_multimodal(c: _Config) -> dict:
    raise c.refuse(
        "model_type",
        "model_type 'gemma3' is the vision and text model; its language model is the "
        "'text_config' object (model_type gemma3_text): save that object as a config.json "
        "to plan the language model (the vision tower is not modelled)",
    )


def _nemotron(c: _Config) -> dict:
    act = c.get("hidden_act", "relu2")
    if act != "relu2":
        raise c.refuse("hidden_act", f"hidden_act {act!r}: Nemotron's squared ReLU is expected")
    fields = _llama_like(c, mlp="relu2", tie_default=False, qkv_bias=None)
    # NemotronLayerNorm1P is a LayerNorm with weight and bias.
    return fields | {"norm": "layernorm", "norm_bias": True}


def _moe_block(c: _Config, experts_key: str, ffn_key: str, **extra) -> dict:
    """The ``moe`` field of a MoE config; refuses layer patterns the accounting lacks."""
    step = c.get("decoder_sparse_step", 1)
    if step != 1 or c.get("mlp_only_layers", []):
        raise c.refuse(
            "decoder_sparse_step",
            "dense MLP blocks interleaved with MoE blocks (decoder_sparse_step != 1 or "
            "mlp_only_layers) are not modelled; use a config whose every block is MoE",
        )
    return dict(
        num_experts=c.int(experts_key),
        top_k=c.int("num_experts_per_tok"),
        expert_ffn=c.int(ffn_key),
        **extra,
    )


def _mixtral(c: _Config) -> dict:
    fields = _llama(c)
    return fields | {"moe": _moe_block(c, "num_local_experts", "intermediate_size")}


def _qwen2_moe(c: _Config) -> dict:
    fields = _qwen2(c)
    shared = c.count("shared_expert_intermediate_size", 0, minimum=0)
    moe = _moe_block(
        c,
        "num_experts",
        "moe_intermediate_size",
        num_shared_experts=1 if shared else 0,
        shared_expert_ffn=shared or None,
        shared_expert_gate=bool(shared),
    )  # Qwen2MoeSparseMoeBlock.shared_expert_gate
    return fields | {"moe": moe}


def _qwen3_moe(c: _Config) -> dict:
    return _qwen3(c) | {"moe": _moe_block(c, "num_experts", "moe_intermediate_size")}


def _deepseek(c: _Config) -> dict:
    """DeepSeek-V2/V3: latent attention, leading dense blocks, then MoE blocks with shared
    experts. The multi-token-prediction module (``num_nextn_predict_layers``) is not part of
    the published 671B of V3 and is not counted."""
    if c.get("moe_layer_freq", 1) != 1:
        raise c.refuse("moe_layer_freq", "moe_layer_freq != 1 is not modelled")
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    q_lora = c.cfg.get("q_lora_rank")
    mla = dict(
        kv_lora_rank=c.int("kv_lora_rank"),
        qk_nope_head_dim=c.int("qk_nope_head_dim"),
        qk_rope_head_dim=c.int("qk_rope_head_dim"),
        v_head_dim=c.int("v_head_dim"),
        q_lora_rank=None if q_lora is None else c.int("q_lora_rank"),
    )
    moe = dict(
        num_experts=c.int("n_routed_experts"),
        top_k=c.int("num_experts_per_tok"),
        expert_ffn=c.int("moe_intermediate_size"),
        num_shared_experts=c.count("n_shared_experts", 0, minimum=0),
        # V3's auxiliary-loss-free balancing keeps a per-expert bias (e_score_correction_bias).
        router_bias=c.get("topk_method", "") == "noaux_tc",
        first_dense_layers=c.count("first_k_dense_replace", 0, minimum=0),
    )
    if c.flag("attention_bias", False):
        raise c.refuse("attention_bias", "latent attention with biases is not modelled")
    return dict(
        family="deepseek",
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,  # every head has its own (latent-derived) key and value
        ffn_hidden_size=c.int("intermediate_size"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_position_embeddings"),
        position="rotary",
        norm="rmsnorm",
        mlp="swiglu",
        bias=False,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        mla=mla,
        moe=moe,
    )


# BLOOM and MPT (ALiBi) have no position limit in their configs; the sequence length they
# were trained with stands in as max_seq_len (only the default job sequence length).
_BLOOM_TRAINED_SEQ = 2048


def _bloom(c: _Config) -> dict:
    hidden = c.int("hidden_size") if "hidden_size" in c.cfg else c.int("n_embed")
    heads = c.int("n_head")
    return dict(
        family="bloom",
        num_layers=c.int("n_layer"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=4 * hidden,  # BloomMLP: dense_h_to_4h
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.count("seq_length", _BLOOM_TRAINED_SEQ),
        position="alibi",
        embedding_norm=True,  # word_embeddings_layernorm
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
    )


def _mpt(c: _Config) -> dict:
    attn = c.get("attn_config", {})
    if not isinstance(attn, dict):
        raise c.refuse("attn_config", "'attn_config' must be an object")
    hidden, heads = c.int("d_model"), c.int("n_heads")
    alibi = bool(attn.get("alibi", False))
    no_bias = c.flag("no_bias", False)
    return dict(
        family="mpt",
        num_layers=c.int("n_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(attn.get("kv_n_heads", heads)),
        ffn_hidden_size=int(c.get("expansion_ratio", 4) * hidden),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_seq_len"),
        position="alibi" if alibi else "learned",
        bias=not no_bias,
        norm_bias=not no_bias,
        tie_word_embeddings=True,  # MPT always ties (modeling_mpt.py)
    )


def _gpt_neox(c: _Config) -> dict:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    bias = c.flag("attention_bias", True)
    return dict(
        family="gpt-neox",
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=c.int("intermediate_size"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_position_embeddings"),
        position="rotary",
        norm="layernorm",
        mlp="gelu",
        bias=True,
        qkv_bias=bias,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
    )


# OPT's learned position table has 2 rows more than max_position_embeddings
# (OPTLearnedPositionalEmbedding's offset, modeling_opt.py).
_OPT_POSITION_OFFSET = 2


def _opt(c: _Config) -> dict:
    hidden = c.int("hidden_size")
    proj = c.get("word_embed_proj_dim", hidden)
    if proj != hidden:
        raise c.refuse(
            "word_embed_proj_dim",
            f"word_embed_proj_dim {proj} != hidden_size {hidden} (OPT-350m's projections) is "
            "not modelled; use the catalog's OPT-350M (Megatron layout) instead",
        )
    if not c.get("do_layer_norm_before", True):
        raise c.refuse("do_layer_norm_before", "post-norm OPT (no final norm) is not modelled")
    seq = c.int("max_position_embeddings")
    return dict(
        family="opt",
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=c.int("num_attention_heads"),
        num_kv_heads=c.int("num_attention_heads"),
        ffn_hidden_size=c.int("ffn_dim"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=seq,
        num_position_embeddings=seq + _OPT_POSITION_OFFSET,
        bias=c.flag("enable_bias", True),
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        dropout=float(c.get("dropout", 0.0)),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
    )


def _gpt2(c: _Config) -> dict:
    hidden = c.int("n_embd")
    return dict(
        family="gpt2",
        num_layers=c.int("n_layer"),
        hidden_size=hidden,
        num_heads=c.int("n_head"),
        num_kv_heads=c.int("n_head"),
        ffn_hidden_size=c.count("n_inner", 4 * hidden),  # GPT2Config: None means 4 x n_embd
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("n_positions"),
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        dropout=float(c.get("resid_pdrop", 0.0)),
        attention_dropout=float(c.get("attn_pdrop", 0.0)),
    )


_FAMILY = {
    "qwen2_moe": "qwen2-moe",
    "qwen3_moe": "qwen3-moe",
    "gemma3_text": "gemma3",
    "granite": "llama",
}
"""model_type -> ModelSpec family where the names differ."""

_READERS = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    # Phi-3 and Phi-4 fuse Q/K/V and gate/up into single matrices of the same sizes
    # (modeling_phi3.py): Llama's parameters and FLOPs.
    "phi3": _llama,
    # IBM Granite 3.x is Llama with four scalar multipliers (embedding, attention, residual,
    # logits; modeling_granite.py) that hold no parameters and cost no FLOPs worth counting.
    "granite": _llama,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "nemotron": _nemotron,
    "bloom": _bloom,
    "mpt": _mpt,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "gpt2": _gpt2,
}
SUPPORTED = tuple(_READERS)
"""The model_type values read (the error for any other lists them)."""

_REFUSED = {"gemma3": _gemma3_multimodal}
"""model_type values refused with their own fix rather than "not supported"."""
