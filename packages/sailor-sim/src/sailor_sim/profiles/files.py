"""The profile file format ``sailor-profile/1`` (see ``profiles.py`` for the layout): writing
a store as one JSON file per (model, GPU type, dtype, sequence length), atomically, and strict
reading that names the file and field of anything malformed or truncated."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .. import inputs
from ..catalog.gpus import get_gpu
from ..dtypes import check_dtype
from ..errors import ProfileError
from ..model.spec import get_model
from ..spec.job import OPTIMIZERS
from .store import FORMAT, LINKS_FILE, LayerProfile, ProfileEntry, ProfileKey, ProfileStore

_FILE_KEYS = {"format", "model", "gpu_type", "dtype", "sequence_length", "optimizer", "entries"}
_ENTRY_KEYS = {
    "microbatch_size",
    "tp",
    "source",
    "includes_tp_comm",
    "layers",
    "status",
    "note",
    "provenance",
}
STATUSES = ("ok", "oom")
_LAYER_KEYS = {"layer_id", "forward_s", "backward_s", "optimizer_s", "activation_bytes"}


def profile_file_dict(entries: list[ProfileEntry]) -> dict[str, Any]:
    """The JSON document for entries that share (model, GPU type, dtype, sequence length,
    optimizer)."""
    first = entries[0]
    optimizers = {e.optimizer for e in entries}
    if len(optimizers) > 1:
        raise ProfileError(
            f"one file holds one optimizer, got {sorted(optimizers)}; write them apart",
            field="profile.optimizer",
        )
    return {
        "format": FORMAT,
        "model": first.key.model,
        "gpu_type": first.key.gpu_type,
        "dtype": first.key.dtype,
        "sequence_length": first.sequence_length,
        "optimizer": first.optimizer,
        "entries": [_entry_dict(e) for e in entries],
    }


def _entry_dict(e: ProfileEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "microbatch_size": e.key.microbatch_size,
        "tp": e.key.tp,
        "source": e.source,
        "includes_tp_comm": e.includes_tp_comm,
    }
    if e.status != "ok":  # absent means "ok": files written before the field stay valid
        out["status"] = e.status
    if e.note:
        out["note"] = e.note
    if e.provenance:
        out["provenance"] = dict(e.provenance)
    out["layers"] = [
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
    ]
    return out


def save_profile_dir(store: ProfileStore, path: str | Path) -> list[Path]:
    """Write every entry of ``store`` as one JSON file per (model, GPU, dtype, seq)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple, list[ProfileEntry]] = {}
    for e in store.entries() + store.oom_entries():
        k = (e.key.model, e.key.gpu_type, e.key.dtype, e.sequence_length, e.optimizer)
        groups.setdefault(k, []).append(e)
    written = []
    for (model, gpu, dtype, seq, optimizer), entries in sorted(groups.items()):
        entries.sort(key=lambda e: (e.key.microbatch_size, e.key.tp))
        suffix = "" if optimizer == "adam" else f"__{optimizer}"  # adam: the original names
        # a model read from a config.json is named by its path: keep the file in ``folder``
        stem = re.sub(r"[^A-Za-z0-9.+-]+", "_", model).strip("_")
        target = folder / f"{stem}__{gpu}__{dtype}__s{seq}{suffix}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(profile_file_dict(entries), indent=1))
        tmp.replace(target)  # atomic: a reader never sees half a file
        written.append(target)
    return written


def load_profile_dir(path: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """Read every ``*.json`` profile file of a folder into a (new or given) store; the
    folder's network file (``links.json``, or any file in the ``sailor-network`` format) is
    skipped here, as ``Simulator.from_profile_dir`` reads it with ``load_network_file``."""
    folder = Path(path)
    if not folder.is_dir():
        raise ProfileError(f"{folder} is not a folder of profile files", field="profile_dir")
    store = store if store is not None else ProfileStore()
    for file in sorted(folder.glob("*.json")):
        if file.name == LINKS_FILE or _is_network_file(file):
            continue
        for entry in read_profile_file(file):
            store.add(entry)
    return store


BUILT_IN_PROFILES = "the built-in analytic profiles and default links"
"""What a command without a profile folder estimates on (``Simulator()``)."""


def empty_folder_warning(
    path: str | Path | None, flag: str, instead: str = BUILT_IN_PROFILES
) -> str:
    """The one line a command prints on stderr when the profile folder given as ``flag`` holds
    no profile file at all (no ``*.json``: neither a profile nor ``links.json``); "" for any
    other folder, a path that is no folder (refused where it is read) and None (not given).
    Such a folder reads as no profiles, so the command runs on ``instead``; it used to do so
    silently, and a wrong or not yet written folder passed for a profiled estimate."""
    folder = Path(path) if path is not None else None
    if folder is None or not folder.is_dir() or any(folder.glob("*.json")):
        return ""
    return f"warning: {flag} {folder} holds no profile files (*.json); using {instead} instead"


def _is_network_file(path: Path) -> bool:
    """A ``sailor-network/*`` document under another name (cheap: only its start is read)."""
    with open(path, "rb") as fh:
        head = fh.read(256)
    return b'"format": "sailor-network/' in head or b'"format":"sailor-network/' in head


def read_profile_file(path: str | Path) -> list[ProfileEntry]:
    path = Path(path)
    text = inputs.read_text(path, "profile", error=ProfileError)
    data = inputs.parse_json(text, "profile", str(path), error=ProfileError)
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
    optimizer = data.get("optimizer", "adam")
    if optimizer not in OPTIMIZERS:
        raise ProfileError(
            f"unknown optimizer {optimizer!r}; one of {list(OPTIMIZERS)}",
            field=f"{where}.optimizer",
        )
    if not isinstance(data["entries"], list):
        raise ProfileError("must be a list of entries", field=f"{where}.entries")
    entries = []
    for n, e in enumerate(data["entries"]):
        at = f"{where}.entries[{n}]"
        _check_keys(e, _ENTRY_KEYS, at, required={"microbatch_size", "tp"})
        status = e.get("status", "ok")
        if status not in STATUSES:
            raise ProfileError(
                f"status must be one of {list(STATUSES)}, got {status!r}", field=f"{at}.status"
            )
        note = e.get("note", "")
        if not isinstance(note, str):
            raise ProfileError(f"must be a string, got {note!r}", field=f"{at}.note")
        provenance = _provenance(e.get("provenance"), f"{at}.provenance")
        layers = _oom_layers(e, at) if status == "oom" else _layers(e, model, at)
        entries.append(
            ProfileEntry(
                _key(model, gpu, dtype, e, at),
                seq,
                layers,
                str(e.get("source", "measured")),
                bool(e.get("includes_tp_comm", True)),
                optimizer,
                status,
                note,
                provenance,
            )
        )
    return entries


def _oom_layers(e: dict, at: str) -> tuple[LayerProfile, ...]:
    """An entry that did not fit carries no layers."""
    if e.get("layers", []):
        raise ProfileError("an 'oom' entry has no layers", field=f"{at}.layers")
    return ()


def _layers(e: dict, model, at: str) -> tuple[LayerProfile, ...]:
    """The per-layer-id timings of a measured entry, one per layer id, in order."""
    if "layers" not in e:
        raise ProfileError("missing ['layers']", field=at)
    layers_raw = e["layers"]
    if not isinstance(layers_raw, list) or len(layers_raw) != model.num_layer_ids:
        raise ProfileError(
            f"needs {model.num_layer_ids} layers (ids 0..{model.head_layer_id}) for {model.name}",
            field=f"{at}.layers",
        )
    layers = []
    for i, layer in enumerate(layers_raw):
        la = f"{at}.layers[{i}]"
        _check_keys(layer, _LAYER_KEYS, la, required={"forward_s", "backward_s"})
        if layer.get("layer_id", i) != i:
            raise ProfileError(f"layer_id {layer['layer_id']} out of order, expected {i}", field=la)
        act = layer.get("activation_bytes")
        layers.append(
            LayerProfile(
                _seconds(layer["forward_s"], f"{la}.forward_s"),
                _seconds(layer["backward_s"], f"{la}.backward_s"),
                _seconds(layer.get("optimizer_s", 0.0), f"{la}.optimizer_s"),
                None if act is None else _int(act, f"{la}.activation_bytes", minimum=0),
            )
        )
    return tuple(layers)


def _key(model, gpu, dtype: str, e: dict, at: str) -> ProfileKey:
    return ProfileKey(
        model.name,
        gpu.name,
        dtype,
        _int(e["microbatch_size"], f"{at}.microbatch_size"),
        _int(e["tp"], f"{at}.tp"),
    )


def _provenance(value: Any, field: str) -> dict | None:
    """A JSON object (device, driver, cuda, torch, date, host, ...), or absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProfileError(f"must be an object, got {type(value).__name__}", field=field)
    return dict(value)


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
