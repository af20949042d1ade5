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

On-disk format (``profile_files``: written by ``save_profile_dir`` and sailor-profiler, read by
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

import math
from dataclasses import dataclass, field

from ..catalog.gpus import GPUType, get_gpu
from ..dtypes import check_dtype
from ..errors import ProfileError
from ..model.spec import ModelSpec, get_model
from . import analytic

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
    optimizer: str = "adam"
    """The optimizer whose step ``optimizer_s`` timed (scaled to the job's by bytes moved)."""
    status: str = "ok"
    """'ok', or 'oom': this (mbs, TP) did not fit the device when profiled; such an entry has
    no layers and the simulator refuses to estimate with it (``ProfileStore.entry``)."""
    note: str = ""
    """Why (for 'oom' entries: the profiler's message)."""
    provenance: dict | None = field(default=None, compare=False)
    """Where it was measured: JSON scalars by name, e.g. device, driver, cuda, torch, date."""

    @property
    def measured(self) -> bool:
        """Measured by sailor-profiler on the engine's layers (or interpolated between such
        entries), as opposed to analytic or imported from the original Sailor."""
        return "measured" in self.source

    @property
    def label(self) -> str:
        k = self.key
        return (
            f"{k.model} / {k.gpu_type} / {k.dtype} / mbs {k.microbatch_size} / tp {k.tp} / "
            f"seq {self.sequence_length}"
        )


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
        self._oom: dict[ProfileKey, ProfileEntry] = {}
        self._tables: dict[tuple, LayerTable] = {}
        self.version = 0
        """Bumped on every change, so users of cached numbers (the simulator) can notice."""
        self.skipped: list[str] = []
        """Entries a bulk import left out, each with the reason (e.g. wrong layer count)."""
        for e in entries:
            self.add(e)

    def add(self, entry: ProfileEntry) -> None:
        """Add or replace the entry of its key ('oom' entries are kept apart: never a
        neighbour for interpolation, and an error when the exact key is asked for)."""
        model = get_model(entry.key.model)
        if entry.status == "oom":
            self._entries.pop(entry.key, None)
            self._oom[entry.key] = entry
            self._tables.clear()
            self.version += 1
            return
        if entry.status != "ok":
            raise ProfileError(
                f"status must be 'ok' or 'oom', got {entry.status!r}", field="profile.status"
            )
        if len(entry.layers) != model.num_layer_ids:
            raise ProfileError(
                f"{len(entry.layers)} layers for {model.name}, which has {model.num_layer_ids} "
                "layer ids; a profile entry needs every layer id",
                field="profile.layers",
            )
        self._oom.pop(entry.key, None)
        self._entries[entry.key] = entry
        self._tables.clear()
        self.version += 1

    def forget_resolved(self) -> None:
        """Drop the resolved tables (analytic ones read GPU specs): a catalog changed."""
        self._tables.clear()

    def entries(self) -> list[ProfileEntry]:
        """The entries with numbers ('ok'); ``oom_entries`` has the rest."""
        return list(self._entries.values())

    def oom_entries(self) -> list[ProfileEntry]:
        """The 'oom' records (no layers); ``save_profile_dir`` writes them too."""
        return list(self._oom.values())

    def oom_entry(
        self, model: ModelSpec | str, gpu: GPUType | str, dtype: str, mbs: int, tp: int, seq: int
    ) -> ProfileEntry | None:
        """The 'oom' record of this key at this sequence length, if the profiler left one."""
        model, gpu = get_model(model), get_gpu(gpu)
        hit = self._oom.get(ProfileKey(model.name, gpu.name, check_dtype(dtype), mbs, tp))
        return hit if hit is not None and hit.sequence_length == seq else None

    def __len__(self) -> int:
        return len(self._entries)

    # ---- resolution ------------------------------------------------------------------------
    def entry(
        self, model: ModelSpec | str, gpu: GPUType | str, dtype: str, mbs: int, tp: int, seq: int
    ) -> ProfileEntry:
        """The entry for this key, resolved by the rules in the module docstring."""
        model, gpu, dtype = get_model(model), get_gpu(gpu), check_dtype(dtype)
        key = ProfileKey(model.name, gpu.name, dtype, mbs, tp)
        oom = self._oom.get(key)
        if oom is not None and oom.sequence_length == seq:
            raise ProfileError(
                f"{oom.label} is marked 'oom' (did not fit the device when profiled"
                f"{': ' + oom.note if oom.note else ''}); use another microbatch size or TP "
                "degree, or remove the entry to fall back to interpolation",
                field="profile.entries",
            )
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
        e0.optimizer,
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
    return ProfileEntry(key, seq, tuple(layers), source, same_tp, near.optimizer)


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
    # The step moves bytes per parameter by optimizer (SGD fewer than Adam): scale the
    # profiled optimizer's time to the job's.
    opt_scale = _step_bytes(optimizer, dtype) / _step_bytes(entry.optimizer, dtype)
    return LayerTable(
        entry,
        _prefix(layer.forward_s for layer in entry.layers),
        _prefix(layer.backward_s for layer in entry.layers),
        _prefix(layer.optimizer_s * opt_scale for layer in entry.layers),
        _prefix(acts),
        _prefix(params),
    )


def _step_bytes(optimizer: str, dtype: str) -> int:
    table = analytic.SGD_BYTES_PER_PARAM if optimizer == "sgd" else analytic.ADAM_BYTES_PER_PARAM
    return table[dtype]


__all__ = [
    "FORMAT",
    "LINKS_FILE",
    "LayerProfile",
    "LayerTable",
    "ProfileEntry",
    "ProfileKey",
    "ProfileStore",
    "analytic_entry",
]
