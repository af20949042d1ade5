"""Training quality on real text: `sailor run --local` trains the 23.2M-parameter GPT of
examples/shakespeare-gpt on the bundled public-domain corpus (byte-level BPE, 1024 tokens) and
the validation loss is compared with the corpus's unigram cross-entropy (nats per token, the
loss of a model that ignores context; ``sailor_runtime.data.stats``).

Prints one row per evaluation (step, eval loss, below the unigram bar by) and exits 1 when the
final validation loss is not at least MARGIN nats below the bar, or when no evaluation was
recorded. Every figure is read from the run's metrics.jsonl. Minutes on a 2-core machine.

    python bench/train_shakespeare.py [--steps 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from sailor_runtime.controller.metricslog import read_metrics
from sailor_runtime.data import BUNDLED_CORPUS
from sailor_runtime.data.prepare import PrepareConfig, prepare
from sailor_runtime.data.stats import unigram_cross_entropy

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "shakespeare-gpt" / "config.json"
MARGIN = 0.25
"""Nats below the unigram bar the final validation loss must reach (the test's bar too)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shakespeare-"))
    prepare(PrepareConfig((BUNDLED_CORPUS,), work / "shards", vocab_size=1024))
    bar = unigram_cross_entropy(work / "shards")
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "1",
           "--gpu-types", "cpu-2t", "--model", str(MODEL), "--data", str(work / "shards"),
           "--eval-every", "50", "--steps", str(args.steps), "--global-batch-size", "8",
           "--seq-len", "32", "--lr", "3e-3", "--min-lr", "3e-4", "--warmup-steps", "10",
           "--checkpoint-every", str(args.steps), "--run-dir", str(work / "run"),
           "--heartbeat-timeout", "10"]  # fmt: skip
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL)
    evals = [m for m in read_metrics(work / "run" / "metrics.jsonl") if "eval_loss" in m]
    print(f"unigram cross-entropy of the validation split: {bar:.3f} nats/token")
    print(f"{'step':>6} {'eval loss':>10} {'below bar':>10}")
    for m in evals:
        print(f"{m['step']:>6} {m['eval_loss']:>10.3f} {bar - m['eval_loss']:>10.3f}")
    if rc != 0 or not evals:
        print(f"FAIL: the run exited {rc} with {len(evals)} evaluations ({work / 'run'})")
        return 1
    if evals[-1]["eval_loss"] > bar - MARGIN:
        print(f"FAIL: final eval loss {evals[-1]['eval_loss']:.3f} is not {MARGIN} below {bar:.3f}")
        return 1
    print(f"ok: final eval loss {evals[-1]['eval_loss']:.3f} <= {bar - MARGIN:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
