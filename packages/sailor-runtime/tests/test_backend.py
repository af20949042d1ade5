"""One backend per plan: gloo for CPU worker types, NCCL for GPUs, a mix refused in one line;
the controller's assignments carry the plan's backend (was gloo for every plan)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sailor_runtime.controller.assignments import build_assignments
from sailor_runtime.controller.controller import ControllerConfig
from sailor_runtime.engine.backend import (
    BackendError,
    check_backend,
    plan_backend,
    resolve_backend,
)
from sailor_sim import Job
from sailor_sim.spec.plan import Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)


def _plan(*types: str) -> Plan:
    reps = tuple(Replica(t, "local", 1, 8 // len(types), 1) for t in types)
    return Plan((Stage(0, 7, reps),)).check(JOB)


def test_backend_follows_the_worker_types():
    assert plan_backend(_plan("CPU", "cpu-2t")) == "gloo"
    assert plan_backend(_plan("H100-80", "A100-40")) == "nccl"


def test_a_plan_mixing_cpu_and_gpu_ranks_is_refused_in_one_line():
    with pytest.raises(BackendError) as err:
        plan_backend(_plan("cpu-1t", "A100-40"))
    msg = str(err.value)
    assert "\n" not in msg and "cpu-1t" in msg and "A100-40" in msg and "separate" in msg


def test_explicit_backend_must_fit_the_plan():
    assert resolve_backend("auto", _plan("T4")) == "nccl"
    with pytest.raises(BackendError, match="use 'gloo' or 'auto'"):
        resolve_backend("nccl", _plan("CPU"))


def test_rank_refuses_nccl_without_cuda_naming_the_fix():
    with pytest.raises(BackendError, match="H100-80 ranks and this node has none.*cpu-1t"):
        check_backend("nccl", _plan("H100-80"), cuda_devices=0)
    check_backend("nccl", _plan("H100-80"), cuda_devices=1)
    check_backend("gloo", _plan("H100-80"), cuda_devices=0)  # emulation, asked explicitly
    with pytest.raises(BackendError, match="nccl cannot run CPU worker types"):
        check_backend("nccl", _plan("CPU"), cuda_devices=8)


@pytest.mark.parametrize(("gpu", "backend"), [("A100-80", "nccl"), ("cpu-1t", "gloo")])
def test_controller_assigns_the_plans_backend(tmp_path: Path, gpu, backend):
    cfg = ControllerConfig.for_job(job=JOB, steps=4, checkpoint_every=2, run_dir=tmp_path,
                           planner_address="127.0.0.1:9")  # fmt: skip
    assert cfg.backend == "auto"
    msgs = build_assignments(cfg, 1, _plan(gpu), {"w": [(0, 0)]}, 1234)
    assert msgs["w"].backend == backend


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_checkpoint_rng_carries_the_cuda_generators(tmp_path: Path):
    """A resumed CUDA rank draws the same numbers (dropout masks) as the uninterrupted one."""
    from sailor_runtime.engine.checkpoints import checkpoint as ckpt

    device = torch.device("cuda", 0)
    torch.cuda.manual_seed_all(7)  # lazy: applied at CUDA's first use, after the save below
    torch.save(ckpt.rng_state(device), tmp_path / "trainer.pt")
    first = torch.rand(8, device=device)
    torch.rand(8, device=device)  # the generator moves on
    ckpt.restore_rng(tmp_path, device)
    assert torch.equal(torch.rand(8, device=device), first)
