"""`sailor run` says which precision it trained in and why: the model's torch_dtype by default
(as sailor-sim and sailor-planner take it), on CPU worker types too. The summary said only
'options ... bf16 ...' with no word of where bf16 came from (a user who passed nothing saw a
CPU run in bf16). A real `sailor run --local` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = Path(__file__).parents[3] / "examples" / "shakespeare-demo" / "config.json"


@pytest.mark.timeout(400)
def test_the_summary_names_the_precision_and_why(tmp_path):
    out = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "1",
         "--gpu-types", "cpu-1t", "--no-profile", "--steps", "2", "--checkpoint-every", "1",
         "--model", str(CONFIG), "--run-dir", str(tmp_path / "run"), "--json", str(out)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=380,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = "bf16: the default: torch_dtype 'bfloat16' of config.json"
    assert json.loads(out.read_text())["precision"] == said
    assert f"precision       {said}" in done.stdout, done.stdout
    # piped (no terminal) the progress lines end at the last step: the run ended between two
    # polls and the log's last line said 'step 0/2 ... waiting' after 2 steps had trained
    steps = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert steps and steps[-1].startswith("step 2/2 loss "), done.stderr[-2000:]
