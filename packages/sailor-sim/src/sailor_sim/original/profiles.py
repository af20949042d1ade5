"""Readers for the original Sailor profile artifacts.

- ``profiles_tmp.json`` (simulations/): model -> GPU -> mbs -> TP -> layer id -> [fwd, bwd, opt].
- ``sailor_planner/profiles/<model>/<gpu>/profile.json``: {mbs: {tp: {layer: [fwd, bwd, opt]}}}.
- ``llm_info.json``: model -> TP -> layer id -> params / activation floats and bytes at mbs 1.

Names: Sailor's model names ('OPT-350', 'LLAMA-3-8', ...) map through ``get_model``'s aliases.
Layer ids are ours except for LLAMA-3-8, which Sailor profiles with 35 ids (0 embedding,
1..32 blocks, 33 final norm, 34 LM head + loss) where we have 34 (33 = final norm + head + loss):
whenever a Sailor entry has exactly one id more than the model, its last two ids are merged (times
added). The optimizer-step value is one number for the whole profiled model, repeated on every
layer; it is split over layers in proportion to their parameters at that TP degree. All entries
are recorded with source 'imported:sailor' and as including TP communication (Sailor measured
them with Megatron's TP layers). Sailor profiled fp32 training at sequence length 2048.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import ProfileError, UnknownNameError
from ..model.spec import ModelSpec, get_model
from ..profiles.store import LayerProfile, ProfileEntry, ProfileKey, ProfileStore

SAILOR_SEQUENCE_LENGTH = 2048
SAILOR_DTYPE = "fp32"
SOURCE = "imported:sailor"


def load_json(path: Path, field: str) -> Any:
    return inputs.load_json(
        path, field, kind=(dict, list), name="a JSON document", error=ProfileError
    )


def read_profiles_tmp(path: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """Read ``profiles_tmp.json`` (all models and GPUs) into a store."""
    data = load_json(Path(path), "profiles_tmp")
    store = store if store is not None else ProfileStore()
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected an object of models", field="profiles_tmp")
    for model_name, by_gpu in data.items():
        try:
            model = get_model(model_name)
        except UnknownNameError:
            continue  # a model we have no ModelSpec for cannot be simulated anyway
        for gpu_name, by_mbs in by_gpu.items():
            _add_gpu(store, model, gpu_name, by_mbs, f"{path}[{model_name}][{gpu_name}]")
    return store


def read_planner_profile(
    path: str | Path, model: str, gpu_type: str, store: ProfileStore | None = None
) -> ProfileStore:
    """Read one ``sailor_planner/profiles/<model>/<gpu>/profile.json``."""
    store = store if store is not None else ProfileStore()
    data = load_json(Path(path), "profile")
    _add_gpu(store, get_model(model), gpu_type, data, str(path), strict=True)
    return store


def read_planner_profiles(folder: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """Read every ``<model>/<gpu>/profile.json`` under a planner ``profiles`` folder; entries
    already in ``store`` are kept (so profiles_tmp.json, read first, wins where both exist)."""
    store = store if store is not None else ProfileStore()
    extra = ProfileStore()
    for file in sorted(Path(folder).glob("*/*/profile.json")):
        try:
            model = get_model(file.parent.parent.name)
        except UnknownNameError:
            continue
        _add_gpu(extra, model, file.parent.name, load_json(file, "profile"), str(file))
    have = {e.key for e in store.entries()}
    store.skipped.extend(extra.skipped)
    for entry in extra.entries():
        if entry.key not in have:
            store.add(entry)
    return store


def _add_gpu(
    store: ProfileStore, model: ModelSpec, gpu_name: str, by_mbs: Any, where: str, strict=False
) -> None:
    """Add one GPU's entries. In bulk imports (``strict`` false) an entry whose layer count does
    not match the model (the Sailor artifacts hold one such copy-paste slip: GPT-Neo-2.7 / GH-96
    mbs 8 TP 4 has OPT-350's 26 ids) is left out and listed in ``store.skipped``."""
    from ..catalog.gpus import get_gpu

    try:
        gpu = get_gpu(gpu_name)
    except UnknownNameError:
        return
    if not isinstance(by_mbs, dict):
        raise ProfileError("expected {mbs: {tp: {layer: [fwd, bwd, opt]}}}", field=where)
    for mbs, by_tp in by_mbs.items():
        for tp, layers in by_tp.items():
            at = f"{where}[{mbs}][{tp}]"
            try:
                key = ProfileKey(model.name, gpu.name, SAILOR_DTYPE, int(mbs), int(tp))
            except ValueError:
                raise ProfileError("microbatch size and TP must be integers", field=at) from None
            if model.tp_problem(key.tp) is not None:
                continue
            try:
                store.add(_entry(model, key, layers, at))
            except ProfileError as exc:
                if strict:
                    raise
                store.skipped.append(str(exc))


def _entry(model: ModelSpec, key: ProfileKey, layers: Any, where: str) -> ProfileEntry:
    if not isinstance(layers, dict):
        raise ProfileError("expected {layer id: [fwd, bwd, opt]}", field=where)
    try:
        rows = [layers[str(i)] for i in range(len(layers))]
        rows = [(float(r[0]), float(r[1]), float(r[2])) for r in rows]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ProfileError(f"malformed layer entry ({exc!r})", field=where) from None
    n = model.num_layer_ids
    if len(rows) == n + 1:  # Sailor's LLAMA-3-8: final norm and head are separate ids
        f0, b0, o0 = rows[-2]
        f1, b1, _ = rows[-1]
        rows = rows[:-2] + [(f0 + f1, b0 + b1, o0)]
    if len(rows) != n:
        raise ProfileError(
            f"{len(rows)} layer ids, but {model.name} has {n} (or {n + 1} in Sailor's layout)",
            field=where,
        )
    if any(v < 0 for row in rows for v in row):
        raise ProfileError("negative time", field=where)
    whole_model_opt = rows[0][2]
    params = [model.params(i, key.tp) for i in range(n)]
    total = sum(params)
    profiles = tuple(
        LayerProfile(f, b, whole_model_opt * p / total)
        for (f, b, _), p in zip(rows, params, strict=True)
    )
    return ProfileEntry(key, SAILOR_SEQUENCE_LENGTH, profiles, SOURCE, includes_tp_comm=True)


def read_llm_info(path: str | Path) -> dict[str, dict[int, dict[int, dict[str, int]]]]:
    """``llm_info.json`` as {our model name: {tp: {layer id: {field: value}}}} (raw fields)."""
    data = load_json(Path(path), "llm_info")
    out: dict[str, dict[int, dict[int, dict[str, int]]]] = {}
    for name, by_tp in data.items():
        try:
            model = get_model(name)
        except UnknownNameError:
            continue
        out[model.name] = {
            int(tp): {int(layer): dict(v) for layer, v in layers.items()}
            for tp, layers in by_tp.items()
        }
    return out


def read_cluster_config(path: str | Path) -> dict[str, tuple[int, int]]:
    """``basic_cluster_config.json`` as {our GPU type: (GPUs per node, bytes per GPU)}; GPU types
    we do not know are left out (the catalog in ``gpus.py`` uses these same figures)."""
    from ..catalog.gpus import get_gpu

    data = load_json(Path(path), "cluster_config")
    out: dict[str, tuple[int, int]] = {}
    for name, spec in data.items():
        if not isinstance(spec, dict):
            continue  # e.g. "zone": "us-central1-a"
        try:
            gpu = get_gpu(name)
            out[gpu.name] = (int(spec["gpus_per_node"]), int(spec["mem_per_gpu"]))
        except UnknownNameError:
            continue
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{path}[{name}] lacks {exc}", field="cluster_config") from None
    return out


def read_training_config(path: str | Path):
    """A Sailor ``training_config_*.json`` as a Job (global batch, sequence length, optimizer)."""
    from ..spec.job import Job

    data = load_json(Path(path), "training_config")
    try:
        return Job.create(
            data["model"],
            int(data["global_batch_size"]),
            int(data["sequence_length"]),
            SAILOR_DTYPE,
            str(data.get("optimizer", "adam")).lower(),
        )
    except KeyError as exc:
        raise ProfileError(f"{path} lacks {exc}", field="training_config") from None
