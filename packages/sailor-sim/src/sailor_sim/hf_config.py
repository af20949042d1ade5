"""Read a decoder-only model from a local Hugging Face ``config.json`` (no torch, no network).

Families (``model_type``): llama, mistral, qwen2, gemma, gpt_neox, opt, gpt2. The reader is
strict: an unknown ``model_type``, a missing field that sets a size, or an architecture choice
the accounting does not model (e.g. OPT's ``word_embed_proj_dim`` != ``hidden_size``, a
``head_dim`` other than hidden / heads) raises ``ValidationError`` naming the field and the fix.
Fields whose absence Hugging Face itself fills with a documented default (``num_key_value_heads``
= heads, ``tie_word_embeddings`` per family, ``attention_bias``) take that default.

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

from .catalog_data import padded_vocab_fields
from .errors import SailorSimError, UnknownNameError, ValidationError

SUPPORTED = ("llama", "mistral", "qwen2", "gemma", "gpt_neox", "opt", "gpt2")
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
    if not isinstance(model_type, str) or model_type not in _READERS:
        raise UnknownNameError(
            f"{name}: model_type {model_type!r} is not supported; supported decoder-only "
            f"families: {', '.join(SUPPORTED)} (or use a catalog model)",
            field="model_type",
        )
    try:
        fields = _READERS[model_type](_Config(cfg, name))
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

    def refuse(self, key: str, problem: str) -> ValidationError:
        return ValidationError(f"{self.name}: {problem}", field=key)

    def check_head_dim(self, hidden: int, heads: int) -> None:
        head_dim = self.cfg.get("head_dim")
        if head_dim is not None and head_dim * heads != hidden:
            raise self.refuse(
                "head_dim",
                f"head_dim {head_dim} x {heads} heads != hidden_size {hidden}; models whose "
                "attention width differs from hidden_size are not modelled yet",
            )


def _llama_like(c: _Config, *, mlp: str, tie_default: bool, qkv_bias: bool | None) -> dict:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    c.check_head_dim(hidden, heads)
    bias = bool(c.get("attention_bias", False))
    if bool(c.get("mlp_bias", False)) != bias:
        raise c.refuse("mlp_bias", "mlp_bias different from attention_bias is not modelled")
    fields = dict(
        family={"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "gemma": "gemma"}[
            c.model_type
        ],
        num_layers=c.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads", heads)),
        ffn_hidden_size=c.int("intermediate_size"),
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("max_position_embeddings"),
        position="rotary",
        norm="rmsnorm",
        mlp=mlp,
        bias=bias,
        tie_word_embeddings=bool(c.get("tie_word_embeddings", tie_default)),
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


def _gpt_neox(c: _Config) -> dict:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    bias = bool(c.get("attention_bias", True))
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
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
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
        bias=bool(c.get("enable_bias", True)),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
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
        ffn_hidden_size=int(c.get("n_inner", 4 * hidden)),  # GPT2Config: None means 4 x n_embd
        vocab_size=c.int("vocab_size"),
        max_seq_len=c.int("n_positions"),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
        dropout=float(c.get("resid_pdrop", 0.0)),
        attention_dropout=float(c.get("attn_pdrop", 0.0)),
    )


_READERS = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _qwen2,
    "gemma": _gemma,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "gpt2": _gpt2,
}
