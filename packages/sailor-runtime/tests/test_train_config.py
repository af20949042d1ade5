"""TrainConfig: the one file every rank reads. A round trip keeps every field; a bad file is
refused on read with an EngineError naming the field; writing it imports no torch (the agent
writes one per generation)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sailor_runtime.engine.config import (
    EngineError,
    LRSchedule,
    OptimConfig,
    TrainConfig,
    rank_from_env,
)
from sailor_sim import ExecutionOptions, Job, Plan, Recipe, Replica, RunSpec, Stage

JOB = Job.create("tiny-gpt", 8, 32)
PLAN = Plan(
    (
        Stage(0, 3, (Replica("CPU", "local", 1, 1, 4), Replica("CPU", "local", 2, 2, 2))),
        Stage(4, 7, (Replica("CPU", "local", 1, 1, 4), Replica("CPU", "local", 1, 2, 2))),
    )
).check(JOB)


def full_config() -> TrainConfig:
    """Every field away from its default, so a field dropped by the round trip shows."""
    return TrainConfig.for_job(
        job=JOB,
        plan=PLAN,
        steps=7,
        checkpoint_dir="/tmp/ckpt",
        checkpoint_every=3,
        metrics_path="/tmp/m.jsonl",
        seed=5,
        backend="gloo",
        schedule="gpipe",
        lr=LRSchedule(max_lr=0.01, min_lr=0.001, warmup_steps=3, decay_steps=50),
        optim=OptimConfig(betas=(0.8, 0.9), eps=1e-6, weight_decay=0.0, clip_norm=0.5),
        dtype="fp64",
        precision="bf16",
        options=ExecutionOptions(recompute="full", zero="zero1", flash_attention=False),
        optimizer_impl="sailor",
        memory_probe_step=2,
        master_addr="10.0.0.1",
        master_port=4242,
        store_prefix="gen-3",
        store_is_external=True,
        timeout_s=12.5,
    )


def test_round_trip_keeps_every_field(tmp_path):
    cfg = full_config()
    back = TrainConfig.read(cfg.write(tmp_path / "train.json"))
    assert back == cfg
    assert back.world_size == 5  # stage 0: 1 + 2 TP ranks; stage 1: 1 + 1
    assert set(json.loads((tmp_path / "train.json").read_text())) == set(
        TrainConfig.__dataclass_fields__
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": -1}, "steps"),
        ({"steps": "3"}, "steps"),
        ({"seed": True}, "seed"),  # JSON true is not an integer
        ({"backend": "mpi"}, "backend"),
        ({"schedule": "zb"}, "schedule"),
        ({"dtype": "fp8"}, "dtype"),
        ({"master_port": 0}, "master_port"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"store_is_external": "yes"}, "store_is_external"),
        ({"optimizer_impl": "adam"}, "optimizer_impl"),
        ({"lr": {"max_lr": "big"}}, "lr.max_lr"),
        ({"lr": {"peak": 1.0}}, "lr"),
        ({"optim": {"betas": [0.9]}}, "optim.betas"),
        ({"options": {"zero": "zero3"}}, "options"),
        ({"options": {"fp8": "delayed"}}, "options"),
        ({"options": {"recompute": "selective_op"}}, "options"),
        ({"precision": "fp8"}, "precision"),
        ({"plan": {"stages": []}}, "plan"),
        ({"job": {"model": "no-such-model"}}, "job"),
        ({"ranks": 4}, "config"),
    ],
)
def test_bad_values_are_refused_naming_the_field(change, field):
    data = {**full_config().to_dict(), **change}
    with pytest.raises(EngineError) as info:
        TrainConfig.from_json(json.dumps(data))
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ")


def test_missing_or_unreadable_files_are_named(tmp_path):
    with pytest.raises(EngineError, match="^config: cannot read"):
        TrainConfig.read(tmp_path / "absent.json")
    with pytest.raises(EngineError, match="^config: is not valid JSON"):
        TrainConfig.from_json("{")
    with pytest.raises(EngineError, match="^config: must be a JSON object"):
        TrainConfig.from_json("[]")
    data = full_config().to_dict()
    del data["plan"]
    with pytest.raises(EngineError, match="^plan: is missing"):
        TrainConfig.from_dict(data)


def test_a_plan_that_does_not_fit_the_job_is_refused():
    small = Job.create("tiny-gpt", 4, 32)  # the plan's replicas hold 8 samples
    with pytest.raises(EngineError) as info:
        TrainConfig.from_dict({**full_config().to_dict(), "job": small.to_dict()})
    assert info.value.field == "plan"


def test_construction_in_code_is_checked_too():
    with pytest.raises(EngineError, match="^checkpoint_every: must be"):
        TrainConfig.for_job(job=JOB, plan=PLAN, steps=1, checkpoint_every=-2)


def test_rank_comes_from_the_environment():
    assert rank_from_env(4, {"RANK": "3"}) == 3
    for env in ({}, {"RANK": "4"}, {"RANK": "-1"}, {"RANK": "x"}):
        with pytest.raises(EngineError, match="^rank: "):
            rank_from_env(4, env)


def test_writing_a_config_imports_no_torch(tmp_path):
    """The agent writes these files; torch's import would cost it seconds of CPU."""
    code = (
        "import sys\n"
        "from sailor_runtime.agent.ranks import RankRunner, train_config\n"
        "from sailor_runtime.engine.config import TrainConfig\n"
        "from sailor_sim import Job, Plan, Replica, Stage\n"
        "job = Job.create('tiny-gpt', 8, 32)\n"
        "plan = Plan((Stage(0, 7, (Replica('CPU', 'local', 1, 1, 8),)),)).check(job)\n"
        f"TrainConfig.for_job(job=job, plan=plan, steps=1).write({str(tmp_path / 't.json')!r})\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_recomputation_asks_the_forking_parent_to_preload_dynamo():
    """torch.utils.checkpoint imports torch._dynamo on first use: the zygote imports it once
    instead of every rank in its first step after every restart."""
    assert full_config().preload_modules() == ("torch._dynamo",)  # recompute full
    assert TrainConfig.for_job(job=JOB, plan=PLAN, steps=1).preload_modules() == ()


def test_the_run_settings_are_views_of_the_run_spec_never_fields():
    """steps, checkpointing, seed, schedule, optimizer, precision and options are declared once,
    in RunSpec: TrainConfig holds the spec and reads them from it."""
    assert not set(TrainConfig.__dataclass_fields__) & set(RunSpec.__dataclass_fields__)
    run = RunSpec(model="tiny-gpt", global_batch_size=8, seq_len=32, steps=9, seed=4,
                  checkpoint_every=3, precision="bf16", recipe=Recipe(lr=0.02, no_decay="bias"),
                  options=ExecutionOptions(recompute="full"))  # fmt: skip
    cfg = TrainConfig.from_run(run, JOB, PLAN, master_port=1234)
    assert cfg.run is run and cfg.master_port == 1234
    assert (cfg.steps, cfg.seed, cfg.checkpoint_every, cfg.precision) == (9, 4, 3, "bf16")
    assert cfg.lr_schedule == run.lr_schedule() and cfg.optim == run.recipe.optim()
    assert cfg.options == run.options and cfg.lr == 0.02
    # settings given to for_job go into the run; lr/optim in the engine's shape into its recipe
    more = TrainConfig.for_job(JOB, PLAN, run=run, steps=11, optim=OptimConfig(eps=1e-5))
    assert more.run.steps == 11 and more.optim == OptimConfig(eps=1e-5)
    assert more.lr_schedule == run.recipe.schedule_for(11)
    # from a job alone: the engine's defaults (as its equivalence baselines were recorded)
    plain = TrainConfig.for_job(JOB, PLAN, steps=3)
    assert plain.lr_schedule == LRSchedule() and plain.optim == OptimConfig()
    assert plain.options == ExecutionOptions() and plain.precision is None
