"""A cluster's own GPUs and prices from a file (``--catalog``, ``sailor_sim.load_catalog``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sailor_sim
from sailor_sim import ValidationError, get_gpu, load_catalog, price_per_gpu_hour

GPU = {
    "name": "TEST-GPU-48",
    "vendor": "NVIDIA",
    "memory_bytes": 48 * 2**30,
    "fp32_tflops": 90,
    "tf32_tflops": 180,
    "bf16_tflops": 360,
    "fp16_tflops": 360,
    "memory_bandwidth_gbps": 960,
    "gpus_per_node": 4,
    "intra_node_bandwidth_gbps": 32,
    "intra_node_link": "PCIe 5",
    "platform": "pcie",
}


def _write(tmp_path, doc, suffix=".json"):
    path = tmp_path / f"catalog{suffix}"
    path.write_text(json.dumps(doc))
    return path


def test_a_catalog_file_adds_gpus_and_prices_the_simulator_uses(tmp_path) -> None:
    doc = {
        "format": "sailor-catalog/1",
        "gpus": [GPU],
        "prices": [{"gpu_type": "TEST-GPU-48", "usd_per_gpu_hour": 1.25}],
    }
    added = load_catalog(_write(tmp_path, doc))
    assert added == {"gpus": ["TEST-GPU-48"], "prices": ["TEST-GPU-48"]}
    assert get_gpu("TEST-GPU-48").memory_bytes == 48 * 2**30
    assert price_per_gpu_hour("TEST-GPU-48", "us-central1-a") == 1.25
    e = sailor_sim.estimate("tiny-llama", "TEST-GPU-48", gbs=8, dp=4, dtype="bf16")
    # a catch-all price of the user's is their own, not every cloud's: a row 'other'
    assert e.num_gpus == 4 and e.cost_per_hour_usd["other"] == pytest.approx(4 * 1.25)
    assert e.cost_per_hour_usd["gcp"] is None


@pytest.mark.parametrize(
    "doc, problem",
    [
        ({"format": "other/1"}, "format must be"),
        ({"format": "sailor-catalog/1", "gpus": [{**GPU, "tflops": 3}]}, "unknown key 'tflops'"),
        ({"format": "sailor-catalog/1", "gpus": [{"name": "X"}]}, "lacks"),
        ({"format": "sailor-catalog/1", "prices": [{"gpu_type": "H100-80",
                                                     "usd_per_gpu_hour": -1}]}, "usd_per_gpu_hour"),
        ({"format": "sailor-catalog/1", "prices": [{"gpu_type": "NOPE",
                                                     "usd_per_gpu_hour": 1}]}, "unknown GPU type"),
        ({"format": "sailor-catalog/1", "gpus": {}}, "must be a list"),
    ],
)  # fmt: skip
def test_a_bad_catalog_names_the_problem(tmp_path, doc, problem) -> None:
    with pytest.raises(sailor_sim.SailorSimError, match=problem):
        load_catalog(_write(tmp_path, doc))


def test_the_cli_flag_loads_the_file_and_bad_files_are_one_line(tmp_path) -> None:
    toml = tmp_path / "cluster.toml"
    toml.write_text(
        'format = "sailor-catalog/1"\n[[gpus]]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in {**GPU, "name": "TOML-GPU"}.items())
        + '[[prices]]\ngpu_type = "TOML-GPU"\nusd_per_gpu_hour = 2.0\n'
    )
    cmd = [sys.executable, "-m", "sailor_sim.cli.app", "--catalog", str(toml), "simulate",
           "--model", "tiny-llama", "--gpu", "TOML-GPU", "--gbs", "8", "--dtype", "bf16",
           "--compare", "gcp", "--json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    gcp, other = json.loads(out.stdout)["cost_by_provider"]
    assert gcp["provider"] == "gcp" and gcp["usd_per_hour"] is None
    assert other["provider"] == "other" and other["usd_per_hour"] == pytest.approx(2.0)
    bad = tmp_path / "bad.toml"
    bad.write_text("format = [\n")
    out = subprocess.run([*cmd[:4], str(bad), "demo"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "TOML" in out.stderr


def test_validation_error_is_the_sim_family() -> None:
    assert issubclass(ValidationError, sailor_sim.SailorSimError)
