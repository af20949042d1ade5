"""``merge``: several profile folders -> one, keeping each entry's provenance.

Per key (model, GPU type, dtype, sequence length, microbatch size, TP), the winner is:

1. an entry that ran ('ok') over an 'oom' record (running proves it fit; OOM depends on the
   memory free at the time);
2. the better source: measured > imported (``imported:*``) > interpolated > analytic > other;
3. the newer measurement (``provenance.date``, ISO 8601; records without a date are oldest);
4. the folder named later on the command line.

The winner's record gains ``provenance.merged_from`` (its input folder). A folder that is
missing, not a profile folder, or holds a corrupt file raises ``ProfileFolderError``.
"""

from __future__ import annotations

from pathlib import Path

from sailor_sim.profiles import ProfileStore

from .store import ProfileFolder, Record, entry_key, read_folder, write_folder

_SOURCE_ORDER = ("measured", "imported", "interpolated", "analytic")


def source_rank(source: str) -> int:
    for i, prefix in enumerate(_SOURCE_ORDER):
        if source.startswith(prefix):
            return i
    return len(_SOURCE_ORDER)


def _preference(rec: Record, position: int) -> tuple:
    # Larger is better (used with max).
    return (rec.status == "ok", -source_rank(rec.source), str(rec.provenance.get("date", "")),
            position)


def merge_folders(paths: list[str | Path]) -> ProfileFolder:
    folders = [read_folder(p) for p in paths]
    best: dict[tuple, tuple[tuple, Record, int]] = {}
    for position, (path, folder) in enumerate(zip(paths, folders, strict=True)):
        for key, rec in folder.records.items():
            pref = _preference(rec, position)
            if key not in best or pref > best[key][0]:
                tagged = Record(**{**rec.to_dict(),
                                   "provenance": {**rec.provenance, "merged_from": str(path)}})
                best[key] = (pref, tagged, position)
    store = ProfileStore()
    for position, folder in enumerate(folders):
        for entry in folder.store.entries():
            chosen = best.get(entry_key(entry))
            if chosen and chosen[2] == position and chosen[1].status == "ok":
                store.add(entry)
    return ProfileFolder(store, {key: rec for key, (_, rec, _) in best.items()})


def merge(paths: list[str | Path], out: str | Path) -> ProfileFolder:
    merged = merge_folders(paths)
    write_folder(merged, out)
    return merged
