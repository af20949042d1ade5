"""Checkpoints and configs written while the engine had its own options class still load: its
options dict (the precision among the options, ``flash_attention`` true for SDPA) is read as
``RunSpec.precision`` and the simulator's ``ExecutionOptions`` (``options_from_dict``), and a
run resumes from a checkpoint whose manifest holds it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from sailor_runtime.engine import EngineError, TrainConfig
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.examples import JOBS, R
from sailor_runtime.engine.launch import launch_local
from sailor_runtime.engine.options import (
    LEGACY_KEYS,
    OptionsError,
    options_from_dict,
    trained_with,
)
from sailor_sim import ExecutionOptions, Plan, Stage

OLD = {"precision": "bf16", "recompute": "full", "flash_attention": True, "zero": "zero1",
       "sequence_parallel": False, "virtual_stages": 1}  # fmt: skip
"""An options dict as the engine's own ExecutionOptions.to_dict() wrote it."""


def test_the_old_options_dict_reads_as_the_simulator_s_options():
    assert set(OLD) == set(LEGACY_KEYS)
    precision, options = options_from_dict(OLD)
    assert precision == "bf16"
    assert options == ExecutionOptions(recompute="full", zero="zero1")  # SDPA: flash unset
    assert options_from_dict({**OLD, "flash_attention": False})[1].flash_attention is False
    new = ExecutionOptions(recompute="selective", zero="zero3")
    assert options_from_dict(new.to_dict()) == (None, new)
    assert options_from_dict(None) == (None, ExecutionOptions())
    with pytest.raises(OptionsError, match="^precision: fp8 is not run by the engine"):
        options_from_dict({**OLD, "precision": "fp8"})
    with pytest.raises(OptionsError, match="^zero: 'zero9' is not one of"):
        options_from_dict({**OLD, "zero": "zero9"})
    assert trained_with({"options": OLD}) == "bf16, recompute full, sdpa, ZeRO-1"
    assert trained_with({"precision": None, "options": new.to_dict()}).startswith("job dtype")


def test_a_config_file_of_before_loads(tmp_path):
    plan = Plan((Stage(0, 7, (R(1, 8, 1),)),))
    # a file of before: the run's settings as keys of their own, the precision in the options
    data = {"job": JOBS["gpt"].to_dict(), "plan": plan.to_dict(), "steps": 1, "seed": 3,
            "checkpoint_every": 0, "lr": {"max_lr": 0.01}, "optim": {}, "options": OLD}  # fmt: skip
    back = TrainConfig.from_dict(data)
    assert back.run.precision == "bf16" and back.steps == 1 and back.seed == 3
    assert back.lr_schedule.max_lr == 0.01 and back.optim.no_decay == ()
    assert back.precision == "bf16" and back.options.zero == "zero1"
    assert back.options.recompute == "full"
    with pytest.raises(EngineError, match="^options: "):
        TrainConfig.from_dict({**data, "options": {**OLD, "recompute": "some"}})


def test_a_run_resumes_from_a_checkpoint_whose_manifest_holds_the_old_options(tmp_path):
    """Train 2 steps, rewrite the checkpoint's manifest as the old engine wrote it, resume to
    step 4: the ranks read it (logged) and continue from step 2."""
    job = JOBS["gpt"]
    plan = Plan((Stage(0, 7, (R(1, 8, 1),)),))
    root = tmp_path / "ckpt"
    common = dict(checkpoint_dir=root, checkpoint_every=2, log_dir=tmp_path)
    first = launch_local(job, plan, steps=2, metrics_path=tmp_path / "a.jsonl", **common)
    assert first == [0], (tmp_path / "rank0.log").read_text()[-3000:]
    path, manifest = ckpt.latest(root)
    assert manifest["precision"] is None and "precision" not in manifest["options"]
    manifest["options"] = {**OLD, "precision": "fp32", "zero": "none", "recompute": "none"}
    del manifest["precision"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    second = launch_local(job, plan, steps=4, metrics_path=tmp_path / "b.jsonl", **common)
    log = (tmp_path / "rank0.log").read_text()
    assert second == [0], log[-3000:]
    assert "trained with: fp32, recompute none, sdpa" in log
    assert len(pl.read_ndjson(tmp_path / "b.jsonl")) == 2  # steps 3 and 4 only
