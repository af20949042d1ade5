"""Logical, plan-independent checkpoints: saved asynchronously, written atomically, loaded into
any plan.

Layout of ``DIR/step_00000010/``:
- ``layer_003.pt`` per layer id: ``{"params": {name: full tensor}, "exp_avg": {...},
  "exp_avg_sq": {...}, "opt_step": {name: float}}``, names relative to the layer
  (``attn.q.weight``); full (unsharded) tensors, so any TP degree can slice them on load.
- ``trainer.pt``: RNG states (torch, python).
- ``manifest.json``, written LAST: format, step, consumed samples, model, LR schedule, the plan
  that wrote it (informational) and every file with its size and sha256 (``integrity``).

Saving: the TP ranks of replica 0 of each stage gather their shards on TP rank 0 (the only
collective), which copies them to CPU (the snapshot; training waits only for this) and hands
them to a background thread that writes the stage's layer files into ``step_N.tmp/`` and then a
``stage_I.done`` marker. Global rank 0's thread waits for every stage's marker, writes the
manifest (temp file + fsync + rename) and renames ``step_N.tmp`` to ``step_N``. A crash
anywhere before that rename leaves only a ``.tmp`` directory, which loading ignores (and the next
run removes): the previous checkpoint stays the latest valid one. A complete checkpoint whose
files no longer match the manifest (size or content hash) is skipped with a warning naming the
file, and the next older one is used. The directory must be shared
by all writer ranks (one machine, or a shared filesystem).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from sailor_profiler.zoo import get_split, shard

from . import integrity

FORMAT = "sailor-ckpt-v1"
# Test knob: seconds the writer sleeps after each layer file (to kill -9 a save in flight).
DELAY_ENV = "SAILOR_CKPT_WRITE_DELAY_S"
log = logging.getLogger("sailor.checkpoint")


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _gather_full(t: torch.Tensor, split, tp_size: int, group, dst: int | None):
    """The full tensor on global rank ``dst`` (TP rank 0), None on the other TP ranks."""
    if split is None or tp_size == 1:
        return t.detach().cpu().clone() if dst is None or dist.get_rank() == dst else None
    local = t.detach().contiguous()
    mine = dist.get_rank() == dst
    parts = [torch.empty_like(local) for _ in range(tp_size)] if mine else None
    dist.gather(local, parts, dst=dst, group=group)
    return torch.cat(parts, split[0]).cpu() if mine else None


def snapshot(stage_module, opt_state: dict, tp_size: int, tp_group, dst: int | None = None):
    """Full CPU tensors of every layer of this stage, gathered on global rank ``dst`` (TP rank 0
    of the group; None without TP). ``opt_state``: parameter -> AdamW state (this rank's
    shard). Collective over the TP group; returns None off ``dst``."""
    out: dict[int, dict] = {}
    for lid in stage_module.layer_ids:
        entry = {"params": {}, "exp_avg": {}, "exp_avg_sq": {}, "opt_step": {}}
        for name, p in stage_module.layer_params(lid).items():
            split = get_split(p)
            entry["params"][name] = _gather_full(p, split, tp_size, tp_group, dst)
            st = opt_state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in st:
                    entry[key][name] = _gather_full(st[key], split, tp_size, tp_group, dst)
            if "step" in st:
                entry["opt_step"][name] = float(st["step"])
        out[lid] = entry
    return out if dst is None or dist.get_rank() == dst else None


class AsyncSaver:
    """Writes snapshots in a background thread; one save in flight at a time."""

    def __init__(self, root: str | Path, rank: int, num_stages: int, keep: int = 3) -> None:
        self.root, self.rank, self.num_stages, self.keep = Path(root), rank, num_stages, keep
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise RuntimeError(f"checkpoint write failed: {self.error}") from self.error

    def save(
        self,
        step: int,
        stage_index: int,
        layers: dict[int, dict],
        manifest: dict | None,
        trainer: dict | None,
    ) -> None:
        """Start writing; ``manifest``/``trainer`` only on global rank 0 (the finalizer)."""
        self.wait()
        self._thread = threading.Thread(
            target=self._run,
            args=(step, stage_index, layers, manifest, trainer),
            daemon=False,
            name="sailor-ckpt-writer",
        )
        self._thread.start()

    def _run(self, step, stage_index, layers, manifest, trainer) -> None:
        try:
            self._write(step, stage_index, layers, manifest, trainer)
        except BaseException as exc:  # reported by the next wait()
            self.error = exc

    def _write(self, step, stage_index, layers, manifest, trainer) -> None:
        tmp = self.root / f"{step_dir(self.root, step).name}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        delay = float(os.environ.get(DELAY_ENV, "0") or 0)
        files = {}
        for lid, entry in sorted(layers.items()):
            name = f"layer_{lid:03d}.pt"
            torch.save(entry, tmp / (name + ".part"))
            os.replace(tmp / (name + ".part"), tmp / name)
            files[name] = integrity.describe(tmp / name)
            if delay:
                time.sleep(delay)
        _fsync_write(tmp / f"stage_{stage_index}.done", json.dumps(files).encode())
        if manifest is None:
            return
        torch.save(trainer, tmp / "trainer.pt")
        all_files = {"trainer.pt": integrity.describe(tmp / "trainer.pt")}
        for i in range(self.num_stages):
            all_files.update(json.loads(_wait_file(tmp / f"stage_{i}.done").read_text()))
        manifest = dict(manifest, files=all_files)
        _fsync_write(tmp / "manifest.json", json.dumps(manifest, indent=1).encode())
        final = step_dir(self.root, step)
        if final.exists():  # an older save of the same step (a rerun): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(self.root)
        self._prune()

    def _prune(self) -> None:
        done = sorted(p for p in self.root.glob("step_*") if not p.name.endswith(".tmp"))
        for old in done[: -self.keep] if self.keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)


def _wait_file(path: Path, timeout_s: float = 600.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:.0f} s")
        time.sleep(0.02)
    return path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_partial(root: str | Path) -> None:
    """Delete ``*.tmp`` leftovers of interrupted saves (rank 0, before training)."""
    root = Path(root)
    if root.is_dir():
        for p in root.glob("step_*.tmp"):
            shutil.rmtree(p, ignore_errors=True)


def read_manifest(path: Path) -> dict | None:
    """The manifest of a complete checkpoint directory, or None if it is not one (logged with
    the file at fault when the folder claims to be complete)."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    files = manifest.get("files")
    problem = "its manifest lists no files" if not isinstance(files, dict) or not files else None
    problem = problem or integrity.verify(path, files)
    if problem:
        log.warning("checkpoint %s skipped: %s; trying the next older one", path, problem)
        return None
    return manifest


def latest(root: str | Path) -> tuple[Path, dict] | None:
    """The newest valid checkpoint under ``root`` (and its manifest), or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    for p in sorted(root.glob("step_*"), reverse=True):
        if p.name.endswith(".tmp"):
            continue
        manifest = read_manifest(p)
        if manifest is not None:
            return p, manifest
    return None


def load_into(path: Path, stage_module, optimizer, tp_rank: int) -> None:
    """Reshard on load: slice each full tensor of this stage's layers by the parameter's split."""
    for lid in stage_module.layer_ids:
        entry = torch.load(path / f"layer_{lid:03d}.pt", map_location="cpu", weights_only=True)
        for name, p in stage_module.layer_params(lid).items():
            split = get_split(p)
            with torch.no_grad():
                p.copy_(shard(entry["params"][name], split, tp_rank).to(p.dtype))
            if name in entry["exp_avg"]:
                optimizer.state[p] = {
                    "step": torch.tensor(
                        entry["opt_step"][name],
                        dtype=torch.float32,
                        device=_step_device(optimizer, p),
                    ),
                    "exp_avg": shard(entry["exp_avg"][name], split, tp_rank).to(p),
                    "exp_avg_sq": shard(entry["exp_avg_sq"][name], split, tp_rank).to(p),
                }


def _step_device(optimizer, p: torch.Tensor) -> torch.device:
    """torch's fused AdamW keeps its step counter on the parameter's device; ours on CPU."""
    fused = getattr(optimizer, "defaults", {}).get("fused")
    return p.device if fused else torch.device("cpu")


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def restore_rng(path: Path) -> dict:
    """Restore the RNG states saved with the checkpoint; returns the whole trainer state."""
    state = torch.load(path / "trainer.pt", weights_only=False)
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    return state
