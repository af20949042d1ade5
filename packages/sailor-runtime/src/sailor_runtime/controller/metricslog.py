"""The run's metrics file: every step the metrics ranks report, one JSON line each, in the run
folder (``metrics.jsonl``; plotting tools read it as is), and the same scalars to TensorBoard
(``tensorboard/``) when the ``tensorboard`` package is installed. The summary of ``sailor
run`` reads its figures back from this file (``read_metrics``)."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

log = logging.getLogger("sailor.controller")

METRICS_FILE = "metrics.jsonl"

ENGINE_FIELDS = (
    "grad_norm",
    "lr",
    "tokens_per_s",
    "model_tflops_per_gpu",
    "mfu",
    "peak_memory_bytes",
    "eval_loss",
    "world_size",
)
"""What the controller keeps of a metrics rank's full JSON line (``StepMetrics.raw_json``)."""

TB_SCALARS = ("loss", "eval_loss", "grad_norm", "lr", "tokens_per_s", "model_tflops_per_gpu",
              "mfu", "peak_memory_bytes")  # fmt: skip


def engine_fields(raw_json: str) -> dict:
    """The ``ENGINE_FIELDS`` of a rank's metrics line (missing or malformed: none)."""
    try:
        line = json.loads(raw_json) if raw_json else {}
    except ValueError:
        return {}
    if not isinstance(line, dict):
        return {}
    return {k: line[k] for k in ENGINE_FIELDS if k in line}


class MetricsLog:
    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self._file = open(self.path, "a")
        self._tb = _tensorboard(Path(run_dir) / "tensorboard")

    def append(self, rec: dict) -> None:
        if self._file.closed:  # a heartbeat that arrived after the run closed
            return
        self._file.write(json.dumps(rec) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key in TB_SCALARS:
                if isinstance(rec.get(key), int | float):
                    self._tb.add_scalar(key, rec[key], rec["step"])

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _tensorboard(folder: Path):
    # Asked first: torch.utils.tensorboard imports torch (~4 s CPU on a 2-core machine) before
    # it finds tensorboard missing, and the controller needs torch for nothing else.
    if importlib.util.find_spec("tensorboard") is None:
        return None  # tensorboard is optional: the JSONL file has everything
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # installed but unusable (a partial install): as if absent
        return None
    try:
        return SummaryWriter(str(folder))
    except Exception as exc:  # noqa: BLE001 - a broken optional install must not stop a run
        log.warning("TensorBoard disabled: %s", exc)
        return None


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics file (a torn last line, from a crash mid-write, is skipped)."""
    out = []
    try:
        text = Path(path).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            out.append(rec)
    return out
