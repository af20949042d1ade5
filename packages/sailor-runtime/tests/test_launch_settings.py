"""``start_local`` and the `sailor` commands' checks take the run's settings as the RunSpec
(issue 23): none of RunSpec's fields is a parameter of theirs, and the settings a caller
gives reach the rank's ``TrainConfig`` as they did when they were parameters."""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from pathlib import Path

import pytest

from sailor_runtime import cli_checks
from sailor_runtime.engine.config import EngineError, TrainConfig
from sailor_runtime.engine.launch import _local_settings, start_local
from sailor_runtime.engine.reference import reference_config, reference_run
from sailor_sim import Job, LRSchedule, Plan, Replica, RunSpec, Stage, ValidationError

JOB = Job.create("tiny-gpt", 8, 32)
PLAN = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 4, 1),) * 2),)).check(JOB)
RUN_FIELDS = {f.name for f in fields(RunSpec)} | {"lr", "seed_value"}


@pytest.mark.parametrize(
    "function", [start_local, cli_checks.check_run, cli_checks.check_controller, reference_run]
)
def test_no_run_setting_is_a_parameter(function):
    assert not RUN_FIELDS & set(inspect.signature(function).parameters)


def test_the_settings_reach_the_config_as_before(tmp_path):
    settings = _local_settings(
        dict(steps=3, seed=7, lr=2e-3, checkpoint_dir=tmp_path, metrics_path=None)
    )
    cfg = TrainConfig.for_job(JOB, PLAN, **settings)
    assert (cfg.steps, cfg.seed, cfg.checkpoint_dir) == (3, 7, str(tmp_path))
    assert (cfg.lr_schedule.max_lr, cfg.lr_schedule.min_lr) == (2e-3, pytest.approx(2e-4))
    default = TrainConfig.for_job(JOB, PLAN, steps=3)  # no lr: the old default, 1e-3 -> 1e-4
    assert default.lr_schedule == LRSchedule(max_lr=1e-3, min_lr=1e-3 / 10)
    assert _local_settings({"lr": LRSchedule(max_lr=5e-4)})["lr"] == LRSchedule(max_lr=5e-4)


def test_the_checks_read_the_spec_and_name_the_flag():
    spec = RunSpec(model="tiny-gpt", steps=4, seq_len=32, checkpoint_every=2)
    common = dict(heartbeat_timeout=10.0, timeout=60.0, time_scale=1.0, on_save_error="stop")
    assert cli_checks.check_run(
        spec, workers=2, gpu_types="cpu-1t", failures=(0, 0, 0), **common
    ) == ("cpu-1t",)
    with pytest.raises(ValidationError) as info:
        cli_checks.check_run(
            replace(spec, checkpoint_every=0), workers=2, gpu_types="cpu-1t",
            failures=(0, 0, 0), **common,
        )  # fmt: skip
    assert info.value.field == "--checkpoint-every"
    with pytest.raises(ValidationError) as info:
        cli_checks.check_run(spec, workers=2, gpu_types="cpu-1t", failures=(0, -1, 0), **common)
    assert info.value.field == "--kill-worker-at-step"
    with pytest.raises(ValidationError) as info:
        cli_checks.check_controller(
            spec, planner="127.0.0.1:1", host="127.0.0.1", port=0, min_workers=1,
            heartbeat=(5.0, 5.0), debounce=0.0, max_failures=0, on_save_error="stop",
            run_dir=Path("."),
        )  # fmt: skip
    assert info.value.field == "--heartbeat-timeout"


def test_the_reference_reads_the_settings_an_engine_run_of_the_same_names_gets():
    """The single-process baseline takes the engine's setting names through the same rule
    (``TrainConfig.for_job``): same values, same defaults, same refusals."""
    settings = dict(steps=3, seed=5, lr=LRSchedule(max_lr=2e-3), precision="bf16")
    ref = reference_config(JOB, **settings)
    engine = TrainConfig.for_job(JOB, PLAN, **settings)
    for name in ("steps", "seed", "lr_schedule", "optim", "precision", "options"):
        assert getattr(ref, name) == getattr(engine, name), name
    with pytest.raises(EngineError) as info:
        reference_run(JOB, steps=1, precision="fp16")  # no loss scaling in the reference
    assert info.value.field == "precision"
    with pytest.raises(EngineError) as info:
        reference_config(JOB, seed=-1)
    assert info.value.field == "seed"
