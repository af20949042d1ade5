"""Strict readers of the built-in catalog data files in ``sailor_sim/data/``.

Each catalog (models, GPUs, fabrics, prices) is one JSON file, so a value is defined once and
carries its source. The readers reject unknown keys and name the file, the entry and the field
of anything wrong, raising the package's ``ValidationError``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ..errors import ValidationError


def read_data(name: str, fmt: str) -> dict[str, Any]:
    """The parsed JSON document ``sailor_sim/data/<name>``, checked to be in format ``fmt``."""
    text = resources.files("sailor_sim").joinpath("data", name).read_text()
    doc = json.loads(text)
    if doc.get("format") != fmt:
        raise ValidationError(f"data/{name} is not in format {fmt!r}", field="format")
    return doc


def check_keys(entry: dict[str, Any], required: set[str], optional: set[str], where: str) -> None:
    """Raise naming the field when ``entry`` lacks a required key or has an unknown one."""
    if not isinstance(entry, dict):
        raise ValidationError(f"{where} is not an object", field=where)
    missing = sorted(required - set(entry))
    if missing:
        raise ValidationError(f"{where} lacks {missing[0]!r}", field=missing[0])
    unknown = sorted(set(entry) - required - optional)
    if unknown:
        raise ValidationError(
            f"{where} has unknown key {unknown[0]!r}; known: {sorted(required | optional)}",
            field=unknown[0],
        )


_MODEL_REQUIRED = {
    "name",
    "family",
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "ffn_hidden_size",
    "vocab_size",
    "max_seq_len",
    "source",
}
_MODEL_OPTIONAL = {
    "aliases",
    "position",
    "norm",
    "mlp",
    "bias",
    "dropout",
    "attention_dropout",
    "tie_word_embeddings",
    "qkv_bias",
    "norm_bias",
    "num_position_embeddings",
    "rope_base",
    "rope_scaling",
}


def pad_vocab(vocab: int, multiple: int = 128) -> int:
    """Megatron's make-vocab-size-divisible-by: 128 rows keep every power-of-two TP <= 128."""
    return -(-vocab // multiple) * multiple


def padded_vocab_fields(vocab: int) -> dict[str, int]:
    """``vocab_size`` padded, and ``unpadded_vocab_size`` when padding added rows."""
    padded = pad_vocab(vocab)
    return {"vocab_size": padded} | ({"unpadded_vocab_size": vocab} if padded != vocab else {})


def model_fields(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """One catalog entry as ModelSpec keyword arguments (``vocab_size`` is the tokenizer's and
    gets padded)."""
    check_keys(entry, _MODEL_REQUIRED, _MODEL_OPTIONAL, where)
    fields = {k: v for k, v in entry.items() if k not in ("aliases", "source")}
    return fields | padded_vocab_fields(int(fields["vocab_size"]))


def model_entries() -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """(ModelSpec keyword arguments, aliases) of every built-in model, in file order."""
    doc = read_data("models.json", "sailor-models/1")
    return [
        (model_fields(entry, f"data/models.json models[{i}]"), tuple(entry.get("aliases", ())))
        for i, entry in enumerate(doc["models"])
    ]
