"""A run folder's checkpoints resume only on the tokens their weights learned: `sailor
controller` / `sailor run` with another --data tokenizer (or none) on a folder refuse, in one
line; the same tokenizer over new text resumes. Real prepared folders, real controllers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.controller.rundir import RunDirError
from sailor_runtime.data import BUNDLED_CORPUS
from sailor_runtime.data.prepare import PrepareConfig, prepare
from sailor_sim import Job


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two tokenizers (A, B), new text through A's tokenizer (A2), and a model for them."""
    root = tmp_path_factory.mktemp("tokens")
    text, more = root / "a.txt", root / "b.txt"
    corpus = BUNDLED_CORPUS.read_text()
    text.write_text(corpus[:6000])
    more.write_text(corpus[6000:12000])
    prepare(PrepareConfig((text,), root / "A", vocab_size=300))
    prepare(PrepareConfig((more,), root / "B", vocab_size=300))
    prepare(PrepareConfig((more,), root / "A2", tokenizer=root / "A" / "tokenizer.json"))
    model = root / "model.json"
    model.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2,
                                 "n_positions": 32, "vocab_size": 320}))  # fmt: skip
    return root, str(model)


def config(run_dir: Path, model: str, data: Path | None) -> ControllerConfig:
    training = {"data_dir": str(data)} if data else {}
    return ControllerConfig.for_job(job=Job.create(model, 8, 32), steps=4, checkpoint_every=2,
                                    run_dir=run_dir, planner_address="127.0.0.1:9",
                                    min_workers=5, training=training)  # fmt: skip


def controller_process(run_dir: Path, model: str, *extra: str) -> subprocess.CompletedProcess:
    args = ["controller", "--planner", "127.0.0.1:9", "--run-dir", str(run_dir), "--quiet",
            "--model", model, "--steps", "4", "--checkpoint-every", "2",
            "--min-workers", "5"]  # fmt: skip
    code = "from sailor_runtime.cli import app; app()"
    return subprocess.run([sys.executable, "-c", code, *args, *extra], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_checkpoints_resume_only_on_the_tokens_they_learned(folders, tmp_path):
    root, model = folders
    run = tmp_path / "run"
    Controller(config(run, model, root / "A")).close()  # the run started on A
    other = controller_process(run, model, "--data", str(root / "B"))
    assert other.returncode == 2, other.stderr[-800:]
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --data: the checkpoints in"), lines
    assert "--tokenizer" in lines[0] and "Traceback" not in other.stderr
    with pytest.raises(RunDirError, match="the built-in byte corpus"):
        Controller(config(run, model, None))  # no --data: the byte corpus's ids
    # new text through the run's own tokenizer goes on from the checkpoints
    Controller(config(run, model, root / "A2")).close()
    again = Controller(config(run, model, root / "A"))
    assert again.run_lock.resumed
    again.close()
