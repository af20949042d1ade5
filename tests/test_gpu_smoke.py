"""bench/gpu_smoke.py on CPU: the same script and code path a GPU machine runs (here gloo ranks,
this machine's cores as the worker type cpu-Nt), in a tiny configuration; and its verdict logic
on made-up figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.agent.cputypes import usable_cpus

SCRIPT = Path(__file__).parents[1] / "bench" / "gpu_smoke.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_runs_end_to_end_on_cpu(tmp_path):
    """Profile, predict, train with a checkpoint and a resume, reshard to CPU, report. The step
    time bar is wide here (8 engineers share 2 cores while CI runs); memory keeps its bar."""
    out = tmp_path / "smoke"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--gbs", "4", "--seq", "32"]
    cmd += ["--steps", "4", "--time-bar", "20", "--out", str(out)]
    cmd += ["--recompute", "selective", "--zero", "zero3"]  # the options reach both sides
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "recompute selective + zero zero3" in done.stdout
    ckpt = json.loads(next((out / "ckpt").rglob("manifest.json")).read_text())
    assert ckpt["options"]["zero"] == "zero3", ckpt
    for figure in ("step_time_s", "tokens_per_s", "mfu", "memory_bytes"):
        assert figure in done.stdout
    assert "resharded to CPU" in done.stdout and "gloo" in done.stdout
    # MFU over this machine's cores (a cpu-Nt worker type), the same denominator on both
    # sides: the catalog's "CPU" placeholder put OPT-350M at MFU 1.39
    assert f"cpu-{len(usable_cpus())}t x 1" in done.stdout
    pred, meas = (json.loads((out / f).read_text()) for f in ("prediction.json", "measured.json"))
    ratio = meas["mfu"] / pred["mfu"]
    assert 0 < meas["mfu"] < 1 and ratio == pytest.approx(pred["step_time_s"] / meas["step_time_s"])
    # the prediction exists before the first training step was written
    assert (out / "prediction.json").stat().st_mtime < (out / "first.jsonl").stat().st_mtime
    steps = [json.loads(x)["step"] for x in (out / "resumed.jsonl").read_text().splitlines()]
    assert steps == [3, 4]


def test_verdict_names_misses_and_missing_figures():
    smoke = _module()
    pred = {"step_time_s": 1.0, "tokens_per_s": 10.0, "mfu": 0.5, "memory_bytes": 100}
    assert smoke.report(pred, dict(pred), {"step_time_s": 0.1}) == []
    slow = dict(pred, step_time_s=1.5)
    assert smoke.report(pred, slow, {"step_time_s": 0.1}) == [
        "step_time_s: gap 50.0% over the bar 10%"
    ]
    missing = smoke.report(pred, {k: v for k, v in pred.items() if k != "memory_bytes"}, {})
    assert missing and missing[0].startswith("memory_bytes: missing")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "2"], "--steps >= 4"),
        (["--zero", "zero3", "--pp", "2"], "runs on one-stage plans"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1]
