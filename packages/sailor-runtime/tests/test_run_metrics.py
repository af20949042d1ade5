"""The run's metrics file and the summary figures read from it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from sailor_runtime.controller.metricslog import MetricsLog, engine_fields, read_metrics
from sailor_runtime.run.summary import RunSummary, eval_losses, render, throughput_figures
from sailor_sim.simulate.metrics import throughput
from sailor_sim.spec.job import Job
from sailor_sim.spec.plan import Plan, Replica, Stage


def _rec(step, gen=1, **extra):
    base = {"generation": gen, "rank": 0, "step": step, "loss": 5.0 - step / 10,
            "iteration_time_s": 0.5, "time": 0.0}  # fmt: skip
    return {**base, **extra}


def test_metrics_file_round_trip_and_torn_line(tmp_path):
    log = MetricsLog(tmp_path)
    for s in (1, 2, 3):
        log.append(_rec(s, tokens_per_s=100.0 * s))
    log.close()
    log.append(_rec(4))  # after close (a late heartbeat): dropped, no crash
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": ')  # a crash mid-write
    assert [m["step"] for m in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_engine_fields_keep_the_engine_figures_only():
    raw = json.dumps({"step": 3, "mfu": 0.4, "eval_loss": 4.2, "plan": "PP1", "junk": 1})
    assert engine_fields(raw) == {"mfu": 0.4, "eval_loss": 4.2}
    assert engine_fields("not json") == {} and engine_fields("[1]") == {}


def test_summary_figures_come_from_the_records():
    job = Job.create("tiny-gpt", 8, 32)
    plan = Plan((Stage(0, 7, (Replica("A100-40", "local", 1, 8, 1),)),))
    metrics = [_rec(s, gen=1 + (s > 4), tokens_per_s=1000.0 + s, mfu=0.01 * s,
                    model_tflops_per_gpu=0.5, **({"eval_loss": 4.0 - s / 10} if s % 2 == 0 else {}))
               for s in range(1, 11)]  # fmt: skip
    t = throughput_figures(metrics, 2, job, plan, predicted_s=0.25, skip=2)
    # generation 2 is steps 5-10; without its first 2 steps: 7-10, median 8.5
    assert t["tokens_per_s"] == 1008.5 and t["mfu"] == pytest.approx(0.085)
    # The simulator's MFU is the one sailor_sim.simulate.metrics gives an estimate of that
    # iteration time.
    sim = throughput(job, plan, SimpleNamespace(samples_per_s=8 / 0.25))
    assert t["simulated_mfu"] == pytest.approx(sim.mfu)
    evals = eval_losses(metrics)
    assert [(e["step"], e["generation"]) for e in evals] == [
        (2, 1),
        (4, 1),
        (6, 2),
        (8, 2),
        (10, 2),
    ]
    text = render(RunSummary("DONE", 10, 10, 4.9, 4.0, "PP1", 0.5, 0.25, 9.0,
                             eval_losses=evals, throughput=t))  # fmt: skip
    assert "eval loss       2: 3.800 (gen 1)" in text and "10: 3.000 (gen 2)" in text
    assert "MFU measured 8.50%" in text and f"simulator {sim.mfu:.2%}" in text


@pytest.mark.parametrize(("mfu", "shown"), [(0.4123, "MFU 41.2%"), (0.0003, "MFU 0.03%")])
def test_progress_line_shows_small_mfu(capsys, mfu, shown):
    """The live step line printed "MFU 0.0%" for a tiny model measured at 0.03 % on an H200."""
    from sailor_runtime.run.summary import Progress

    bar = Progress(10)
    bar.update(5, 4.2, 1, "RUNNING", {"mfu": mfu, "tokens_per_s": 1000.0})
    bar.close()
    assert shown in capsys.readouterr().err


def test_progress_line_shows_no_loss_before_the_first_step(capsys):
    """While the workers start, the line said 'step 0/40 loss 0.0000', a loss never measured."""
    from sailor_runtime.run.summary import Progress

    bar = Progress(40)
    bar.update(0, 0.0, 0, "WAITING")
    bar.update(4, 3.25, 1, "RUNNING")
    bar.close()
    err = capsys.readouterr().err
    assert "step 0/40 loss - gen 0 waiting" in err and "loss 3.2500 gen 1" in err


def test_a_piped_progress_log_ends_at_the_runs_last_state(capsys):
    """A run that ends between two polls: the log's last line said 'step 0/40 ... waiting'
    after its steps had trained. Closing with the final state prints it, once."""
    from sailor_runtime.run.summary import Progress

    bar = Progress(40)
    bar.update(0, 0.0, 0, "WAITING")
    bar.close(40, 2.5, 1, "DONE")
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("step ")]
    assert lines == ["step 0/40 loss - gen 0 waiting", "step 40/40 loss 2.5000 gen 1 done"]
    bar = Progress(40)
    bar.update(40, 2.5, 1, "DONE")
    bar.close(40, 2.5, 1, "DONE")  # already its last line: not repeated
    assert capsys.readouterr().err.count("step 40/40") == 1
    quiet = Progress(40, enabled=False)
    quiet.close(40, 2.5, 1, "DONE")
    assert capsys.readouterr().err == ""
