"""Profile format additions: the real optimizer, 'oom' entries, per-entry provenance, and a
profile folder that also holds its network file. Files written before them still load."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sailor_sim import Job, Plan, ProfileError, ProfileStore, Simulator, get_gpu, get_model
from sailor_sim.profiles.files import load_profile_dir, save_profile_dir
from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey

M = get_model("tiny-gpt")
PROV = {
    "device": "NVIDIA A100-SXM4-40GB",
    "driver": "550.54",
    "torch": "2.5.1",
    "date": "2026-11-20T10:00:00Z",
    "repetitions": 20,
}


def entry(mbs: int, tp: int = 1, **kw) -> ProfileEntry:
    layers = tuple(
        LayerProfile(1e-3 * (i + 1), 2e-3 * (i + 1), 1e-4) for i in range(M.num_layer_ids)
    )
    return ProfileEntry(
        ProfileKey(M.name, "A100-40", "fp32", mbs, tp), 128, layers, "measured", **kw
    )


def oom(mbs: int, tp: int = 1) -> ProfileEntry:
    return dataclasses.replace(
        entry(mbs, tp), layers=(), status="oom", note="CUDA OOM", provenance=PROV
    )


def test_network_file_in_a_profile_folder_is_skipped(tmp_path):
    save_profile_dir(ProfileStore([entry(1)]), tmp_path)
    links = {"format": "sailor-network/1", "links": [], "intra_node": []}
    (tmp_path / "links.json").write_text(json.dumps(links))
    (tmp_path / "network-copy.json").write_text(json.dumps(links))  # same format, other name
    assert len(load_profile_dir(tmp_path)) == 1
    sim = Simulator.from_profile_dir(tmp_path)
    assert len(sim.profiles) == 1


def test_the_real_optimizer_is_written_and_read(tmp_path):
    save_profile_dir(ProfileStore([entry(1, optimizer="sgd"), entry(2)]), tmp_path)
    files = sorted(p.name for p in tmp_path.glob("*.json"))
    assert files == [
        f"{M.name}__A100-40__fp32__s128.json",
        f"{M.name}__A100-40__fp32__s128__sgd.json",
    ]
    sgd = json.loads((tmp_path / files[1]).read_text())
    assert sgd["optimizer"] == "sgd"
    back = {e.key.microbatch_size: e.optimizer for e in load_profile_dir(tmp_path).entries()}
    assert back == {1: "sgd", 2: "adam"}
    # An SGD-timed step costs more when the job runs Adam (more bytes per parameter).
    store, gpu = load_profile_dir(tmp_path), get_gpu("A100-40")
    t_adam = store.table(M, gpu, "fp32", 1, 1, 128, "adam")
    t_sgd = store.table(M, gpu, "fp32", 1, 1, 128, "sgd")
    assert t_sgd.optimizer[-1] == pytest.approx(1e-4 * M.num_layer_ids)
    assert t_adam.optimizer[-1] > t_sgd.optimizer[-1]


def test_files_without_the_new_fields_still_load(tmp_path):
    save_profile_dir(ProfileStore([entry(1)]), tmp_path)
    path = next(tmp_path.glob("*.json"))
    doc = json.loads(path.read_text())
    del doc["optimizer"]
    path.write_text(json.dumps(doc))
    (e,) = load_profile_dir(tmp_path).entries()
    assert (e.optimizer, e.status, e.provenance) == ("adam", "ok", None)


def test_oom_and_provenance_round_trip_and_the_simulator_refuses_oom(tmp_path):
    store = ProfileStore([dataclasses.replace(entry(1), provenance=PROV), entry(4), oom(2)])
    save_profile_dir(store, tmp_path)
    doc = json.loads(next(tmp_path.glob("*.json")).read_text())
    by_mbs = {e["microbatch_size"]: e for e in doc["entries"]}
    assert by_mbs[2]["status"] == "oom" and by_mbs[2]["layers"] == []
    assert by_mbs[1]["provenance"] == PROV and "status" not in by_mbs[1]
    back = load_profile_dir(tmp_path)
    assert back.oom_entry(M, "A100-40", "fp32", 2, 1, 128).note == "CUDA OOM"
    assert {e.key.microbatch_size: e.provenance for e in back.entries()}[1] == PROV
    sim = Simulator(back)
    job = Job.create(M.name, 8, 128)
    ok = sim.estimate(
        job, Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=1, tp=1, microbatch_size=4)
    )
    assert ok.iteration_time_s > 0
    with pytest.raises(ProfileError, match=r"mbs 2 / tp 1 / seq 128 is marked 'oom'.*CUDA OOM"):
        sim.estimate(
            job, Plan.uniform(job, "A100-40", "us-central1-a", pp=1, dp=1, tp=1, microbatch_size=2)
        )
    # Never an interpolation neighbour: mbs 3 comes from the measured 1 and 4.
    assert "mbs 1-4" in back.entry(M, "A100-40", "fp32", 3, 1, 128).source


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda e: e.update(status="maybe"), "status"),
        (lambda e: e.update(provenance=["gpu"]), "provenance"),
        (lambda e: e.update(status="oom"), "layers"),  # an oom entry with layers
    ],
)
def test_bad_new_fields_name_the_field(tmp_path, mutate, field):
    save_profile_dir(ProfileStore([entry(1)]), tmp_path)
    path = next(tmp_path.glob("*.json"))
    doc = json.loads(path.read_text())
    mutate(doc["entries"][0])
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError) as err:
        load_profile_dir(tmp_path)
    assert err.value.field.endswith(field)
