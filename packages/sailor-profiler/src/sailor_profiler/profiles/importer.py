"""``import-sailor``: original Sailor artifacts -> a profile folder in our format.

Uses sailor-sim's readers (``sailor_sim.original``): profiles (``profiles_tmp.json`` first, the
planner's per-GPU copies fill gaps) become ``sailor-profile/1`` files with source
'imported:sailor'; network fits become ``links.json`` (``links`` and ``intra_node``). The
same-zone homogeneous fits (``network_coeffs_all_homo.json`` "inter") have no place in the
``sailor-network/1`` file format and are not written; the simulator reads them straight from a
Sailor checkout (``load_sailor_network``).
"""

from __future__ import annotations

import json
from pathlib import Path

from sailor_sim import link_to_dict, load_sailor_network, load_sailor_profiles

from .store import ProfileFolder, record_for_entry, write_folder


def import_sailor(root: str | Path, out: str | Path) -> dict[str, int]:
    """Convert; returns counts of what was written. Errors are sailor-sim ``ProfileError``."""
    root, out = Path(root), Path(out)
    store = load_sailor_profiles(root)
    prov = {"sailor_root": str(root.resolve())}
    records = {}
    for e in store.entries():
        rec = record_for_entry(e, prov)
        records[rec.key] = rec
    write_folder(ProfileFolder(store, records), out)
    network = load_sailor_network(root)
    doc = {
        "format": "sailor-network/1",
        "links": [
            {"src": vars(src), "dst": vars(dst), **link_to_dict(curve)}
            for (src, dst), curve in sorted(network.links.items(), key=lambda kv: str(kv[0]))
        ],
        "intra_node": [
            {"gpu_type": gpu, "count": count, **link_to_dict(curve)}
            for (gpu, count), curve in sorted(network.intra.items())
        ],
    }
    (out / "links.json").write_text(json.dumps(doc, indent=1))
    return {
        "profile_entries": len(store),
        "links": len(doc["links"]),
        "intra_node": len(doc["intra_node"]),
    }
