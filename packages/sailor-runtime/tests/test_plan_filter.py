"""The controller keeps the plans the engine cannot run with the run's options out: its
planner link asks a real planner server (gRPC on 127.0.0.1, ephemeral port) for several plans
and uses the best one ``engine.options.unsupported_reason`` admits."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from sailor_planner.service.server import create_server
from sailor_runtime.controller.controller import PLAN_CANDIDATES, ControllerConfig, engine_filter
from sailor_runtime.controller.planning import PlannerLink
from sailor_runtime.engine.options import unsupported_reason
from sailor_runtime.errors import PlannerUnavailableError, SailorRuntimeError
from sailor_sim import ExecutionOptions, Inventory, Job

JOB = Job.create("tiny-llama", 8, 32)
INVENTORY = Inventory.parse(["CPU@local=4"])


@pytest.fixture(scope="module")
def address():
    server, port = create_server("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def _config(tmp_path, **options) -> ControllerConfig:
    return ControllerConfig.for_job(
        JOB,
        steps=1,
        checkpoint_every=1,
        run_dir=tmp_path,
        planner_address="127.0.0.1:9",
        options=ExecutionOptions(**options),
    )


def test_the_best_plan_the_engine_runs_is_chosen(address, tmp_path):
    """The planner's first plan is ruled out: the link returns the next one it ranked."""
    unrestricted = PlannerLink(address, candidates=PLAN_CANDIDATES)
    try:
        ranked = unrestricted._client.plan(JOB, INVENTORY, top_k=PLAN_CANDIDATES).plans
    finally:
        unrestricted.close()
    assert len(ranked) >= 2, "the planner found one plan only; the test needs two"
    best = ranked[0].plan
    link = PlannerLink(
        address,
        candidates=PLAN_CANDIDATES,
        unsupported=lambda plan: "the best is refused" if plan == best else None,
    )
    try:
        chosen = link.plan(JOB, INVENTORY)
    finally:
        link.close()
    assert chosen.plan == ranked[1].plan
    assert chosen.predicted_iteration_s == ranked[1].estimate.iteration_time_s


def test_no_runnable_plan_is_a_clear_line(address, tmp_path):
    """The engine refuses every plan the planner ranked (here: the run interleaves two virtual
    stages, the job was planned without): the re-plan says why instead of starting ranks."""
    interleaved = ExecutionOptions(virtual_stages=2)
    link = PlannerLink(
        address,
        candidates=PLAN_CANDIDATES,
        unsupported=lambda plan: unsupported_reason(interleaved, JOB, plan),
    )
    try:
        with pytest.raises(PlannerUnavailableError) as info:
            link.plan(JOB, INVENTORY)
    finally:
        link.close()
    assert f"none of the planner's {PLAN_CANDIDATES} best plans" in str(info.value)
    assert "virtual_stages: the run asks 2 but the job was planned with 1" in str(info.value)


def test_options_no_shape_runs_with_are_named(address, tmp_path):
    """Sequence parallelism splits the sequence over the TP ranks: with 31 tokens no TP degree
    divides it, the planner tabulates no shape, and the re-plan names the option and why
    (the planner's refusal, not only 'no plan fits in memory')."""
    options = ExecutionOptions(sequence_parallel=True)
    job = Job.create("tiny-llama", 8, 31, options=options)
    cfg = dataclasses.replace(_config(tmp_path, sequence_parallel=True), job=job)
    link = PlannerLink(address, **engine_filter(cfg))
    try:
        with pytest.raises(PlannerUnavailableError) as info:
            link.plan(job, INVENTORY)
    finally:
        link.close()
    message = str(info.value)
    assert "among the shapes the job's options run" in message
    assert "options.sequence_parallel: sequence parallelism splits each sequence's 31" in message


def test_restricting_options_ask_for_more_plans(tmp_path):
    assert engine_filter(_config(tmp_path))["candidates"] == 1
    assert engine_filter(_config(tmp_path))["max_pipeline_depth"] == 0  # the planner's default
    assert engine_filter(_config(tmp_path, zero="zero3"))["candidates"] == PLAN_CANDIDATES
    assert engine_filter(_config(tmp_path, zero="zero3"))["max_pipeline_depth"] == 1
    assert engine_filter(_config(tmp_path, zero="zero2"))["max_pipeline_depth"] == 0  # pipelines
    cfg = _config(tmp_path)
    fp8 = dataclasses.replace(cfg.run.options, fp8="delayed")
    bad = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, options=fp8))
    with pytest.raises(SailorRuntimeError, match="fp8: delayed is simulated, not run by the en"):
        engine_filter(bad)
    with pytest.raises(SailorRuntimeError, match="fp8: delayed is simulated, not run by the en"):
        ControllerConfig.from_run(bad.run, JOB, run_dir=tmp_path, planner_address="x:9")


def test_sailor_run_refuses_what_local_workers_cannot_plan(tmp_path):
    """Local workers hold one rank each: sequence parallelism (tp > 1) is refused at once,
    exit 2 and one line, instead of a run that waits for a plan that cannot come."""
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--sequence-parallel",
           "--run-dir", str(tmp_path / "run")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "error: --sequence-parallel: a local run's workers hold one rank each" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_interleaved_runs_get_a_plan_the_engine_interleaves(address, tmp_path):
    """A job planned with 2 virtual stages: the real planner prices the interleaved bubble,
    the controller keeps the best plan with >= 2 stages, a microbatch count that is a multiple
    of the stage count and a layer per chunk; the run's value must be the job's."""
    options = ExecutionOptions(virtual_stages=2)
    job = Job.create("tiny-llama", 8, 32, options=options)
    cfg = dataclasses.replace(_config(tmp_path, virtual_stages=2), job=job)
    found = engine_filter(cfg)
    assert found["candidates"] == PLAN_CANDIDATES
    link = PlannerLink(address, **found)
    try:
        plan = link.plan(job, INVENTORY).plan
    finally:
        link.close()
    assert plan.num_stages >= 2
    assert all(r.num_microbatches % plan.num_stages == 0 for s in plan.stages for r in s.replicas)
    assert unsupported_reason(options, job, plan) is None
    with pytest.raises(SailorRuntimeError, match="virtual_stages 2 differs from the job's 1"):
        engine_filter(_config(tmp_path, virtual_stages=2))


def test_fsdp_runs_get_a_one_stage_plan_where_the_best_are_pipelined(address, tmp_path):
    """OPT-350M on 8 V100s: ZeRO-3 does not pipeline, so the link asks for one-stage plans
    only (``engine_filter``) and gets one the engine runs (when ZeRO-2 did not pipeline
    either, its 8 best plans were all pipelined and the re-plan said 'none of the planner's 8
    best plans runs'). ZeRO-2 pipelines (``engine.parallel.fsdp``): its run takes the
    planner's pipelined best."""
    plans = {}
    for zero in ("zero3", "zero2"):
        options = ExecutionOptions(zero=zero)
        job = Job.create("OPT-350M", 16, 2048, options=options)
        cfg = dataclasses.replace(_config(tmp_path, zero=zero), job=job)
        link = PlannerLink(address, **engine_filter(cfg))
        try:
            plans[zero] = link.plan(job, Inventory.parse(["V100-16@us-central1-a=8"])).plan
        finally:
            link.close()
        assert unsupported_reason(options, job, plans[zero]) is None
    assert plans["zero3"].num_stages == 1
    assert plans["zero2"].num_stages > 1
