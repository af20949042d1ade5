"""Import of the original Sailor artifacts and merging of profile folders with provenance."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_profiler.cli import app
from sailor_profiler.profiles.store import Record, read_folder, update_folder
from sailor_sim import Job, Plan, ProfileError, get_model
from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey
from sailor_sim.simulate.simulator import Simulator

_DEFAULT_REFERENCE = Path(__file__).resolve().parents[3].parent / "shared" / "reference"
REFERENCE = Path(os.environ.get("SAILOR_REFERENCE", _DEFAULT_REFERENCE))
SAILOR_ROOT = REFERENCE / "sailor-artifacts"


def entry(mbs: int, tp: int, fwd: float, source: str, model: str = "tiny-gpt") -> ProfileEntry:
    spec = get_model(model)
    layers = tuple(
        LayerProfile(fwd, 2 * fwd, fwd / 10, 1000 * mbs) for _ in range(spec.num_layer_ids)
    )
    return ProfileEntry(ProfileKey(spec.name, "CPU", "fp32", mbs, tp), 128, layers, source)


def record(e: ProfileEntry, status="ok", date="2026-01-01T00:00:00Z") -> Record:
    k = e.key
    return Record(
        k.model,
        k.gpu_type,
        k.dtype,
        e.sequence_length,
        k.microbatch_size,
        k.tp,
        status,
        e.source,
        provenance={"date": date},
    )


def folder(path: Path, entries, records=None) -> Path:
    update_folder(
        path, list(entries), records if records is not None else [record(e) for e in entries]
    )
    return path


def merged_fwd(path: Path, mbs: int, tp: int = 1) -> float:
    store = read_folder(path).store
    return (
        next(e for e in store.entries() if (e.key.microbatch_size, e.key.tp) == (mbs, tp))
        .layers[0]
        .forward_s
    )


def test_measured_wins_over_imported_and_analytic_in_any_order(tmp_path):
    a = folder(tmp_path / "a", [entry(1, 1, 1.0, "analytic"), entry(2, 1, 2.0, "imported:sailor")])
    b = folder(tmp_path / "b", [entry(1, 1, 0.5, "imported:sailor"), entry(2, 1, 0.7, "measured")])
    for order in ([a, b], [b, a]):
        out = tmp_path / f"m{order[0].name}"
        result = CliRunner().invoke(app, ["merge", *map(str, order), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert merged_fwd(out, 1) == 0.5 and merged_fwd(out, 2) == 0.7
        records = read_folder(out).records
        assert {r.provenance["merged_from"] for r in records.values()} == {str(b)}


def test_newest_wins_between_equal_sources_and_provenance_is_kept(tmp_path):
    old, new = entry(1, 1, 1.0, "measured"), entry(1, 1, 0.9, "measured")
    a = folder(tmp_path / "a", [new], [record(new, date="2026-11-02T00:00:00Z")])
    b = folder(tmp_path / "b", [old], [record(old, date="2025-01-01T00:00:00Z")])
    out = tmp_path / "m"
    assert CliRunner().invoke(app, ["merge", str(a), str(b), "--out", str(out)]).exit_code == 0
    assert merged_fwd(out, 1) == 0.9
    doc = json.loads((out / "profiler" / "provenance.json").read_text())
    (rec,) = doc["records"]
    assert rec["provenance"]["date"] == "2026-11-02T00:00:00Z"
    assert rec["provenance"]["merged_from"] == str(a)


def test_oom_records_survive_unless_an_entry_ran(tmp_path):
    ran = entry(4, 1, 1.0, "measured")
    oom4 = Record("tiny-gpt", "CPU", "fp32", 128, 4, 1, "oom", "measured", "too big")
    oom8 = Record("tiny-gpt", "CPU", "fp32", 128, 8, 1, "oom", "measured", "too big")
    a = folder(tmp_path / "a", [entry(1, 1, 1.0, "measured")], [oom4, oom8])
    b = folder(tmp_path / "b", [ran])
    merged = read_folder(tmp_path / "a")
    assert merged.records[oom8.key].status == "oom"
    out = tmp_path / "m"
    assert CliRunner().invoke(app, ["merge", str(a), str(b), "--out", str(out)]).exit_code == 0
    records = read_folder(out).records
    assert records[oom4.key].status == "ok" and records[oom8.key].status == "oom"
    assert len(read_folder(out).store) == 2  # the OOM key has no simulator entry


def test_compute_records_sizes_that_do_not_fit(tmp_path):
    out = tmp_path / "o"
    out.mkdir()  # a folder that already holds a network profile: compute adds beside it
    intra = {"gpu_type": "CPU", "count": 2, "max_bandwidth": 1e9, "latency_s": 1e-4}
    network = {"format": "sailor-network/1", "links": [], "intra_node": [intra]}
    (out / "links.json").write_text(json.dumps(network))
    result = CliRunner().invoke(
        app,
        [
            "compute",
            "--model",
            "tiny-gpt",
            "--mbs",
            "1,4",
            "--out",
            str(out),
            "--memory-limit-gb",
            "0.000001",
            "--no-plot",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "profiler" / "provenance.json").read_text())
    assert [(r["microbatch_size"], r["status"]) for r in doc["records"]] == [(1, "oom"), (4, "oom")]
    assert "estimated" in doc["records"][0]["note"]  # each size is recorded as OOM...
    (profile,) = [p for p in out.glob("*.json") if p.name != "links.json"]
    entries = json.loads(profile.read_text())["entries"]  # ...in the profile file itself
    assert [(e["microbatch_size"], e["status"], e["layers"]) for e in entries] == [
        (1, "oom", []),
        (4, "oom", []),
    ]
    assert all(e["provenance"]["torch"] and e["provenance"]["date"] for e in entries)
    sim = Simulator.from_profile_dir(out)
    assert sim.network.intra_node("CPU", 2).max_bandwidth == 1e9
    job = Job.create("tiny-gpt", 4, 128)
    with pytest.raises(ProfileError, match="marked 'oom'"):  # the simulator refuses it
        sim.estimate(job, Plan.uniform(job, "CPU", "local", pp=1, dp=1, tp=1, microbatch_size=4))


needs_reference = pytest.mark.skipif(
    not SAILOR_ROOT.is_dir(), reason=f"reference data absent ({SAILOR_ROOT}); set SAILOR_REFERENCE"
)


@needs_reference
def test_import_sailor_then_merge_with_a_measurement(tmp_path):
    imported = tmp_path / "imported"
    result = CliRunner().invoke(
        app, ["import-sailor", "--sailor-root", str(SAILOR_ROOT), "--out", str(imported)]
    )
    assert result.exit_code == 0, result.output
    sim = Simulator.from_profile_dir(imported)
    assert len(sim.profiles) > 50 and sim.network.links and sim.network.intra
    sources = {e.source for e in sim.profiles.entries()}
    assert sources == {"imported:sailor"}
    job = Job.create("OPT-350M", 64, 2048)
    plan = Plan.uniform(job, "A100-40", "us-central1-a", pp=2, dp=2, tp=1, microbatch_size=2)
    assert sim.estimate(job, plan).sources == ("imported:sailor",)
    measured = folder(tmp_path / "measured", [entry(1, 1, 0.25, "measured")])
    out = tmp_path / "merged"
    result = CliRunner().invoke(app, ["merge", str(imported), str(measured), "--out", str(out)])
    assert result.exit_code == 0, result.output
    merged = read_folder(out)
    assert len(merged.store) == len(sim.profiles) + 1
    assert {r.source for r in merged.records.values()} == {"imported:sailor", "measured"}
    merged_sim = Simulator.from_profile_dir(out)  # the network profile is carried over
    assert len(merged_sim.network.links) == len(sim.network.links)


def test_merge_into_a_profile_folder_not_among_the_inputs_is_refused(tmp_path):
    """`merge imported/ --out mine/` wrote the imported entry over mine/'s measured one of the
    same key (and would have replaced its links.json), whatever the order of preference says;
    now one line naming --out, and the folder named among the inputs merges into it."""
    imported = folder(tmp_path / "imported", [entry(1, 1, 0.5, "imported:sailor")])
    mine = folder(tmp_path / "mine", [entry(1, 1, 0.7, "measured")])
    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, ["merge", str(imported), "--out", str(mine)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: --out: {mine} already holds profiles (tiny-gpt__CPU__fp32__s128.json, "
        f"profiler/provenance.json); to keep them, name {mine} among the folders to merge, or "
        "give a new --out"
    ]
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == before
    result = CliRunner().invoke(app, ["merge", str(imported), str(mine), "--out", str(mine)])
    assert result.exit_code == 0, result.output
    assert merged_fwd(mine, 1) == 0.7  # measured wins, as merge promises


@needs_reference
def test_import_sailor_into_a_profile_folder_is_refused(tmp_path):
    """`import-sailor --out prof/` over a folder holding measurements replaced its links.json
    (a measured network profile) with the imported fits, and its entries of the same keys."""
    mine = folder(tmp_path / "mine", [entry(1, 1, 0.7, "measured")])
    (mine / "links.json").write_text('{"format": "sailor-network/1", "links": []}')
    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    result = CliRunner().invoke(
        app, ["import-sailor", "--sailor-root", str(SAILOR_ROOT), "--out", str(mine)]
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --out: {mine} already holds profiles (links.json, ")
    assert line.endswith(f"then `sailor-profiler merge NEW {mine} --out {mine}`")
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == before
