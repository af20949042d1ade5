"""GPU workers on one machine: `sailor run --local` accepts this machine's GPU type (and only
it), and an agent that sees only some GPUs gives each rank the right one."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sailor_runtime import cli
from sailor_runtime.agent.ranks import cuda_visible, rank_environment
from sailor_runtime.engine.config import RANK_ENV
from sailor_runtime.errors import SailorRuntimeError


def test_rank_device_indexes_the_agents_own_visible_gpus():
    assert cuda_visible(1, None) == "1"
    assert cuda_visible(0, "") == "0"
    # Slurm gave this agent GPUs 4 and 6: its device 1 is GPU 6, not GPU 1
    assert cuda_visible(1, "4,6") == "6"
    assert cuda_visible(0, "GPU-3f2a,GPU-99b1") == "GPU-3f2a"
    with pytest.raises(SailorRuntimeError, match="not among this agent's"):
        cuda_visible(2, "4,6")


def test_a_rank_sees_one_gpu_as_local_rank_0_whatever_the_agent_inherited(monkeypatch):
    """An agent in a pod or under torchrun inherits LOCAL_RANK; its ranks each see one GPU
    (CUDA_VISIBLE_DEVICES), so their LOCAL_RANK is 0, never the agent's (the engine's NCCL
    path takes LOCAL_RANK as its device: LOCAL_RANK=3 named cuda:3 of one visible GPU)."""
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    env = rank_environment({"OMP_WAIT_POLICY": "PASSIVE"}, 5, 1)
    assert (env["LOCAL_RANK"], env["CUDA_VISIBLE_DEVICES"]) == ("0", "6")
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env[RANK_ENV] == "5"


def test_gpu_type_without_gpus_is_refused_in_one_line():
    if cli._local_gpu() is not None:
        pytest.skip("this machine has GPUs")
    r = subprocess.run(
        [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--gpu-types", "A100-40"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "no CUDA GPU" in lines[0], r.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu-types", "A100-40,cpu-1t"], "mixes CPU worker types and GPUs"),
        (["--gpu-types", "A100-40", "--workers", "3"], "3 GPU workers need as many GPUs"),
        (["--gpu-types", "H100-80"], "this machine's GPUs are 2x A100-40"),
    ],
)
def test_gpu_types_checked_against_the_detected_gpus(monkeypatch, args, words):
    """The detection is replaced (no GPU here); the checks that follow it are the real ones."""
    monkeypatch.setattr(cli, "_local_gpu", lambda: ("A100-40", 2))
    r = CliRunner().invoke(cli.app, ["run", "--local", *args])
    assert r.exit_code == 2 and words in r.output, r.output


def test_controller_backend_flag_is_checked():
    r = CliRunner().invoke(cli.app, ["controller", "--planner", "127.0.0.1:9", "--backend", "mpi"])
    assert r.exit_code == 2 and "--backend: 'mpi': use auto, gloo or nccl" in r.output, r.output


def test_gpu_workers_profile_tp1_alone():
    """A GPU worker of `sailor run --local` holds one GPU: asking the profiler for TP 2 there
    failed the first run on a one-GPU H200 ("TP 2 needs 2 GPUs from cuda:0")."""
    from pathlib import Path

    from sailor_runtime.run.profile import compute_args
    from sailor_sim.spec.job import Job

    job = Job.create("tiny-llama", 8, 64)
    for gpu, tps in ((True, "1"), (False, "1,2")):
        args = compute_args(job, Path("out"), gpu, "H200" if gpu else "CPU")
        assert args[args.index("--tp") + 1] == tps
        assert args[args.index("--device") + 1] == ("cuda" if gpu else "cpu")


def test_the_profile_measures_only_shapes_a_plan_can_use():
    """A microbatch holds at most the global batch, and a ``cpu-Nt`` node is one device (TP 1,
    as the planner's tp_degrees limit says): the Shakespeare run (gbs 8, one cpu-2t worker)
    profiled microbatches 1-16 at TP 1 and 2, three times the work its plans could use."""
    from pathlib import Path

    from sailor_runtime.run.profile import compute_args
    from sailor_sim import get_gpu
    from sailor_sim.spec.job import Job

    for gbs, label, mbs, tps in (
        (8, "cpu-2t", "1,2,4,8", "1"),
        (16, "cpu-1t", "1,2,4,8,16", "1"),
        (4, "CPU", "1,2,4", "1,2"),  # the legacy type's nodes hold 8 devices
        (1, "CPU", "1", "1,2"),
    ):
        job = Job.create("tiny-gpt", gbs, 64)
        args = compute_args(job, Path("out"), False, label)
        assert (args[args.index("--mbs") + 1], args[args.index("--tp") + 1]) == (mbs, tps)
        assert max(map(int, tps.split(","))) <= get_gpu(label).gpus_per_node
