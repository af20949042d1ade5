"""The controller process (``sailor run``) reads checkpoint folders and writes the metrics file
without importing torch: the import costs ~4 s CPU on a 2-core machine, once per run, and the
controller uses none of it. Before, ``resume_step`` imported the engine's DCP module and the
metrics log imported ``torch.utils.tensorboard`` only to find tensorboard missing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

PROBE = """
import json, sys
from pathlib import Path
from sailor_runtime.controller.checkpoints import latest_checkpoint_step, resume_step
from sailor_runtime.controller.metricslog import MetricsLog
from sailor_runtime.engine.checkpoints import folders, integrity

root = Path(sys.argv[1])
good, damaged = folders.step_dir(root, 4), folders.step_dir(root, 8)
good.mkdir(parents=True)
damaged.mkdir()  # no manifest: skipped with a warning
(good / "__0_0.distcp").write_bytes(b"chunk")
manifest = {"format": folders.FORMAT, "step": 4,
            "files": {"__0_0.distcp": integrity.describe(good / "__0_0.distcp")}}
(good / "manifest.json").write_text(json.dumps(manifest))
steps = [latest_checkpoint_step(root), resume_step(root), resume_step(root / "none")]
log = MetricsLog(root)
log.append({"step": 1, "loss": 5.0})
log.close()
print(json.dumps({"steps": steps, "torch": "torch" in sys.modules}))
"""


def test_checkpoint_folders_and_metrics_need_no_torch(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["steps"] == [4, 4, 0]  # the damaged newer folder is skipped, an absent one is 0
    assert "step_00000008 skipped" in proc.stderr
    if importlib.util.find_spec("tensorboard") is None:  # with it, the TensorBoard writer's
        assert out["torch"] is False  # torch.utils.tensorboard imports torch, by choice
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
