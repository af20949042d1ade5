"""``merge``: several profile folders -> one, keeping each entry's provenance.

Per key (model, GPU type, dtype, sequence length, microbatch size, TP), the winner is:

1. an entry that ran ('ok') over an 'oom' record (running proves it fit; OOM depends on the
   memory free at the time);
2. the better source: measured > imported (``imported:*``) > interpolated > analytic > other;
3. the newer measurement (``provenance.date``, ISO 8601; records without a date are oldest);
4. the folder named later on the command line.

The winner's record gains ``provenance.merged_from`` (its input folder). A folder that is
missing, not a profile folder, or holds a corrupt file raises ``ProfileFolderError``.

Network profiles (``links.json``) are merged per link (src, dst) and per intra-node
(GPU type, count) with the same source order, later folders winning ties.
"""

from __future__ import annotations

import json
from pathlib import Path

from sailor_sim import ProfileStore

from .store import (
    NETWORK_FILE,
    NETWORK_TABLES,
    ProfileFolder,
    Record,
    entry_key,
    network_key,
    read_folder,
    read_network,
    write_folder,
)

_SOURCE_ORDER = ("measured", "imported", "interpolated", "analytic")


def source_rank(source: str) -> int:
    for i, prefix in enumerate(_SOURCE_ORDER):
        if source.startswith(prefix):
            return i
    return len(_SOURCE_ORDER)


def _preference(rec: Record, position: int) -> tuple:
    # Larger is better (used with max).
    return (
        rec.status == "ok",
        -source_rank(rec.source),
        str(rec.provenance.get("date", "")),
        position,
    )


def merge_folders(paths: list[str | Path]) -> ProfileFolder:
    folders = [read_folder(p) for p in paths]
    best: dict[tuple, tuple[tuple, Record, int]] = {}
    for position, (path, folder) in enumerate(zip(paths, folders, strict=True)):
        for key, rec in folder.records.items():
            pref = _preference(rec, position)
            if key not in best or pref > best[key][0]:
                tagged = Record(
                    **{**rec.to_dict(), "provenance": {**rec.provenance, "merged_from": str(path)}}
                )
                best[key] = (pref, tagged, position)
    store = ProfileStore()
    for position, folder in enumerate(folders):
        for entry in folder.store.entries():
            chosen = best.get(entry_key(entry))
            ok = entry.status == "ok"  # 'oom' entries are rebuilt from their records
            if ok and chosen and chosen[2] == position and chosen[1].status == "ok":
                store.add(entry)
    return ProfileFolder(store, {key: rec for key, (_, rec, _) in best.items()})


def merge_networks(paths: list[str | Path]) -> dict | None:
    """The merged ``sailor-network/1`` document, or None when no folder has one."""
    links: dict[str, tuple[int, dict]] = {}
    intra: dict[str, tuple[int, dict]] = {}
    found = False
    for path in paths:
        doc = read_network(Path(path) / NETWORK_FILE)
        if doc is None:
            continue
        found = True
        for (name, key_fields), table in zip(NETWORK_TABLES, (links, intra), strict=True):
            for item in doc.get(name, []):
                key = network_key(item, key_fields)
                rank = -source_rank(str(item.get("source", "")))
                if key not in table or rank >= table[key][0]:
                    table[key] = (rank, item)
    if not found:
        return None
    return {
        "format": "sailor-network/1",
        "links": [v for _, v in links.values()],
        "intra_node": [v for _, v in intra.values()],
    }


def merge(paths: list[str | Path], out: str | Path) -> ProfileFolder:
    merged = merge_folders(paths)
    network = merge_networks(paths)
    write_folder(merged, out)
    if network is not None:
        (Path(out) / NETWORK_FILE).write_text(json.dumps(network, indent=1))
    return merged
