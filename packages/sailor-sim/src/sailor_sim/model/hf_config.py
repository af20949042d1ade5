"""Read a decoder-only model from a local Hugging Face ``config.json`` (no torch, no network).

Families (``model_type``): llama, mistral, granite, qwen2, qwen3, phi3 (Phi-3, Phi-3.5-mini, Phi-4),
gemma, gemma2, gemma3_text, nemotron (squared ReLU), bloom and mpt (ALiBi), gpt_neox, opt,
gpt2, olmo (non-parametric LayerNorm), olmo2 (whole-projection q/k norms), starcoder2, phi
(Phi-1.5/Phi-2: parallel block, LM-head bias), cohere and cohere2 (Command-R: parallel
block), falcon (parallel block, multi-query or the new decoder architecture, ALiBi or rotary),
glm, glm4, stablelm, exaone, internlm2, and the mixture-of-experts mixtral, qwen2_moe,
qwen3_moe, deepseek_v2/deepseek_v3 (latent attention), dbrx and gpt_oss (attention sinks,
expert biases). State-space / recurrent models (mamba, jamba, recurrent_gemma, ...) and
encoder-decoder models (t5, bart, ...) are refused saying why. The reader is strict: an
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
from .rope import FOLLOWED_KINDS, RopeScaling

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
        config = _Config(cfg, name)
        fields = _READERS[model_type](config)
        if fields.get("position") == "rotary":
            fields.update(_rotary_fields(config))
        # Frozen specs, not dicts: the fields are hashed (the reader's cache).
        if isinstance(fields.get("moe"), dict):
            fields["moe"] = MoESpec(**fields["moe"])
        if isinstance(fields.get("mla"), dict):
            fields["mla"] = MLASpec(**fields["mla"])
        window = _sliding_window(config)
        if window:
            fields["unmodelled_sliding_window"] = window
        return {"name": name, **fields, **padded_vocab_fields(fields["vocab_size"])}
    except SailorSimError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        # A field of the wrong type deep in a reader: the same clear error as a missing one.
        raise ValidationError(f"{name}: malformed config ({exc!r:.120})", field="model") from None


def _rotary_fields(c: _Config) -> dict:
    """The rotary base (``rope_theta``, or ``rope_parameters.rope_theta`` as transformers 5
    writes it) and the share of each head rotated (``partial_rotary_factor``; GPT-NeoX's
    ``rotary_pct``), where the config gives them, and its ``rope_scaling`` where the zoo
    follows the kind (``rope.FOLLOWED_KINDS``: LLaMA-3.1's llama3, YaRN, linear, dynamic NTK;
    LongRoPE and mrope are checked and not followed). The same costs either way."""
    scaling = _rope_scaling(c)
    fields = {} if scaling is None else {"rope_scaling": scaling}
    base = c.get("rope_theta", c.sub("rope_parameters").get("rope_theta", None))
    if base is not None:
        if isinstance(base, bool) or not isinstance(base, int | float) or not 1 < base < 1e12:
            raise c.refuse("rope_theta", f"'rope_theta' must be a number above 1, got {base!r}")
        fields["rope_base"] = float(base)
    key = "rotary_pct" if "rotary_pct" in c.cfg else "partial_rotary_factor"
    share = c.get(key, None)
    if share is not None:
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise c.refuse(key, f"{key!r} must be in (0, 1], got {share!r}")
        fields["rotary_fraction"] = float(share)
    return fields


ROPE_SCALING_TYPES = tuple("default linear dynamic ntk yarn longrope su llama3 mrope".split())
"""The kinds of ``rope_scaling`` a config may name (its ``rope_type``, or ``type`` as older
configs write it): transformers' ``ROPE_INIT_FUNCTIONS``, Phi-3's first name for longrope
(``su``), dynamic NTK's short name and Qwen2-VL's multimodal sections (``mrope``)."""


def _rope_scaling(c: _Config) -> RopeScaling | None:
    """The config's ``rope_scaling`` (or transformers 5's ``rope_parameters`` naming a
    ``rope_type``) as a RopeScaling where the kind is followed, else None; checked either way
    (``_check_rope_scaling``). L, the trained context, is its
    ``original_max_position_embeddings``, else ``max_position_embeddings``. YaRN's factor is
    the one written (Peng et al.; vLLM): transformers >= 4.53 takes max_position_embeddings
    / L instead where the config gives L, which is the same number in gpt-oss's and
    DeepSeek-V3's configs."""
    key = "rope_scaling"
    if c.get(key, None) is None and isinstance(c.get("rope_parameters", None), dict):
        if c.sub("rope_parameters").get("rope_type", "default") != "default":
            key = "rope_parameters"
    kind = _check_rope_scaling(c, key)
    kind = "longrope" if kind == "su" else kind  # Phi-3's first name for it
    if kind not in FOLLOWED_KINDS:
        return None
    s = c.sub(key)
    if kind == "llama3":  # as Hugging Face's check: LLaMA-3.1's configs write all three
        for name in ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor"):
            s.need(name)
    fields = {"kind": kind, "factor": s.get("factor", None), **_YARN_DEFAULTS}
    if kind == "longrope":
        fields |= _longrope_fields(c, s)
    else:
        trained = s.get("original_max_position_embeddings", c.get("max_position_embeddings", None))
        fields["original_max_position_embeddings"] = trained
    for name in _SCALING_FIELDS:
        if s.get(name, None) is not None:
            fields[name] = s.get(name, None)
    try:
        return RopeScaling(**fields)
    except ValidationError as exc:
        raise c.refuse(key, str(exc)) from None


def _longrope_fields(c: _Config, s: _Config) -> dict:
    """LongRoPE's L and factor as Phi-3's code takes them: L the config's (top-level, as
    Phi-3 writes it) ``original_max_position_embeddings``, and then factor =
    max_position_embeddings / L; without one, L = max_position_embeddings and the written
    factor (default 1)."""
    key = "original_max_position_embeddings"
    trained = s.get(key, c.get(key, None))
    longest = c.get("max_position_embeddings", None)
    if trained is None or not isinstance(longest, int) or not isinstance(trained, int):
        return {"original_max_position_embeddings": longest, "factor": s.get("factor", 1.0)}
    return {"original_max_position_embeddings": trained, "factor": longest / trained}


_SCALING_FIELDS = (
    "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor",
    "mscale", "mscale_all_dim", "truncate", "short_factor", "long_factor",
)  # fmt: skip
"""``rope_scaling`` fields a RopeScaling takes as written (Hugging Face's names)."""
_YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0}
"""YaRN's defaults where a config leaves them out (the paper's, as Hugging Face's)."""


def _check_rope_scaling(c: _Config, name: str = "rope_scaling") -> str | None:
    """``name`` (``rope_scaling``) is null or an object naming a known kind, with a positive
    ``factor`` where it gives one: a value of no known kind ("yes") is a config written
    wrong. Returns the kind (None when null)."""
    scaling = c.get(name, None)
    if scaling is None:
        return None
    fix = f"null or an object with 'rope_type' one of {', '.join(ROPE_SCALING_TYPES)}"
    if not isinstance(scaling, dict):
        raise c.refuse(name, f"{name!r} must be {fix}, got {scaling!r:.60}")
    key = "rope_type" if "rope_type" in scaling else "type"
    kind = scaling.get(key)
    if not isinstance(kind, str) or kind not in ROPE_SCALING_TYPES:
        raise c.sub(name).refuse(key, f"{name!r} must be {fix}, got {key} {kind!r:.40}")
    factor = scaling.get("factor")
    if factor is not None and (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not 0 < factor < float("inf")
    ):
        raise c.sub(name).refuse(
            "factor", f"'{name}.factor' must be a positive number, got {factor!r:.40}"
        )
    return kind


def _sliding_window(c: _Config) -> int:
    """The attention window some or all layers use (``sliding_window``: Mistral-7B-v0.1,
    Gemma-2/3, Phi-3, Starcoder2, gpt-oss), 0 when none or switched off (Qwen2's
    ``use_sliding_window`` false). It is timed as full causal attention; estimates say so."""
    if c.get("use_sliding_window", True) is False:
        return 0
    return c.count("sliding_window", 0, minimum=0)


class _Config:
    """A config dictionary whose reads of required fields name the field when it is missing."""

    def __init__(
        self, cfg: dict[str, Any], name: str, model_type: str | None = None, prefix: str = ""
    ) -> None:
        self.cfg, self.name, self.prefix = cfg, name, prefix
        self.model_type = cfg["model_type"] if model_type is None else model_type

    def sub(self, key: str) -> _Config:
        """The nested object ``key`` (DBRX's attn_config, ffn_config), its fields named
        ``key.field`` in errors; absent = empty (its fields then take their defaults)."""
        value = self.get(key, {})
        if not isinstance(value, dict):
            raise self.refuse(key, f"{key!r} must be an object, got {value!r:.60}")
        return _Config(value, self.name, self.model_type, f"{self.prefix}{key}.")

    def need(self, key: str) -> Any:
        value = self.cfg.get(key)
        field = self.prefix + key
        if value is None:
            raise ValidationError(
                f"{self.name}: a {self.model_type} config.json needs {field!r}; add it (see "
                "the model's config on the Hugging Face Hub)",
                field=field,
            )
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValidationError(f"{self.name}: {field!r} is {value!r}", field=field)
        return value

    def int(self, key: str) -> int:
        value = self.need(key)
        if not isinstance(value, int) or value <= 0:
            raise ValidationError(
                f"{self.name}: {self.prefix + key!r} must be a positive integer, got {value!r}",
                field=self.prefix + key,
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
        return ValidationError(f"{self.name}: {problem}", field=self.prefix + key)

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


def _shape(c: _Config, layers_key: str = "num_hidden_layers") -> dict:
    """The sizes most families write under Hugging Face's common names: layers, hidden size,
    heads (and key/value heads: all of them when the config has no such field), the MLP's
    width, vocabulary, positions and a head_dim that differs from hidden / heads."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return dict(
        num_layers=c.int(layers_key),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=c.count("num_key_value_heads", heads),
        ffn_hidden_size=c.int("intermediate_size"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_position_embeddings"),
        **c.head_dim_field(hidden, heads),
    )


def _llama_like(
    c: _Config,
    *,
    mlp: str,
    tie_default: bool,
    qkv_bias: bool | None,
    bias: bool | None = None,
    layers_key: str = "num_hidden_layers",
) -> dict:
    """A Llama-shaped block; ``bias`` given = the family fixes its linear biases (no
    attention_bias / mlp_bias to read)."""
    if bias is None:
        bias = c.flag("attention_bias", False)
        if c.flag("mlp_bias", False) != bias:
            raise c.refuse("mlp_bias", "mlp_bias different from attention_bias is not modelled")
    fields = dict(
        family=_FAMILY.get(c.model_type, c.model_type),
        **_shape(c, layers_key),
        position="rotary",
        norm="rmsnorm",
        mlp=mlp,
        bias=bias,
        tie_word_embeddings=c.flag("tie_word_embeddings", tie_default),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
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
    experts. The multi-token-prediction modules (``num_nextn_predict_layers``) are not part of
    the published 671B of V3; they are not modelled and the spec carries their count
    (``unmodelled_mtp_layers``) so every estimate says they are left out."""
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
        unmodelled_mtp_layers=c.count("num_nextn_predict_layers", 0, minimum=0),
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
    # GPTNeoXLayer: x + attn(ln1(x)) + mlp(ln2(x)) unless use_parallel_residual is false
    # (Hugging Face's default is true: Pythia, GPT-NeoX-20B); two norms either way.
    parallel = c.flag("use_parallel_residual", True)
    return dict(
        parallel_block=parallel,
        parallel_norms=2 if parallel else 1,
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


def _act(c: _Config, key: str, allowed: tuple[str, ...], what: str) -> None:
    act = c.get(key, allowed[0])
    if act not in allowed:
        raise c.refuse(key, f"{key} {act!r}: {what} ({', '.join(allowed)}) is expected")


def _dropouts(c: _Config, residual_key: str) -> dict:
    return dict(
        dropout=float(c.get(residual_key, 0.0)),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
    )


def _olmo(c: _Config) -> dict:
    # OLMo-1 (modeling_olmo.py): Llama's matrices; OlmoLayerNorm is F.layer_norm without
    # weight or bias, so its norms hold no parameters. clip_qkv clamps activations only.
    return _llama(c) | {"norm": "layernorm", "norm_affine": False}


def _olmo2(c: _Config) -> dict:
    # OLMo-2 (modeling_olmo2.py): Llama's matrices. Its two RMSNorms per block follow the
    # attention and the MLP (post_attention_layernorm, post_feedforward_layernorm) instead of
    # preceding them: the same count, and the same number of (b, s, h) tensors stashed. q_norm
    # and k_norm are RMSNorms over the whole q (heads x head_dim) and k (kv heads x head_dim).
    return _llama(c) | {"qk_norm": True, "qk_norm_kind": "full", "post_norms": True}


def _starcoder2(c: _Config) -> dict:
    # StarCoder2 (modeling_starcoder2.py): q/k/v/o and the MLP's c_fc/c_proj carry biases
    # per use_bias; nn.LayerNorm always has weight and bias; a plain (ungated) GELU MLP; GQA
    # and rotary positions. Starcoder2Config ties the embeddings by default.
    _act(c, "hidden_act", _GATED_GELU, "a GELU")
    return dict(
        family="starcoder2",
        **_shape(c),
        position="rotary",
        norm="layernorm",
        norm_bias=True,
        mlp="gelu",
        bias=c.flag("use_bias", True),
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        **_dropouts(c, "residual_dropout"),
    )


def _phi(c: _Config) -> dict:
    # Phi-1.5 / Phi-2 (modeling_phi.py): one LayerNorm (weight and bias) feeds attention and
    # MLP in parallel; q/k/v/dense and fc1/fc2 have biases; GELU MLP; partial rotary (no
    # parameters); the LM head has a bias.
    if c.flag("qk_layernorm", False):
        raise c.refuse("qk_layernorm", "Phi's qk_layernorm (LayerNorms with bias) is not modelled")
    _act(c, "hidden_act", ("gelu_new", "gelu", "gelu_pytorch_tanh"), "a GELU")
    return dict(
        family="phi",
        **_shape(c),
        position="rotary",
        norm="layernorm",
        mlp="gelu",
        bias=True,
        parallel_block=True,
        lm_head_bias=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        **_dropouts(c, "resid_pdrop"),
    )


def _cohere(c: _Config) -> dict:
    # Command-R (modeling_cohere.py, and cohere2 for Command R7B / A): one CohereLayerNorm
    # (a weight, no bias) feeds attention and a SwiGLU MLP in parallel; tied embeddings;
    # logit_scale and cohere2's sliding-window layers hold no parameters. use_qk_norm adds
    # CohereLayerNorm((heads, head_dim)) on q and ((kv heads, head_dim)) on k: a weight per
    # head, each head normalised alone (Command-R+).
    _act(c, "hidden_act", ("silu",), "SwiGLU's SiLU")
    if c.flag("attention_bias", False):
        raise c.refuse("attention_bias", "attention biases without MLP biases are not modelled")
    fields = _llama_like(c, mlp="swiglu", tie_default=True, qkv_bias=None, bias=False)
    fields.update(family="cohere", norm="layernorm", norm_bias=False, parallel_block=True)
    if c.flag("use_qk_norm", False):
        fields.update(qk_norm=True, qk_norm_kind="per_head")
    return fields


def _falcon(c: _Config) -> dict:
    """Falcon (modeling_falcon.py): fused query_key_value, GELU MLP of ffn_hidden_size
    (4 x hidden by default), nn.LayerNorm with weight and bias, biases on the linears per
    ``bias``, tied embeddings (FalconConfig's default). Falcon-7B: parallel attention with one
    norm and multi-query attention; the new decoder architecture (40B, 180B): num_kv_heads
    and two norms (ln_attn, ln_mlp) on the parallel block."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    new_arch = c.flag("new_decoder_architecture", False)
    parallel = c.flag("parallel_attn", True)
    if new_arch and not parallel:
        raise c.refuse(
            "parallel_attn", "the new decoder architecture without parallel_attn is not modelled"
        )
    if new_arch:
        kv_heads = c.count("num_kv_heads", heads)
    elif c.flag("multi_query", True):
        kv_heads = 1  # FalconAttention: one K and one V head (qkv width hidden + 2 head_dim)
    else:
        kv_heads = heads  # qkv width 3 x hidden
    _act(c, "activation", ("gelu",), "GELU")
    norms = c.count("num_ln_in_parallel_attn", 2 if new_arch else 1)
    return dict(
        family="falcon",
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        ffn_hidden_size=c.count("ffn_hidden_size", 4 * hidden),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.count("max_position_embeddings", 2048),  # FalconConfig's default
        position="alibi" if c.flag("alibi", False) else "rotary",
        norm="layernorm",
        mlp="gelu",
        bias=c.flag("bias", False),
        parallel_block=parallel,
        parallel_norms=2 if parallel and norms == 2 else 1,
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        **_dropouts(c, "hidden_dropout"),
        **c.head_dim_field(hidden, heads),
    )


def _gpt_oss(c: _Config) -> dict:
    """gpt-oss (modeling_gpt_oss.py): every block MoE; q/k/v/o with biases, one sink logit per
    head; a router with a bias; every expert a clamped SwiGLU with gate/up and down biases
    (gate_up_proj_bias, down_proj_bias); untied embeddings. The alternating 128-token sliding
    window has no parameters (timed as full attention)."""
    _act(c, "hidden_act", ("silu",), "the clamped SwiGLU's SiLU")
    if not c.flag("attention_bias", True):
        raise c.refuse(
            "attention_bias",
            "gpt-oss without attention biases is not modelled (its experts keep theirs)",
        )
    fields = _llama_like(c, mlp="swiglu", tie_default=False, qkv_bias=None, bias=True)
    moe = _moe_block(c, "num_local_experts", "intermediate_size", router_bias=True)
    return fields | {"family": "gpt-oss", "attention_sinks": True, "moe": moe}


def _glm(c: _Config) -> dict:
    # GLM-4 (modeling_glm.py, THUDM/glm-4-9b-hf): biases on q/k/v only (attention_bias,
    # default true), none on o_proj or the fused gate_up / down MLP; RMSNorm; partial rotary.
    _act(c, "hidden_act", ("silu",), "SwiGLU's SiLU")
    qkv_bias = c.flag("attention_bias", True)
    return _llama_like(c, mlp="swiglu", tie_default=False, qkv_bias=qkv_bias, bias=False)


def _glm4(c: _Config) -> dict:
    # GLM-4-0414 (modeling_glm4.py): GLM plus post_self_attn_layernorm and post_mlp_layernorm,
    # four norms per block as Gemma-2's.
    return _glm(c) | {"sandwich_norm": True}


def _stablelm(c: _Config) -> dict:
    # StableLM (modeling_stablelm.py): LayerNorm with weight and bias; q/k/v biases per
    # use_qkv_bias, none on o_proj or the SwiGLU MLP; use_parallel_residual drops the MLP's
    # norm (one norm feeds both); qk_layernorm is a LayerNorm (no bias) per head.
    _act(c, "hidden_act", ("silu",), "SwiGLU's SiLU")
    fields = _llama_like(
        c, mlp="swiglu", tie_default=False, qkv_bias=c.flag("use_qkv_bias", False), bias=False
    )
    fields.update(norm="layernorm", norm_bias=True)
    fields.update(parallel_block=c.flag("use_parallel_residual", False))
    if c.flag("qk_layernorm", False):
        fields.update(qk_norm=True, qk_norm_kind="per_head")
    return fields | _dropouts(c, "hidden_dropout")


def _dbrx(c: _Config) -> dict:
    """DBRX (modeling_dbrx.py): every block MoE (ffn_config) with SwiGLU experts (w1, v1, w2)
    and a bias-free router; fused Wqkv and out_proj without biases; GQA (attn_config
    kv_n_heads); nn.LayerNorm without bias; untied embeddings."""
    attn, ffn = c.sub("attn_config"), c.sub("ffn_config")
    act = ffn.get("ffn_act_fn", {"name": "silu"})
    if not isinstance(act, dict) or act.get("name", "silu") != "silu":
        raise ffn.refuse("ffn_act_fn", f"'ffn_act_fn' {act!r:.60}: only SiLU (SwiGLU) is modelled")
    hidden, heads = c.int("d_model"), c.int("n_heads")
    moe = dict(
        num_experts=ffn.int("moe_num_experts"),
        top_k=ffn.int("moe_top_k"),
        expert_ffn=ffn.int("ffn_hidden_size"),
    )
    return dict(
        family="dbrx",
        num_layers=c.int("n_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=attn.count("kv_n_heads", 1),  # DbrxAttentionConfig's default
        ffn_hidden_size=moe["expert_ffn"],
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_seq_len"),
        position="rotary",
        norm="layernorm",
        norm_bias=False,
        mlp="swiglu",
        bias=False,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        dropout=float(c.get("resid_pdrop", 0.0)),
        attention_dropout=float(attn.get("attn_pdrop", 0.0)),
        moe=moe,
    )


def _exaone(c: _Config) -> dict:
    # EXAONE 3.x (LG AI Research's modeling_exaone.py, remote code): Llama's block under other
    # names (num_layers, activation_function; q/k/v/out_proj, c_fc_0/c_fc_1/c_proj without
    # biases; RMSNorm). Its remote config's defaults are not in transformers, so the tie
    # flag must be written.
    _act(c, "activation_function", ("silu",), "SwiGLU's SiLU")
    if "tie_word_embeddings" not in c.cfg:
        raise c.refuse(
            "tie_word_embeddings",
            "an exaone config.json needs 'tie_word_embeddings' (true for EXAONE-3.5-2.4B, "
            "false for 7.8B); add it",
        )
    return _llama_like(
        c, mlp="swiglu", tie_default=False, qkv_bias=None, bias=False, layers_key="num_layers"
    )


def _internlm2(c: _Config) -> dict:
    # InternLM2 (internlm's modeling_internlm2.py, remote code): Llama's block with fused
    # wqkv; ``bias`` (default true there) puts biases on wqkv and wo but never on the
    # feed_forward w1/w2/w3, a layout the accounting does not model.
    _act(c, "hidden_act", ("silu",), "SwiGLU's SiLU")
    if c.flag("bias", True):
        raise c.refuse(
            "bias",
            "InternLM2 with attention biases (bias true, the remote config's default) is not "
            'modelled; the published configs say "bias": false',
        )
    return _llama_like(c, mlp="swiglu", tie_default=False, qkv_bias=None, bias=False)


def _not_a_transformer(why: str, instead: str):
    def refuse(c: _Config) -> dict:
        raise c.refuse(
            "model_type",
            f"model_type {c.model_type!r} is {why}; the accounting models decoder-only "
            f"transformer blocks (attention + MLP) only, so its parameters, FLOPs and memory "
            f"would be wrong. {instead}",
        )

    return refuse


_STATE_SPACE = _not_a_transformer(
    "a state-space or recurrent model (or a hybrid with such layers)",
    "Plan with a decoder-only transformer of similar size (e.g. a catalog model) instead.",
)
_ENCODER_DECODER = _not_a_transformer(
    "an encoder-decoder model (an encoder stack, a decoder stack and cross-attention)",
    "Plan its decoder as a decoder-only config.json of the same sizes, or use a catalog model.",
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
    "olmo": _olmo,
    "olmo2": _olmo2,
    "starcoder2": _starcoder2,
    "phi": _phi,
    "cohere": _cohere,
    "cohere2": _cohere,
    "falcon": _falcon,
    "gpt_oss": _gpt_oss,
    "glm": _glm,
    "glm4": _glm4,
    "stablelm": _stablelm,
    "dbrx": _dbrx,
    "exaone": _exaone,
    "internlm2": _internlm2,
}
SUPPORTED = tuple(_READERS)
"""The model_type values read (the error for any other lists them)."""

_REFUSED = {
    "gemma3": _gemma3_multimodal,
    **dict.fromkeys(
        ("mamba", "mamba2", "falcon_mamba", "jamba", "recurrent_gemma", "zamba", "zamba2",
         "bamba", "rwkv", "falcon_h1"),
        _STATE_SPACE,
    ),
    **dict.fromkeys(("t5", "mt5", "umt5", "bart", "mbart", "pegasus"), _ENCODER_DECODER),
}  # fmt: skip
"""model_type values refused with their own fix rather than "not supported"."""
