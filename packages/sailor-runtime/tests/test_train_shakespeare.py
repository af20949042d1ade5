"""Done-when of issue 20: a 20-50M parameter GPT trained by `sailor run --local` on the bundled
public-domain corpus reaches a validation loss well below the corpus's unigram entropy, and
every figure of the run summary comes from the run's metrics file.

The bar is the unigram cross-entropy (``data.stats``): what a model that ignores context
scores; beating it by a margin means the model uses context. Kept small enough for a 2-core
CI (the profiling `sailor run` does first is part of its time): 200 steps of 256 tokens,
about 51K tokens; a 23M model at about 140 MFLOP per token is minutes of CPU. On the shared
dev VM (load average above 20) it took 7.5 minutes and went 5.71 (step 50) -> 5.34 (step 200)
against a unigram cross-entropy of 5.69 nats. ``bench/train_shakespeare.py`` prints the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.controller.metricslog import read_metrics
from sailor_runtime.data import BUNDLED_CORPUS
from sailor_runtime.data.prepare import PrepareConfig, prepare
from sailor_runtime.data.stats import unigram_cross_entropy
from sailor_runtime.run.summary import eval_losses
from sailor_sim.spec.job import Job

MODEL = Path(__file__).parents[3] / "examples" / "shakespeare-gpt" / "config.json"
STEPS, GBS, SEQ = 200, 8, 32
MARGIN_NATS = 0.25


@pytest.mark.timeout(1500)
def test_gpt_20m_plus_learns_shakespeare(tmp_path):
    params = Job.create(str(MODEL), GBS, SEQ).model.total_params()
    assert 20e6 <= params <= 50e6
    data = tmp_path / "shards"
    prepare(PrepareConfig((BUNDLED_CORPUS,), data, vocab_size=1024))
    unigram = unigram_cross_entropy(data)
    run, out = tmp_path / "run", tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "1",
           "--gpu-types", "cpu-2t", "--model", str(MODEL), "--data", str(data),
           "--eval-every", "50", "--steps", str(STEPS), "--global-batch-size", str(GBS),
           "--seq-len", str(SEQ), "--lr", "3e-3", "--min-lr", "3e-4", "--warmup-steps", "10",
           "--checkpoint-every", str(STEPS), "--run-dir", str(run), "--json", str(out),
           "--timeout", "1300", "--heartbeat-timeout", "10"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads(out.read_text())
    final = s["eval_losses"][-1]
    assert final["step"] == STEPS
    assert final["eval_loss"] < unigram - MARGIN_NATS, (final, unigram)
    assert s["eval_losses"][0]["eval_loss"] > final["eval_loss"]
    # Every figure of the summary is the metrics file's.
    metrics = read_metrics(run / "metrics.jsonl")
    assert s["eval_losses"] == eval_losses(metrics)
    assert (s["first_loss"], s["final_loss"]) == (metrics[0]["loss"], metrics[-1]["loss"])
    steady = sorted(m["tokens_per_s"] for m in metrics[2:])
    assert steady[0] <= s["throughput"]["tokens_per_s"] <= steady[-1]
    # MFU over the cores' physical peak (sailor_sim.catalog.hostcpu), not the catalog's
    # placeholder: a utilization, below 1.
    assert 0 < s["throughput"]["mfu"] < 1 and 0 < s["throughput"]["simulated_mfu"] < 1
    assert "eval loss" in proc.stdout and "MFU measured" in proc.stdout
