"""Issue 23's done-when: a parameter added to RunSpec reaches the engine with no other
declaration. The test declares one field on a RunSpec subclass and nothing else; it becomes a
`sailor controller` flag (the real command, registered with that spec), travels to a real
worker agent (`sailor worker`, its own process) in the assignment's one RunSpec message, and
the rank process (gloo) reads it from its TrainConfig and logs it. The same run checks that
--precision defaults, as its help says, to the model config.json's torch_dtype."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path

import pytest
import typer

from sailor_runtime.cli import add_run_commands, app
from sailor_runtime.engine.config import TrainConfig
from sailor_runtime.run.processes import start_planner, start_worker
from sailor_sim import RunSpec, inputs

BF16_CONFIG = Path(__file__).parents[3] / "examples" / "shakespeare-demo" / "config.json"
"""A config.json whose torch_dtype is bfloat16 (and no --precision flag below)."""


@dataclasses.dataclass(frozen=True)
class NoisyRun(RunSpec):
    grad_noise: float = 0.0
    """Std of the Gaussian noise added to each gradient (a knob a user adds)."""


def _worker_when_bound(port_file, run_dir, started: list) -> None:
    """Start a real worker agent once the controller has written its port."""
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)
    address = f"127.0.0.1:{port_file.read_text().strip()}"
    started.append(start_worker("w0", address, "cpu-1t", "local", run_dir))


def test_a_field_added_to_runspec_reaches_the_rank_with_no_other_declaration(tmp_path):
    run_dir = tmp_path / "run"
    cli = add_run_commands(typer.Typer(), NoisyRun)
    planner = start_planner(tmp_path)
    port_file = tmp_path / "port"
    workers: list = []
    thread = threading.Thread(target=_worker_when_bound, args=(port_file, run_dir, workers))
    sigterm = signal.getsignal(signal.SIGTERM)  # the controller command installs its own
    argv = [
        "controller", "--planner", planner.address, "--run-dir", str(run_dir),
        "--port-file", str(port_file), "--quiet", "--grad-noise", "0.5",
        "--model", str(BF16_CONFIG),
        "--steps", "2", "--checkpoint-every", "1", "--global-batch-size", "2", "--seq-len", "16",
        "--heartbeat-interval", "0.3", "--heartbeat-timeout", "10", "--debounce", "0.1",
    ]  # fmt: skip
    thread.start()
    try:
        cli(args=argv, standalone_mode=False)  # returns once the run is DONE (else Exit(1))
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        thread.join()
        for w in workers:
            w.kill()
        planner.close()
    configs = sorted(run_dir.rglob("train.json"))
    assert configs, "no rank was started"
    received = TrainConfig.read(configs[-1])
    assert received.run.grad_noise == 0.5 and received.run.steps == received.steps == 2
    assert received.run.precision == "bf16"  # from torch_dtype "bfloat16"
    # The agent and the rank know only RunSpec: the field came back from the wire alone.
    assert isinstance(received.run, RunSpec) and not isinstance(received.run, NoisyRun)
    logs = "".join(p.read_text() for p in configs[-1].parent.glob("rank-*.log"))
    assert "'grad_noise': 0.5" in logs, logs[-2000:]


def test_a_rank_config_carries_the_added_field_through_its_file(tmp_path):
    """The same, without processes: the rank's TrainConfig declares no run setting of its own,
    so the subclass's field is in the file the rank reads (``run``) and nowhere else."""
    from sailor_runtime.engine.examples import JOBS, R
    from sailor_sim import Plan, Stage

    job = JOBS["gpt"]
    run = NoisyRun(model=job.model.name, global_batch_size=8, seq_len=job.sequence_length,
                   steps=3, grad_noise=0.25)  # fmt: skip
    cfg = TrainConfig.from_run(run, job, Plan((Stage(0, 7, (R(1, 8, 1),)),)))
    assert "grad_noise" not in TrainConfig.__dataclass_fields__
    back = TrainConfig.read(cfg.write(tmp_path / "train.json"))
    assert back.run.grad_noise == 0.25 and back.steps == 3


def test_without_the_field_the_flag_does_not_exist(capsys):
    with pytest.raises(SystemExit) as exited:
        inputs.run_app(app, "sailor", ["controller", "--planner", "127.0.0.1:9", "--grad-noise",
                                       "0.5"])  # fmt: skip
    assert exited.value.code == 2
    assert "--grad-noise" in capsys.readouterr().err
