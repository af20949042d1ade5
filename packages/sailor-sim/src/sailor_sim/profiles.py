"""Profiles: per-layer forward / backward / optimizer-step seconds and activation memory.

Keyed by (model, GPU type, dtype, microbatch size, TP degree); each entry also records the
sequence length it was measured at, whether its times include TP communication, and its
``source``: 'measured' (sailor-profiler), 'imported:sailor' (original Sailor artifacts),
'interpolated:...' or 'analytic'. A missing entry is never read as zero; ``ProfileStore.entry``
resolves it, best first:

1. the exact entry;
2. linear interpolation between the two nearest measured microbatch sizes at the same TP and
   sequence length (time is affine in the microbatch size once kernels are large);
3. the nearest measured entry (same TP preferred, then the closest microbatch size) scaled per
   layer by the roofline ratio analytic(target) / analytic(neighbour);
4. the roofline estimate (``analytic.py``).

On-disk format (written by ``save_profile_dir`` and sailor-profiler, read by
``load_profile_dir``): a folder of JSON files, one per (model, GPU type, dtype), any name ending in
``.json``::

    {"format": "sailor-profile/1", "model": "OPT-350M", "gpu_type": "GH-96", "dtype": "fp32",
     "sequence_length": 2048, "optimizer": "adam",
     "entries": [{"microbatch_size": 1, "tp": 1, "source": "measured", "includes_tp_comm": true,
                  "layers": [{"layer_id": 0, "forward_s": 2.2e-4, "backward_s": 2e-6,
                              "optimizer_s": 5e-5, "activation_bytes": 16777216}, ...]}]}

Every layer id 0..L+1 must be present; ``activation_bytes`` (bytes kept for backward per
microbatch on one GPU) is optional and, when absent, comes from ``ModelSpec.stash_terms``.
Unknown keys, missing fields, negative or non-finite numbers and truncated files raise
``ProfileError`` naming the file and field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import analytic
from .dtypes import check_dtype
from .errors import ProfileError
from .gpus import GPUType, get_gpu
from .model import ModelSpec, get_model

FORMAT = "sailor-profile/1"
LINKS_FILE = "links.json"
"""The network file a profile folder may hold next to the profiles (``network.py`` format)."""
SOURCES = ("measured", "imported:sailor", "interpolated", "analytic")


@dataclass(frozen=True)
class ProfileKey:
    model: str
    gpu_type: str
    dtype: str
    microbatch_size: int
    tp: int


@dataclass(frozen=True)
class LayerProfile:
    forward_s: float
    backward_s: float
    optimizer_s: float
    activation_bytes: int | None = None
    """Bytes kept for backward per microbatch; None = use the model's analytic accounting."""


@dataclass(frozen=True)
class ProfileEntry:
    key: ProfileKey
    sequence_length: int
    layers: tuple[LayerProfile, ...]
    source: str
    includes_tp_comm: bool = True
    """True when the times were measured with TP, so TP all-reduces are already inside."""


@dataclass(frozen=True)
class LayerTable:
    """Prefix sums over layer ids (index i = sum of layers < i), so any stage costs O(1)."""

    entry: ProfileEntry
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    optimizer: tuple[float, ...]
    activation: tuple[int, ...]
    params: tuple[int, ...]

    def span(self, prefix: tuple, first: int, last: int):
        return prefix[last + 1] - prefix[first]


def _prefix(values) -> tuple:
    out, total = [0], 0
    for v in values:
        total += v
        out.append(total)
    return tuple(out)


class ProfileStore:
    """Profile entries plus the resolution rules above; caches resolved tables per key."""

    def __init__(self, entries=()) -> None:
        self._entries: dict[ProfileKey, ProfileEntry] = {}
        self._tables: dict[tuple, LayerTable] = {}
        self.version = 0
        """Bumped on every change, so users of cached numbers (the simulator) can notice."""
        self.skipped: list[str] = []
        """Entries a bulk import left out, each with the reason (e.g. wrong layer count)."""
        for e in entries:
            self.add(e)

    def add(self, entry: ProfileEntry) -> None:
        model = get_model(entry.key.model)
        if len(entry.layers) != model.num_layer_ids:
            raise ProfileError(
                f"{len(entry.layers)} layers for {model.name}, which has {model.num_layer_ids} "
                "layer ids; a profile entry needs every layer id",
                field="profile.layers",
            )
        self._entries[entry.key] = entry
        self._tables.clear()
        self.version += 1

    def entries(self) -> list[ProfileEntry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    # ---- resolution ------------------------------------------------------------------------
    def entry(
        self, model: ModelSpec | str, gpu: GPUType | str, dtype: str, mbs: int, tp: int, seq: int
    ) -> ProfileEntry:
        """The entry for this key, resolved by the rules in the module docstring."""
        model, gpu, dtype = get_model(model), get_gpu(gpu), check_dtype(dtype)
        key = ProfileKey(model.name, gpu.name, dtype, mbs, tp)
        exact = self._entries.get(key)
        if exact is not None and exact.sequence_length == seq:
            return exact
        same = [
            e
            for e in self._entries.values()
            if (e.key.model, e.key.gpu_type, e.key.dtype) == (model.name, gpu.name, dtype)
        ]
        interpolated = _interpolate_mbs(key, seq, same)
        if interpolated is not None:
            return interpolated
        if same:
            return _scale_neighbour(key, seq, model, gpu, _nearest(key, seq, same))
        return analytic_entry(model, gpu, dtype, mbs, tp, seq)

    def table(
        self,
        model: ModelSpec,
        gpu: GPUType,
        dtype: str,
        mbs: int,
        tp: int,
        seq: int,
        optimizer: str = "adam",
    ) -> LayerTable:
        """Prefix-sum table for one (model, GPU, dtype, mbs, TP, seq), cached."""
        cache_key = (model.name, gpu.name, dtype, mbs, tp, seq, optimizer)
        table = self._tables.get(cache_key)
        if table is None:
            table = self._tables[cache_key] = _build_table(
                self.entry(model, gpu, dtype, mbs, tp, seq), model, gpu, dtype, seq, optimizer
            )
        return table


def analytic_entry(
    model: ModelSpec, gpu: GPUType, dtype: str, mbs: int, tp: int, seq: int
) -> ProfileEntry:
    layers = []
    for i in range(model.num_layer_ids):
        fwd, bwd = analytic.layer_times(model, i, gpu, dtype, mbs, seq, tp)
        opt = analytic.optimizer_time(model.params(i, tp), gpu, dtype, "adam")
        layers.append(LayerProfile(fwd, bwd, opt))
    key = ProfileKey(model.name, gpu.name, dtype, mbs, tp)
    return ProfileEntry(key, seq, tuple(layers), "analytic", includes_tp_comm=False)


def _interpolate_mbs(key: ProfileKey, seq: int, same: list[ProfileEntry]) -> ProfileEntry | None:
    pts = sorted(
        (e.key.microbatch_size, e)
        for e in same
        if e.key.tp == key.tp and e.sequence_length == seq
        if not e.source.startswith(("interpolated", "analytic"))
    )
    lo = max((p for p in pts if p[0] < key.microbatch_size), default=None, key=lambda p: p[0])
    hi = min((p for p in pts if p[0] > key.microbatch_size), default=None, key=lambda p: p[0])
    if lo is None or hi is None:
        return None
    (m0, e0), (m1, e1) = lo, hi
    w = (key.microbatch_size - m0) / (m1 - m0)

    def mix(a: float, b: float) -> float:
        return a + (b - a) * w

    layers = tuple(
        LayerProfile(
            mix(a.forward_s, b.forward_s),
            mix(a.backward_s, b.backward_s),
            mix(a.optimizer_s, b.optimizer_s),
            None
            if a.activation_bytes is None or b.activation_bytes is None
            else round(mix(a.activation_bytes, b.activation_bytes)),
        )
        for a, b in zip(e0.layers, e1.layers, strict=True)
    )
    return ProfileEntry(
        key,
        seq,
        layers,
        f"interpolated:mbs {m0}-{m1} ({e0.source})",
        e0.includes_tp_comm and e1.includes_tp_comm,
    )


def _nearest(key: ProfileKey, seq: int, same: list[ProfileEntry]) -> ProfileEntry:
    def distance(e: ProfileEntry) -> tuple:
        # Same TP first (its TP communication is then inside), else TP 1 (nothing to undo).
        tp_rank = 0 if e.key.tp == key.tp else (1 if e.key.tp == 1 else 2)
        return (
            tp_rank,
            abs(math.log2(e.key.microbatch_size / key.microbatch_size)),
            abs(math.log2(e.sequence_length / seq)),
            e.key.microbatch_size,
        )

    return min(same, key=distance)


def _scale_neighbour(
    key: ProfileKey, seq: int, model: ModelSpec, gpu: GPUType, near: ProfileEntry
) -> ProfileEntry:
    k = near.key
    layers = []
    for i, layer in enumerate(near.layers):
        f_t, b_t = analytic.layer_times(model, i, gpu, key.dtype, key.microbatch_size, seq, key.tp)
        f_n, b_n = analytic.layer_times(
            model, i, gpu, k.dtype, k.microbatch_size, near.sequence_length, k.tp
        )
        opt_ratio = model.params(i, key.tp) / max(model.params(i, k.tp), 1)
        layers.append(
            LayerProfile(
                layer.forward_s * f_t / f_n,
                layer.backward_s * b_t / b_n,
                layer.optimizer_s * opt_ratio,
            )
        )
    source = (
        f"interpolated:roofline-scaled from mbs {k.microbatch_size} tp {k.tp} "
        f"seq {near.sequence_length} ({near.source})"
    )
    same_tp = near.includes_tp_comm and k.tp == key.tp
    return ProfileEntry(key, seq, tuple(layers), source, same_tp)


def _build_table(
    entry: ProfileEntry, model: ModelSpec, gpu: GPUType, dtype: str, seq: int, optimizer: str
) -> LayerTable:
    k = entry.key
    acts = [
        layer.activation_bytes
        if layer.activation_bytes is not None
        else model.activation_stash_bytes(i, k.microbatch_size, seq, dtype, k.tp)
        for i, layer in enumerate(entry.layers)
    ]
    params = [model.params(i, k.tp) for i in range(model.num_layer_ids)]
    opt_scale = 1.0
    if optimizer == "sgd":  # profiles record Adam; SGD moves fewer bytes per parameter
        opt_scale = analytic.SGD_BYTES_PER_PARAM[dtype] / analytic.ADAM_BYTES_PER_PARAM[dtype]
    return LayerTable(
        entry,
        _prefix(layer.forward_s for layer in entry.layers),
        _prefix(layer.backward_s for layer in entry.layers),
        _prefix(layer.optimizer_s * opt_scale for layer in entry.layers),
        _prefix(acts),
        _prefix(params),
    )


# ---- files -----------------------------------------------------------------------------------
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
