"""The agent files a node's detected GPUs under the right catalog type (the rules and the table
over the whole catalog: sailor-profiler tests/test_gpu_names.py)."""

from __future__ import annotations

import pytest

from sailor_runtime.agent.gpus import _catalog_name
from sailor_runtime.errors import RegistrationError


@pytest.mark.parametrize(
    ("smi_name", "mib", "want"),
    [
        ("NVIDIA GH200 480GB", 97871, "GH-96"),  # was filed as H200
        ("NVIDIA L40S", 46068, "L40S"),  # was filed as L4
        ("NVIDIA H100 PCIe", 81559, "H100-PCIe"),  # was filed as H100-80 (SXM)
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40"),
    ],
)
def test_nvidia_smi_names(smi_name, mib, want):
    assert _catalog_name(smi_name, mib) == want


def test_unknown_variant_is_refused_at_registration():
    with pytest.raises(RegistrationError, match="another variant.*--gpu-type"):
        _catalog_name("Tesla V100-SXM2-32GB", 32768)
