"""Exactly-once sample order across a failure and a re-plan: real ranks (gloo, local
processes) train a plan on prepared token shards, are killed with SIGKILL mid-epoch, and a
different plan (other DP degree, replica mix and microbatch sizes) resumes from the
checkpoint. The sample log of every step that stands must hold each sample of the epoch once.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from sailor_runtime.data import BUNDLED_CORPUS
from sailor_runtime.data.audit import trained_sample_ids
from sailor_runtime.data.prepare import PrepareConfig, prepare
from sailor_runtime.data.shards import TokenShards
from sailor_runtime.engine.launch import launch_local, start_local
from sailor_sim.spec.job import Job
from sailor_sim.spec.plan import Plan, Replica, Stage

GBS, SEQ = 8, 16


def R(tp: int, mbs: int, n: int) -> Replica:
    return Replica("CPU", "local", tp, mbs, n)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("order")
    text = root / "small.txt"
    text.write_text(BUNDLED_CORPUS.read_text()[:3000])  # about 60 windows: 2 epochs in a test
    prepare(PrepareConfig((text,), root / "shards", vocab_size=300, val_fraction=0.2))
    model = root / "model.json"
    model.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2,
                                 "n_positions": 32, "vocab_size": 320}))  # fmt: skip
    return root / "shards", Job.create(str(model), GBS, SEQ)


def _last_step(path) -> int:
    try:
        return max(json.loads(line)["step"] for line in path.read_text().splitlines())
    except (OSError, ValueError):
        return 0


@pytest.mark.timeout(300)
def test_each_sample_once_across_a_kill_and_a_replan(shards, tmp_path):
    folder, job = shards
    windows = TokenShards(folder, "train", SEQ).num_windows
    steps = windows // GBS + 2  # past the end of the first epoch
    log = tmp_path / "samples.jsonl"
    training = {"data_dir": str(folder), "sample_log_path": str(log), "eval_every": 0}
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "a.jsonl"
    # Plan A: one stage, two replicas with different microbatches (DP 2).
    plan_a = Plan((Stage(0, 3, (R(1, 4, 1), R(1, 2, 2))),))
    run = start_local(job, plan_a, steps=10_000, checkpoint_dir=ckpt, checkpoint_every=2,
                      metrics_path=metrics, training=training, store_prefix="gen1")  # fmt: skip
    deadline = time.monotonic() + 200
    while _last_step(metrics) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    run.kill()  # SIGKILL every rank, mid-epoch
    run.wait(30)
    killed_at = _last_step(metrics)
    assert 3 <= killed_at < windows // GBS, "the kill must land inside the first epoch"
    # Plan B: three replicas (DP 3) with other microbatch sizes and counts.
    plan_b = Plan((Stage(0, 3, (R(1, 2, 1), R(1, 1, 2), R(1, 4, 1))),))
    codes = launch_local(job, plan_b, steps=steps, checkpoint_dir=ckpt, checkpoint_every=2,
                         metrics_path=tmp_path / "b.jsonl", training=training, log_dir=tmp_path,
                         store_prefix="gen2", timeout_s=240)  # fmt: skip
    assert codes == [0] * plan_b.num_gpus, (tmp_path / "rank0.log").read_text()[-2000:]
    by_step = trained_sample_ids(log)
    assert sorted(by_step) == list(range(1, steps + 1))
    assert all(len(ids) == GBS for ids in by_step.values())
    seen = [i for step in sorted(by_step) for i in by_step[step]]
    # The first epoch: every window exactly once, whatever plan trained which step.
    assert Counter(seen[:windows]) == Counter(range(windows))
    # And the whole run is the pure order: sample n is window order(n), n = 0, 1, ...
    order = TokenShards(folder, "train", SEQ, seed=0).order
    assert seen == [order.window(n) for n in range(steps * GBS)]
    # Steps after the last checkpoint before the kill were trained twice; only one counts.
    raw = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({r["run"] for r in raw}) == 2


@pytest.mark.timeout(300)
def test_eval_loss_is_the_same_for_every_plan(shards, tmp_path):
    """Validation loss through a pipelined DP-2 plan with mixed microbatches equals one rank's
    (fp64): each replica evaluates its share of the same validation samples."""
    folder, job = shards
    training = {"data_dir": str(folder), "eval_every": 2, "eval_batches": 2}
    one = Plan((Stage(0, 3, (R(1, 8, 1),)),))
    pipelined = Plan((Stage(0, 1, (R(1, 2, 2), R(1, 4, 1))), Stage(2, 3, (R(1, 2, 2), R(1, 4, 1)))))
    evals = []
    for name, plan in (("one", one), ("pp2", pipelined)):
        metrics = tmp_path / f"{name}.jsonl"
        codes = launch_local(job, plan, steps=4, checkpoint_dir=tmp_path / name, dtype="fp64",
                             metrics_path=metrics, training=training, log_dir=tmp_path,
                             timeout_s=240)  # fmt: skip
        assert codes == [0] * plan.num_gpus, (tmp_path / "rank0.log").read_text()[-2000:]
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        evals.append([(m["step"], m["eval_loss"]) for m in lines if "eval_loss" in m])
    assert [s for s, _ in evals[0]] == [2, 4]
    assert [s for s, _ in evals[1]] == [2, 4]
    for (_, a), (_, b) in zip(evals[0], evals[1], strict=True):
        assert a == pytest.approx(b, rel=1e-10)
    assert evals[0][1][1] < evals[0][0][1]  # it learns
