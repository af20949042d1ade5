"""`sailor run --local --trace`: real workers join and leave as a (time-scaled) trace says, and
the replay's prediction is made for the same trace; bad traces are one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_planner.replay.trace import read_trace
from sailor_runtime.cli import app
from sailor_runtime.run.local import LocalRunConfig
from sailor_runtime.run.tracerun import run_trace

HEADER = "timestamp,zone,gpu_type,available,preempted\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + body)
    return path


@pytest.mark.timeout(400)
def test_workers_follow_the_trace_and_the_replay_predicts_the_run(tmp_path):
    # 3 CPU workers, one leaves gracefully, one joins back; 100 trace seconds = 8.3 s of wall
    # (each state holds a change and some steps; the replay charges a restart per change
    # whatever the states' length, and the assertions below hold for any time scale).
    trace = read_trace(
        write(tmp_path, "0,local,CPU,3,\n100,local,CPU,2,\n200,local,CPU,3,\n300,local,CPU,3,\n")
    )
    cfg = LocalRunConfig.create(
        run_dir=tmp_path / "run", checkpoint_every=4, profile=False, progress=False
    )
    result = run_trace(cfg, trace, time_scale=12.0)
    assert result.trace_wall_s == pytest.approx(25.0)
    assert result.changes == 2
    # The driver made the trace's changes happen: a worker left at 100 s, a new one joined at 200 s
    # (the steps noted are the controller's, which a restart from a checkpoint moves back).
    events = result.worker_events
    assert [e[0] for e in events] == ["leave", "join"], events
    assert events[1][1] != events[0][1], events  # a new worker joined, not the one that left
    # The replay's every-change policy charges a restart at the leave and at the join; the
    # controller restarts only where the plan or its placement changes (a leaving worker the
    # plan did not use, or a join the planner does not use, costs no restart), so the run has
    # at least one and at most the predicted number of new generations.
    assert result.predicted_reconfigurations == 2
    assert 0 <= result.reconfigurations <= result.predicted_reconfigurations
    assert result.boot_s > 0 and result.stretch >= 1.0
    # The calibration measured the phases the replay charges, before the trace started.
    cal = result.calibration
    assert cal.restart_s > 0 and cal.boot_cpu_s > 0 and cal.wall_step_s > 0 and cal.runnable > 0
    assert len(result.runnable) == len(trace.states) == len(result.per_state)
    assert result.measured_samples > 0 and result.predicted_samples > 0
    assert result.measured_samples == result.steps * cfg.global_batch_size


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("0,us-central1-a,CPU,2,\n10,us-central1-a,CPU,2,\n", "zone 'local'"),
        ("0,local,CPU,two,\n10,local,CPU,2,\n", "trace.csv row 1, column available"),
        ("0,local,CPU,0,\n10,local,CPU,2,\n", "starts with no GPUs"),
    ],
)
def test_bad_traces_are_one_line_and_exit_2(tmp_path, body, expected):
    out = CliRunner().invoke(
        app, ["run", "--local", "--trace", str(write(tmp_path, body)), "--run-dir", str(tmp_path)]
    )
    assert out.exit_code == 2, out.output
    errors = [line for line in out.stderr.splitlines() if not line.startswith("run folder:")]
    assert len(errors) == 1 and errors[0].startswith("error: ") and expected in errors[0]


@pytest.mark.parametrize("body", [None, "0,local,CPU,two,\n10,local,CPU,2,\n"])
def test_a_trace_it_cannot_read_leaves_no_run_folder_behind(tmp_path, monkeypatch, body):
    """The trace is read before the run folder is made: a missing or malformed one is one
    line and exit 2, with no `run folder:` line and no empty sailor-run-* folder left."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where mkdtemp would put it
    path = tmp_path / "nope.csv" if body is None else write(tmp_path, body)
    out = CliRunner().invoke(app, ["run", "--local", "--trace", str(path)])
    assert out.exit_code == 2, out.output
    assert len(out.stderr.strip().splitlines()) == 1 and "run folder" not in out.stderr
    assert not list(scratch.iterdir())
