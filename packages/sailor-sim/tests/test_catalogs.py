"""The built-in GPU, fabric and price catalogs: data files read strictly, right by default."""

from __future__ import annotations

import pytest

from sailor_sim import GPU_CATALOG, Job, Plan, ValidationError, get_gpu
from sailor_sim.catalog_data import check_keys

NEW_GPUS = ("H100-80", "H100-PCIe", "GH-96", "H200", "B200", "L4", "L40S", "A10G", "V100-16")


def test_every_gpu_records_its_source_and_node():
    for name in (*NEW_GPUS, "A100-40", "A100-80", "MI300X"):
        gpu = get_gpu(name)
        assert gpu.source and gpu.intra_node_link, name
        assert gpu.intra_node_bandwidth > 0 and gpu.gpus_per_node >= 4, name
    assert {g.vendor for g in GPU_CATALOG.values()} >= {"NVIDIA", "AMD"}
    # aliases people type
    assert get_gpu("h100-96").name == "GH-96" and get_gpu("H100-SXM").name == "H100-80"
    assert get_gpu("a100-80gb").name == "A100-80" and get_gpu("mi300").name == "MI300X"


def test_nvlink_nodes_are_faster_than_pcie_ones():
    assert get_gpu("H100-80").intra_node_bandwidth > 5 * get_gpu("H100-PCIe").intra_node_bandwidth
    assert get_gpu("B200").intra_node_bandwidth == 2 * get_gpu("H100-80").intra_node_bandwidth
    assert get_gpu("B200").peak_flops("bf16") > get_gpu("H200").peak_flops("bf16")


@pytest.mark.parametrize("gpu", ["A100-40", "A100-80", "H100-80", "B200"])
def test_tp8_fits_in_one_eight_gpu_node(gpu):
    job = Job.create("LLaMA-3.1-8B", 64, 4096, "bf16")
    plan = Plan.uniform(job, gpu, "us-central1-a", tp=8, microbatch_size=1)
    assert plan.num_gpus == 8


def test_strict_reader_names_missing_and_unknown_keys():
    with pytest.raises(ValidationError) as e:
        check_keys({"name": "x"}, {"name", "source"}, set(), "data/gpus.json gpus[0]")
    assert e.value.field == "source"
    with pytest.raises(ValidationError, match="unknown key 'colour'") as e:
        check_keys({"name": "x", "colour": 1}, {"name"}, set(), "data/gpus.json gpus[0]")
    assert e.value.field == "colour"
