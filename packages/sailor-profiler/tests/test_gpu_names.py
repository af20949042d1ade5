"""Detected device names -> catalog GPU types, for every catalog GPU (nvidia-smi, torch and
ROCm spellings, with the memory each reports), and the look-alikes that must not be mistaken."""

from __future__ import annotations

import pytest

from sailor_profiler.devices import catalog_gpu_type
from sailor_profiler.errors import DeviceError
from sailor_sim.catalog.gpus import GPU_CATALOG

MiB = 2**20

# (name as printed, memory.total in MiB as reported, catalog type)
DETECTED = [
    ("NVIDIA H100 80GB HBM3", 81559, "H100-80"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIe"),
    ("NVIDIA H200", 143771, "H200"),
    ("NVIDIA GH200 480GB", 97871, "GH-96"),
    ("NVIDIA B200", 183359, "B200"),
    ("NVIDIA GB200", 189471, "GB200"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-80"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-80"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40"),
    ("NVIDIA A100-PCIE-40GB", 40960, "A100-40"),
    ("NVIDIA L4", 23034, "L4"),
    ("NVIDIA L40S", 46068, "L40S"),
    ("NVIDIA A10G", 23028, "A10G"),
    ("NVIDIA A10", 23028, "A10G"),
    ("Tesla T4", 15360, "T4"),
    ("Tesla V100-SXM2-16GB", 16160, "V100-16"),
    ("AMD Instinct MI300X", 196592, "MI300X"),
    ("MI300X", 196592, "MI300X"),  # rocm-smi --showproductname
    ("NVIDIA GeForce RTX 3090", 24576, "RTX-3090"),
    ("NVIDIA GeForce RTX 2080 Ti", 11264, "RTX-2080"),
    ("NVIDIA TITAN RTX", 24576, "Titan-RTX"),
]

# Names that contain a catalog name but are another GPU.
REFUSED = [
    ("NVIDIA L40", 46068, "not in the GPU catalog"),  # not an L4
    ("NVIDIA GH200 144G HBM3e", 146944, "another variant"),  # not the 96 GB GH200
    ("Tesla V100-SXM2-32GB", 32768, "another variant"),
    ("NVIDIA H100 NVL", 95830, "another variant"),
    ("NVIDIA GeForce RTX 2080", 7982, "not in the GPU catalog"),
    ("NVIDIA RTX A6000", 49140, "not in the GPU catalog"),
]


@pytest.mark.parametrize(("name", "mib", "want"), DETECTED)
def test_detected_names_map_to_the_catalog(name, mib, want):
    assert catalog_gpu_type(name, mib * MiB) == want


@pytest.mark.parametrize(("name", "mib", "why"), REFUSED)
def test_look_alikes_are_refused_with_the_fix(name, mib, why):
    with pytest.raises(DeviceError, match=why) as err:
        catalog_gpu_type(name, mib * MiB)
    assert "--gpu-type" in str(err.value)


def test_the_table_covers_every_catalog_gpu():
    """A GPU added to the catalog needs a row above (and a rule if its name is new)."""
    gpus = {
        n for n, g in GPU_CATALOG.items() if g.platform != "cpu" and "user catalog" not in g.source
    }
    assert gpus == {want for _, _, want in DETECTED}
