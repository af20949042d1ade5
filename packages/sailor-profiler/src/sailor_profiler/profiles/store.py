"""Profile folders: sailor-sim's profile files plus the profiler's provenance sidecar.

A profile folder holds what ``sailor_sim.profiles.files.load_profile_dir`` reads (``*.json`` files
in
format ``sailor-profile/1``, written with ``save_profile_dir``): every entry carries its
status ('ok', or 'oom' for a size that does not fit: an entry without layers, which the
simulator refuses to use), note and provenance (machine, torch, date, input folder) in the
entry's own optional fields. The subfolder ``profiler/`` (which the simulator ignores) keeps
``provenance.json`` with the same records for older readers; folders written before the
entry fields existed are read from it. A
``links.json`` beside the profiles is the network profile (``sailor-network/1``), as
``sailor_sim.Simulator.from_profile_dir`` expects::

    {"format": "sailor-profiler-provenance/1",
     "records": [{"model": "tiny-gpt", "gpu_type": "CPU", "dtype": "fp32",
                  "sequence_length": 128, "microbatch_size": 1, "tp": 1, "status": "ok",
                  "source": "measured", "note": "", "provenance": {"torch": "2.5.1", ...}}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sailor_sim import (
    ProfileEntry,
    ProfileKey,
    ProfileStore,
    SailorSimError,
    load_network_file,
    read_profile_file,
    save_profile_dir,
)

from ..errors import ProfileFolderError

SIDE_DIR = "profiler"
NETWORK_FILE = "links.json"

NETWORK_TABLES = (("links", ("src", "dst")), ("intra_node", ("gpu_type", "count")))
"""The network profile's lists and the fields that name one curve in each: a link between two
endpoints (zone, GPU type, count), an intra-node group (GPU type, count)."""


def network_key(item: dict, fields: tuple[str, ...]) -> str:
    """One curve's identity in ``links.json`` (its ``fields`` of ``NETWORK_TABLES``)."""
    return json.dumps([item[k] for k in fields], sort_keys=True)


def read_network(file: Path) -> dict | None:
    """The validated ``sailor-network/1`` document at ``file``, None when there is none;
    ``ProfileFolderError`` naming the file when it is corrupt."""
    if not file.exists():
        return None
    try:
        load_network_file(file)  # validates
        return json.loads(file.read_text())
    except (SailorSimError, ValueError) as exc:
        raise ProfileFolderError(f"{file} is corrupt: {exc}", field="network") from None


PROVENANCE_FILE = "provenance.json"
PROVENANCE_FORMAT = "sailor-profiler-provenance/1"
_RECORD_KEYS = ("model", "gpu_type", "dtype", "sequence_length", "microbatch_size", "tp")


@dataclass(frozen=True)
class Record:
    """Status and provenance of one profile entry key (see module docstring)."""

    model: str
    gpu_type: str
    dtype: str
    sequence_length: int
    microbatch_size: int
    tp: int
    status: str
    source: str
    note: str = ""
    provenance: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in _RECORD_KEYS)

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: getattr(self, k) for k in _RECORD_KEYS},
            "status": self.status,
            "source": self.source,
            "note": self.note,
            "provenance": self.provenance,
        }


def entry_key(e: ProfileEntry) -> tuple:
    k = e.key
    return (k.model, k.gpu_type, k.dtype, e.sequence_length, k.microbatch_size, k.tp)


def record_for_entry(e: ProfileEntry, provenance: dict[str, Any] | None = None) -> Record:
    """The record an entry carries (status, note, provenance from its own fields)."""
    prov = provenance if provenance is not None else dict(e.provenance or {})
    return Record(*entry_key(e), status=e.status, source=e.source, note=e.note, provenance=prov)


def entry_for_record(rec: Record, entry: ProfileEntry | None) -> ProfileEntry | None:
    """The entry to write for a record: the measured entry with the record's note and
    provenance, or, for 'oom', an entry without layers; None for an 'ok' record without
    an entry."""
    prov = json.loads(json.dumps(rec.provenance, default=str)) or None  # JSON values only
    if rec.status == "oom":
        key = ProfileKey(rec.model, rec.gpu_type, rec.dtype, rec.microbatch_size, rec.tp)
        return ProfileEntry(
            key,
            rec.sequence_length,
            (),
            rec.source,
            status="oom",
            note=rec.note,
            provenance=prov,
            optimizer=entry.optimizer if entry is not None else "adam",
        )
    if entry is None or entry.status != "ok":
        return None
    return replace(entry, note=rec.note, provenance=prov)


@dataclass
class ProfileFolder:
    """Entries (simulator format) and records (status + provenance), keyed alike."""

    store: ProfileStore
    records: dict[tuple, Record]


def read_folder(path: str | Path, allow_empty: bool = False) -> ProfileFolder:
    """Read a profile folder; raise ``ProfileFolderError`` if it is missing or corrupt (or
    holds no entry and no record, unless ``allow_empty``)."""
    folder = Path(path)
    if not folder.is_dir():
        raise ProfileFolderError(f"{folder} is not a folder", field="profile_dir")
    store = ProfileStore()
    try:
        for file in sorted(folder.glob("*.json")):
            if file.name != NETWORK_FILE:  # the network profile lives beside the profiles
                for entry in read_profile_file(file):
                    store.add(entry)
    except SailorSimError as exc:
        raise ProfileFolderError(
            f"{folder} is not a valid profile folder: {exc}", field="profile_dir"
        ) from None
    records = {entry_key(e): record_for_entry(e) for e in store.entries() + store.oom_entries()}
    for rec in _read_records(folder / SIDE_DIR / PROVENANCE_FILE):
        if rec.status != "ok" or rec.key in records:
            records[rec.key] = rec
    if not records and not allow_empty:
        raise ProfileFolderError(f"{folder} holds no profile entries", field="profile_dir")
    return ProfileFolder(store, records)


def _read_records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        if data.get("format") != PROVENANCE_FORMAT:
            raise ValueError(f"format is not {PROVENANCE_FORMAT!r}")
        return [
            Record(
                *(r[k] for k in _RECORD_KEYS),
                status=str(r["status"]),
                source=str(r["source"]),
                note=str(r.get("note", "")),
                provenance=dict(r.get("provenance", {})),
            )
            for r in data["records"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProfileFolderError(f"{path} is corrupt ({exc})", field="provenance") from None


def write_folder(folder: ProfileFolder, path: str | Path) -> list[Path]:
    """Write entries (with their status, note and provenance) with ``save_profile_dir`` and
    the sidecar (atomically, sidecar last)."""
    out = Path(path)
    by_key = {entry_key(e): e for e in folder.store.entries()}
    kept = ProfileStore(
        e for k, e in by_key.items() if k not in folder.records and e.status == "ok"
    )
    for key, rec in folder.records.items():
        e = entry_for_record(rec, by_key.get(key))
        if e is not None:
            kept.add(e)
    written = save_profile_dir(kept, out) if kept.entries() or kept.oom_entries() else []
    side = out / SIDE_DIR
    side.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": PROVENANCE_FORMAT,
        "records": [r.to_dict() for _, r in sorted(folder.records.items())],
    }
    tmp = side / (PROVENANCE_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(side / PROVENANCE_FILE)
    return [*written, side / PROVENANCE_FILE]


def update_folder(
    path: str | Path, entries: list[ProfileEntry], records: list[Record]
) -> list[Path]:
    """Add entries and records to a folder (new ones replace the same keys), creating it."""
    out = Path(path)
    if out.is_dir():
        folder = read_folder(out, allow_empty=True)
    else:
        folder = ProfileFolder(ProfileStore(), {})
    for e in entries:
        folder.store.add(e)
    for r in records:
        folder.records[r.key] = r
    return write_folder(folder, out)
