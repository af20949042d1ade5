"""The run fence (issue 24, item 3): once a newer generation owns the checkpoint folder, the
ranks of the older one write nothing more into it. Real rank processes (gloo), real files; the
controller's side of the fence (``fence.write_fence`` before an assignment) is played here by
writing the fence the way the controller does."""

from __future__ import annotations

import time

from sailor_runtime.engine import start_local
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.checkpoints import fence
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)
PLAN = Plan(
    (
        Stage(0, 3, (Replica("CPU", "local", 1, 2, 4),)),
        Stage(4, 7, (Replica("CPU", "local", 1, 2, 4),)),
    )
)


def complete_steps(root) -> set[str]:
    """Checkpoints (a generation's own ``.tmp`` save folder is not one; the next generation's
    rank 0 removes it)."""
    done = [p for p in root.glob("step_*") if not p.name.endswith(".tmp")]
    return {p.name for p in done if (p / "manifest.json").exists()}


def test_ranks_of_a_superseded_generation_write_no_checkpoint(tmp_path):
    root = tmp_path / "ckpt"
    fence.write_fence(root, 1)
    run = start_local(
        JOB, PLAN, steps=400, checkpoint_dir=root, checkpoint_every=2, log_dir=tmp_path,
        generation=1, env={ckpt.DELAY_ENV: "0.3"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while "step_00000002" not in complete_steps(root):
            assert time.monotonic() < deadline and all(p.poll() is None for p in run.procs)
            time.sleep(0.05)
        fence.write_fence(root, 2)  # a new controller's generation 2 owns the folder now
        at_switch = complete_steps(root)
        codes = run.wait(timeout_s=120)
    finally:
        run.kill(9)
        for p in run.procs:
            p.wait()
    assert codes and all(c != 0 for c in codes), codes
    logs = " ".join((tmp_path / f"rank{r}.log").read_text() for r in range(2))
    assert "superseded by generation 2" in logs, logs[-2000:]
    assert complete_steps(root) == at_switch  # nothing written after the switch
    assert ckpt.latest(root)[0].name in at_switch  # and what was there stays loadable
