"""The compute and network paths take their settings as one value: `sailor-profiler compute`
builds one ``ComputeRequest`` and hands it to ``run_compute``, `sailor-profiler network` one
``NetworkRequest`` to ``run_network``; no function on the way to either measurement takes more
than six parameters (issue 23: they took 16 and 11 positional arguments)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import sailor_profiler.compute as compute
import sailor_profiler.network as network
from sailor_profiler.compute.command import ComputeRequest, run_compute
from sailor_profiler.errors import SweepError
from sailor_profiler.network.command import NetworkRequest, run_network

MAX_PARAMETERS = 6


def test_run_compute_and_run_network_take_one_request():
    assert list(inspect.signature(run_compute).parameters) == ["request"]
    assert list(inspect.signature(run_network).parameters) == ["request"]


@pytest.mark.parametrize("package", [compute, network], ids=["compute", "network"])
def test_no_function_of_the_path_takes_more_than_six_parameters(package):
    wide = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                count -= bool(a.args and a.args[0].arg in ("self", "cls"))
                if count > MAX_PARAMETERS:
                    wide.append(f"{path.name}:{node.name} ({count})")
    assert not wide, wide


def test_a_request_checks_its_values_naming_the_field(tmp_path):
    cfg = ComputeRequest("tiny-gpt", tmp_path, mbs=(1, 2)).config()
    assert (cfg.model, cfg.mbs, cfg.optimizer) == ("tiny-gpt", (1, 2), "adam")
    bad = {"optimizer": "lion", "blocks": -1, "threads": 0, "memory_limit_gb": 0}
    for field, value in bad.items():
        with pytest.raises(SweepError) as info:
            ComputeRequest("tiny-gpt", tmp_path, **{field: value}).config()
        assert info.value.field == field


def test_a_network_request_checks_its_values_naming_the_field(tmp_path):
    cfg = NetworkRequest(tmp_path, min_bytes=1024, max_bytes=4096, busy_ms=5).config()
    assert (cfg.min_bytes, cfg.max_bytes, cfg.warmup, cfg.reps, cfg.busy_s) == (
        1024, 4096, 2, 10, 0.005,
    )  # fmt: skip
    assert NetworkRequest(tmp_path, zone="local").peer == "local"
    bad = {
        "max_bytes": {"min_bytes": 4096, "max_bytes": 1024},
        "reps": {"reps": 0},
        "busy_ms": {"busy_ms": -1},
    }
    for field, values in bad.items():
        with pytest.raises(SweepError) as info:
            NetworkRequest(tmp_path, **values).config()
        assert info.value.field == field
