"""The compute path takes its settings as one value: `sailor-profiler compute` builds one
``ComputeRequest`` and hands it to ``run_compute``; no function on the way to the measurement
takes more than six parameters (issue 23: it took 16 positional arguments)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import sailor_profiler.compute as compute
from sailor_profiler.compute.command import ComputeRequest, run_compute
from sailor_profiler.errors import SweepError

MAX_PARAMETERS = 6


def test_run_compute_takes_one_request():
    assert list(inspect.signature(run_compute).parameters) == ["request"]


def test_no_function_of_the_compute_path_takes_more_than_six_parameters():
    wide = []
    for path in sorted(Path(compute.__file__).parent.glob("*.py")):
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
