"""The profile file format ``sailor-profile/1`` (see ``profiles.py`` for the layout): writing
a store as one JSON file per (model, GPU type, dtype, sequence length), atomically, and strict
reading that names the file and field of anything malformed or truncated."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .dtypes import check_dtype
from .errors import ProfileError
from .gpus import get_gpu
from .model import get_model
from .profiles import FORMAT, LINKS_FILE, LayerProfile, ProfileEntry, ProfileKey, ProfileStore

_FILE_KEYS = {"format", "model", "gpu_type", "dtype", "sequence_length", "optimizer", "entries"}
_ENTRY_KEYS = {"microbatch_size", "tp", "source", "includes_tp_comm", "layers"}
_LAYER_KEYS = {"layer_id", "forward_s", "backward_s", "optimizer_s", "activation_bytes"}


def profile_file_dict(entries: list[ProfileEntry]) -> dict[str, Any]:
    """The JSON document for entries that share (model, GPU type, dtype, sequence length)."""
    first = entries[0]
    return {
        "format": FORMAT,
        "model": first.key.model,
        "gpu_type": first.key.gpu_type,
        "dtype": first.key.dtype,
        "sequence_length": first.sequence_length,
        "optimizer": "adam",
        "entries": [
            {
                "microbatch_size": e.key.microbatch_size,
                "tp": e.key.tp,
                "source": e.source,
                "includes_tp_comm": e.includes_tp_comm,
                "layers": [
                    {
                        "layer_id": i,
                        "forward_s": layer.forward_s,
                        "backward_s": layer.backward_s,
                        "optimizer_s": layer.optimizer_s,
                        **(
                            {"activation_bytes": layer.activation_bytes}
                            if layer.activation_bytes is not None
                            else {}
                        ),
                    }
                    for i, layer in enumerate(e.layers)
                ],
            }
            for e in entries
        ],
    }


def save_profile_dir(store: ProfileStore, path: str | Path) -> list[Path]:
    """Write every entry of ``store`` as one JSON file per (model, GPU, dtype, seq)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple, list[ProfileEntry]] = {}
    for e in store.entries():
        groups.setdefault((e.key.model, e.key.gpu_type, e.key.dtype, e.sequence_length), []).append(
            e
        )
    written = []
    for (model, gpu, dtype, seq), entries in sorted(groups.items()):
        entries.sort(key=lambda e: (e.key.microbatch_size, e.key.tp))
        target = folder / f"{model}__{gpu}__{dtype}__s{seq}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(profile_file_dict(entries), indent=1))
        tmp.replace(target)  # atomic: a reader never sees half a file
        written.append(target)
    return written


def load_profile_dir(path: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """Read every ``*.json`` profile file of a folder into a (new or given) store."""
    folder = Path(path)
    if not folder.is_dir():
        raise ProfileError(f"{folder} is not a folder of profile files", field="profile_dir")
    store = store if store is not None else ProfileStore()
    for file in sorted(folder.glob("*.json")):
        if file.name == LINKS_FILE:
            continue
        for entry in read_profile_file(file):
            store.add(entry)
    return store


def read_profile_file(path: str | Path) -> list[ProfileEntry]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{path} is not valid JSON, truncated? ({exc})", field="profile"
        ) from None
    return parse_profile_dict(data, str(path))


def parse_profile_dict(data: Any, where: str = "profile") -> list[ProfileEntry]:
    _check_keys(
        data, _FILE_KEYS, where, required={"format", "model", "gpu_type", "dtype", "entries"}
    )
    if data["format"] != FORMAT:
        raise ProfileError(
            f"format is {data['format']!r}, expected {FORMAT!r}", field=f"{where}.format"
        )
    try:
        model, gpu = get_model(data["model"]), get_gpu(data["gpu_type"])
        dtype = check_dtype(data["dtype"])
    except ValueError as exc:
        raise ProfileError(str(exc), field=where) from None
    seq = _int(data.get("sequence_length", model.max_seq_len), f"{where}.sequence_length")
    entries = []
    for n, e in enumerate(data["entries"]):
        at = f"{where}.entries[{n}]"
        _check_keys(e, _ENTRY_KEYS, at, required={"microbatch_size", "tp", "layers"})
        layers_raw = e["layers"]
        if not isinstance(layers_raw, list) or len(layers_raw) != model.num_layer_ids:
            raise ProfileError(
                f"needs {model.num_layer_ids} layers (ids 0..{model.head_layer_id}) "
                f"for {model.name}",
                field=f"{at}.layers",
            )
        layers = []
        for i, layer in enumerate(layers_raw):
            la = f"{at}.layers[{i}]"
            _check_keys(layer, _LAYER_KEYS, la, required={"forward_s", "backward_s"})
            if layer.get("layer_id", i) != i:
                raise ProfileError(
                    f"layer_id {layer['layer_id']} out of order, expected {i}", field=la
                )
            act = layer.get("activation_bytes")
            layers.append(
                LayerProfile(
                    _seconds(layer["forward_s"], f"{la}.forward_s"),
                    _seconds(layer["backward_s"], f"{la}.backward_s"),
                    _seconds(layer.get("optimizer_s", 0.0), f"{la}.optimizer_s"),
                    None if act is None else _int(act, f"{la}.activation_bytes", minimum=0),
                )
            )
        key = ProfileKey(
            model.name,
            gpu.name,
            dtype,
            _int(e["microbatch_size"], f"{at}.microbatch_size"),
            _int(e["tp"], f"{at}.tp"),
        )
        source = str(e.get("source", "measured"))
        entries.append(
            ProfileEntry(key, seq, tuple(layers), source, bool(e.get("includes_tp_comm", True)))
        )
    return entries


def _check_keys(data: Any, allowed: set[str], where: str, required: set[str]) -> None:
    if not isinstance(data, dict):
        raise ProfileError(f"expected an object, got {type(data).__name__}", field=where)
    unknown = set(data) - allowed
    if unknown:
        raise ProfileError(
            f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}", field=where
        )
    missing = required - set(data)
    if missing:
        raise ProfileError(f"missing {sorted(missing)}", field=where)


def _seconds(value: Any, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ProfileError(f"must be a finite number >= 0, got {value!r}", field=field)
    return float(value)


def _int(value: Any, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProfileError(f"must be an integer >= {minimum}, got {value!r}", field=field)
    return value
