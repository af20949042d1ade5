"""Profile store, file format, resolution rules, importers and network model."""

from __future__ import annotations

import json

import pytest

from sailor_sim import ProfileError, ProfileStore, get_gpu, get_model, load_profile_dir
from sailor_sim.profiles.files import save_profile_dir
from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey
from sailor_sim.simulate.network import Endpoint, LinkCurve, NetworkModel, load_network_file

M = get_model("tiny-gpt")


def entry(mbs: int, tp: int = 1, scale: float = 1.0, source="measured") -> ProfileEntry:
    layers = tuple(
        LayerProfile(1e-3 * scale * (i + 1), 2e-3 * scale * (i + 1), 1e-4)
        for i in range(M.num_layer_ids)
    )
    return ProfileEntry(ProfileKey(M.name, "A100-40", "fp32", mbs, tp), 128, layers, source)


def test_save_load_round_trip(tmp_path):
    store = ProfileStore([entry(1), entry(4, scale=3)])
    save_profile_dir(store, tmp_path)
    back = load_profile_dir(tmp_path)
    assert sorted(e.key.microbatch_size for e in back.entries()) == [1, 4]
    assert back.entry(M, "A100-40", "fp32", 4, 1, 128) == store.entry(
        M, "A100-40", "fp32", 4, 1, 128
    )


def test_interpolates_between_microbatch_sizes():
    store = ProfileStore([entry(1), entry(4, scale=3)])
    e = store.entry(M, "A100-40", "fp32", 2, 1, 128)
    assert e.source.startswith("interpolated:mbs 1-4")
    assert e.layers[0].forward_s == pytest.approx(1e-3 * (1 + 2 / 3))


def test_scales_nearest_outside_range_and_falls_back_to_analytic():
    store = ProfileStore([entry(1), entry(4, scale=3)])
    e = store.entry(M, "A100-40", "fp32", 8, 1, 128)
    assert e.source.startswith("interpolated:roofline-scaled from mbs 4")
    assert all(layer.forward_s > 0 for layer in e.layers)
    other = store.entry(M, "V100-16", "fp32", 8, 1, 128)
    assert other.source == "analytic" and all(layer.forward_s > 0 for layer in other.layers)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d["entries"][0]["layers"].pop(), "needs 8 layers"),
        (lambda d: d["entries"][0]["layers"][2].__setitem__("forward_s", -1), "forward_s"),
        (lambda d: d.__setitem__("gpu_type", "B300"), "unknown GPU"),
        (lambda d: d.__setitem__("extra", 1), "unknown keys"),
        (lambda d: d["entries"][0].pop("tp"), "missing"),
    ],
)
def test_malformed_files_name_the_field(tmp_path, mutate, match):
    save_profile_dir(ProfileStore([entry(1)]), tmp_path)
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=match):
        load_profile_dir(tmp_path)


def test_truncated_file(tmp_path):
    save_profile_dir(ProfileStore([entry(1)]), tmp_path)
    (path,) = tmp_path.glob("*.json")
    path.write_text(path.read_text()[:100])
    with pytest.raises(ProfileError, match="truncated"):
        load_profile_dir(tmp_path)


def test_link_curve_never_below_zero_or_above_max():
    # A fit that dips below zero outside its range (like some of Sailor's).
    curve = LinkCurve(2e9, 1e-3, "fit", (-0.05, 0.3, 0.5))
    for nbytes in (1, 1e3, 1e6, 1e9, 1e12):
        assert 0 < curve.bandwidth(nbytes) <= 2e9
    assert curve.bandwidth(1e12) == curve.bandwidth(1e9)  # clamped to the fit range


def test_default_links_by_relationship():
    net = NetworkModel()
    src = Endpoint("us-central1-a", "A100-40", 1)
    bws = [
        net.link(src, Endpoint(z, "A100-40", 1)).bandwidth(1e8)
        for z in ("us-central1-a", "us-central1-b", "us-west1-a", "europe-west4-a")
    ]
    assert bws == sorted(bws, reverse=True)
    assert net.egress_per_gb("us-central1-a", "europe-west4-a") > net.egress_per_gb(
        "us-central1-a", "us-central1-b"
    )
    assert net.intra_node("A100-40", 2).max_bandwidth == get_gpu("A100-40").intra_node_bandwidth


def test_network_file(tmp_path):
    path = tmp_path / "links.json"
    path.write_text(
        json.dumps(
            {
                "format": "sailor-network/1",
                "links": [
                    {
                        "src": {"zone": "local", "gpu_type": "CPU", "count": 1},
                        "dst": {"zone": "local", "gpu_type": "CPU", "count": 1},
                        "points": [[1e3, 1e8], [1e6, 1e9]],
                        "max_bandwidth": 1e9,
                        "latency_s": 1e-5,
                    }
                ],
            }
        )
    )
    net = load_network_file(path)
    curve = net.link(Endpoint("local", "CPU", 1), Endpoint("local", "CPU", 1))
    assert curve.bandwidth(1e3) == pytest.approx(1e8) and curve.bandwidth(1e9) == 1e9
    path.write_text('{"format": "sailor-network/1", "links": [{"src": {}}')
    with pytest.raises(ProfileError, match="truncated"):
        load_network_file(path)


# ---- importers ---------------------------------------------------------------------------
def test_import_sailor_profiles(sailor_root):
    from sailor_sim.original import load_sailor_profiles, read_llm_info, read_training_config

    store = load_sailor_profiles(sailor_root)
    e = store.entry("OPT-350", "GH-96", "fp32", 8, 4, 2048)
    assert e.source == "imported:sailor" and e.layers[1].forward_s == pytest.approx(0.003021)
    llama = store.entry("LLAMA-3-8", "GH-96", "fp32", 1, 1, 2048)
    assert len(llama.layers) == get_model("LLaMA-3-8B").num_layer_ids == 34
    assert any("26 layer ids" in s for s in store.skipped)  # the GPT-Neo copy-paste slip
    info = read_llm_info(sailor_root / "sailor/Planner/llm_info.json")
    assert info["OPT-350M"][1][1]["params_floats"] == get_model("OPT-350M").params(1)
    job = read_training_config(
        sailor_root / "sailor/Planner/simulations/configs/training_config_opt_350.json"
    )
    assert (job.model.name, job.global_batch_size, job.sequence_length) == ("OPT-350M", 1024, 2048)


def test_import_sailor_network(sailor_root):
    from sailor_sim.original import load_sailor_network

    net = load_sailor_network(sailor_root)
    link = net.link(Endpoint("us-central1-a", "GH-96", 4), Endpoint("us-central1-a", "GH-96", 4))
    assert link.source.startswith("imported:sailor") and 80e9 < link.bandwidth(1e8) <= 93e9
    cross = net.link(Endpoint("us-central1-a", "A100-40", 1), Endpoint("us-west1-b", "A100-40", 1))
    assert 0 < cross.bandwidth(64e3) < link.bandwidth(64e3)


def test_cluster_config_matches_catalog(sailor_root):
    from sailor_sim.original import read_cluster_config

    config = read_cluster_config(
        sailor_root / "sailor/Planner/simulations/configs/basic_cluster_config.json"
    )
    assert {"A100-40", "V100-16", "GH-96"} <= set(config)
    for name, (per_node, mem) in config.items():
        gpu = get_gpu(name)
        # Sailor's A100 nodes held 4 GPUs; the catalog's node is the 8-GPU HGX one, which
        # admits every plan Sailor's does. GH200 nodes (the validation runs) hold 4 as there.
        assert gpu.memory_bytes == mem and gpu.gpus_per_node >= per_node, name
    assert get_gpu("GH-96").gpus_per_node == config["GH-96"][0] == 4
    assert get_gpu("A100-80").gpus_per_node == get_gpu("A100-40").gpus_per_node == 8


# ---- denoising imported profiles ---------------------------------------------------------------
def _affine_entry(mbs: int, bump: float = 1.0) -> ProfileEntry:
    n = get_model("tiny-gpt").num_layer_ids
    layer = LayerProfile((1e-3 + 2e-4 * mbs) * bump, 2e-3 + 4e-4 * mbs, 1e-5)
    key = ProfileKey("tiny-gpt", "A100-40", "fp32", mbs, 1)
    return ProfileEntry(key, 128, (layer,) * n, "imported:sailor")


def test_denoise_keeps_affine_data_and_pulls_in_an_outlier():
    from sailor_sim.profiles.denoise import denoise_store

    store = ProfileStore([_affine_entry(m, 0.6 if m == 4 else 1.0) for m in (1, 2, 4, 8, 16)])
    store.add(
        ProfileEntry(
            ProfileKey("tiny-gpt", "V100-16", "fp32", 4, 1),
            128,
            _affine_entry(4, 0.6).layers,
            "measured",
        )
    )
    denoise_store(store)
    fwd = {
        m: store.entry("tiny-gpt", "A100-40", "fp32", m, 1, 128).layers[1].forward_s
        for m in (1, 2, 4, 8, 16)
    }
    # the outlier (40% low) moves towards the line 1e-3 + 2e-4 * 4 = 1.8e-3 ...
    assert 0.6 * 1.8e-3 < fwd[4] < 1.8e-3 and fwd[4] > 1.2e-3
    # ... backward (exactly affine) is kept, and measured entries are untouched
    bwd = store.entry("tiny-gpt", "A100-40", "fp32", 16, 1, 128).layers[1].backward_s
    assert bwd == pytest.approx(2e-3 + 4e-4 * 16)
    kept = store.entry("tiny-gpt", "V100-16", "fp32", 4, 1, 128).layers[1].forward_s
    assert kept == pytest.approx(0.6 * 1.8e-3)
    assert "denoised" in store.entry("tiny-gpt", "A100-40", "fp32", 8, 1, 128).note


def test_denoise_window_and_weighting_are_what_they_say():
    """The candidates bench/sim_denoise_choice.py compares: with the plain weighting the fit
    is ordinary least squares over the window (numpy's polyfit), and a window larger than the
    entries of a group leaves them as measured."""
    import numpy as np

    from sailor_sim.profiles.denoise import denoise_store

    def store():
        return ProfileStore([_affine_entry(m, 0.6 if m == 4 else 1.0) for m in (1, 2, 4, 8, 16)])

    def forward(s, m):
        return s.entry("tiny-gpt", "A100-40", "fp32", m, 1, 128).layers[1].forward_s

    raw = store()
    plain = denoise_store(store(), window=3, relative=False)
    near = (2, 4, 8)  # mbs 4's three nearest in log2(mbs), itself included
    slope, intercept = np.polyfit(near, [forward(raw, m) for m in near], 1)
    assert forward(plain, 4) == pytest.approx(intercept + slope * 4, rel=1e-9)
    relative = denoise_store(store(), window=3)
    assert forward(relative, 4) != pytest.approx(forward(plain, 4), rel=1e-6)
    untouched = denoise_store(store(), window=6)
    assert [forward(untouched, m) for m in (1, 2, 4, 8, 16)] == [
        forward(raw, m) for m in (1, 2, 4, 8, 16)
    ]
