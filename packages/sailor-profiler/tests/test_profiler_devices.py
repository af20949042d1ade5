"""Device parsing, the GPU type measurements are filed under, and CPU thread/TP rules."""

from __future__ import annotations

import pytest
import torch

from sailor_profiler.devices import DeviceSpec, check_tp_fits, parse_device
from sailor_profiler.errors import DeviceError
from sailor_profiler.launch import threads_per_rank
from sailor_profiler.profiles.provenance import cuda_name_to_gpu_type, gpu_type_for


@pytest.mark.parametrize(
    "name,gpu",
    [
        ("NVIDIA H100 80GB HBM3", "H100-80"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "GH-96"),
        ("NVIDIA A100-SXM4-80GB", "A100-80"),
        ("NVIDIA A100-SXM4-40GB", "A100-40"),
        ("NVIDIA A100-PCIE-40GB", "A100-40"),
        ("Tesla V100-SXM2-16GB", "V100-16"),
        ("Tesla T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", None),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080"),
        ("NVIDIA TITAN RTX", "Titan-RTX"),
    ],
)
def test_cuda_device_names_map_to_catalog_types(name, gpu):
    assert cuda_name_to_gpu_type(name) == gpu


def test_cpu_device_and_its_gpu_type():
    cpu = parse_device("CPU")
    assert cpu == DeviceSpec("cpu") and cpu.backend == "gloo" and cpu.cuda_base is None
    assert gpu_type_for(cpu) == "CPU" and gpu_type_for(cpu, "a100-40") == "A100-40"
    assert DeviceSpec("cuda", 2).for_rank(1) == "cuda:3"


def test_cpu_tp_limit_and_override(monkeypatch):
    check_tp_fits(DeviceSpec("cpu"), 8)
    with pytest.raises(DeviceError, match="tp"):
        check_tp_fits(DeviceSpec("cpu"), 9)
    monkeypatch.setenv("SAILOR_PROFILER_MAX_CPU_TP", "16")
    check_tp_fits(DeviceSpec("cpu"), 16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_no_cuda_here():
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        parse_device("cuda:0")


def test_threads_per_rank(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_rank(2) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_per_rank(2) == 3
