"""Plan-independent checkpoints through ``torch.distributed.checkpoint`` (DCP): saved
asynchronously, one file per writing rank, finalized atomically, loaded into any plan.

Layout of ``DIR/step_00000010/``:
- DCP's files: ``.metadata`` (every tensor's global shape and where its chunks are) and
  ``__R_0.distcp`` per rank R (the chunks that rank wrote; empty for ranks that write nothing).
  The state dict is flat and keyed by layer id, the vocabulary every plan shares (``key``):
  ``layer_003/params/attn.q.weight``, ``.../exp_avg/...``, ``.../exp_avg_sq/...``, and
  ``.../opt_step/...`` (AdamW's step counter, a float64 scalar). A TP-sharded tensor is saved as
  a DTensor over its replica's TP group (each TP rank writes its own chunk: no gather); a
  replicated one as a plain tensor (DCP keeps one copy).
- ``trainer.pt``: RNG states (torch, python) and the fp16 loss scale (global rank 0).
- ``manifest.json``, written LAST: format, step, consumed samples, model, LR schedule, the plan
  that wrote it (informational) and every file with its size and sha256 (``integrity``).

Saving (``AsyncSaver.save``, collective over the world): replica 0 of every stage contributes
its layers (another replica holds the same numbers), every other rank an empty state dict.
``dcp.async_save`` copies the state to CPU before it returns (the only pause of training) and
writes in a background thread, over a gloo group of its own (``checkpoint_group``) so its
collectives never interleave with training's. Global rank 0 waits for its future (DCP completes
it only after every rank's files are written and fsynced and ``.metadata`` is written), hashes
every file, writes the manifest (temp + fsync + rename) and renames ``step_N.tmp`` to
``step_N``. A crash anywhere before that rename leaves only a ``.tmp`` directory, which loading
ignores (and the next run removes). A complete checkpoint whose files no longer match the
manifest is skipped with a warning naming the file, and the next older one is used.

Loading (``load_into``, collective): every rank asks DCP for exactly its chunk of each tensor
(a DTensor over its own TP group, or the full tensor without TP); DCP reads the overlapping
parts of the saved chunks, whatever TP degree wrote them. Replicas of one stage may have
different TP degrees; each reads its own layout. The directory must be shared by all ranks.
"""

from __future__ import annotations

import io
import json
import os
import random
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from sailor_profiler import full_shape, get_split

from ...durable import durable_write, fsync_path
from . import fence, integrity
from .folders import (  # noqa: F401 (the folder readers, re-exported for the engine's users)
    FORMAT,
    complete_dirs,
    latest,
    read_manifest,
    remove_partial,
    remove_step,
    step_dir,
)

STATE_KINDS = ("exp_avg", "exp_avg_sq")
# Test knob: seconds global rank 0 waits between DCP's completion and the manifest (to kill -9
# a save in flight).
DELAY_ENV = "SAILOR_CKPT_WRITE_DELAY_S"


def key(layer_id: int, kind: str, name: str) -> str:
    """The state-dict key of one tensor: layer id, kind (params, exp_avg, exp_avg_sq,
    opt_step), parameter name within the layer."""
    return f"layer_{layer_id:03d}/{kind}/{name}"


def checkpoint_group(timeout_s: float | None = None):
    """A gloo group of the whole world for DCP's own collectives (the background save thread
    must not share a communicator with training), with the job's collective timeout.
    Collective: every rank calls it once."""
    timeout = timedelta(seconds=timeout_s) if timeout_s else None
    return dist.new_group(backend="gloo", timeout=timeout)


class TPLayout:
    """Where this rank's shards sit in the full tensors: the device mesh of its TP group
    (None without TP). The mesh only describes chunks to DCP (no collective runs on it), so
    it is a CPU mesh whatever the group's backend: checkpoint tensors are CPU copies."""

    def __init__(self, tp_group) -> None:
        self.mesh = None
        if tp_group is not None and dist.get_world_size(tp_group) > 1:
            self.mesh = DeviceMesh.from_group(tp_group, "cpu")
            # DTensor's first use imports TorchDynamo (1-3 s): pay it at start-up, not in the
            # pause of the first save.
            size = self.mesh.size()
            DTensor.from_local(
                torch.zeros(1), self.mesh, [Shard(0)], run_check=False, shape=(size,), stride=(1,)
            )

    def as_global(self, local: torch.Tensor, param: torch.Tensor):
        """``local`` (a CPU shard laid out like ``param``) as DCP should see it: a DTensor
        when it is one of several TP chunks, else the full tensor itself."""
        split = get_split(param)
        if self.mesh is None or split is None:
            return local
        shape = torch.Size(full_shape(param))
        placement = Shard(split[0]) if split[1] > 1 else Replicate()
        return DTensor.from_local(
            local,
            self.mesh,
            [placement],
            run_check=False,
            shape=shape,
            stride=torch.empty(shape, device="meta").stride(),
        )


def _serialize(obj) -> bytes:
    """torch.save into memory: writing the bytes with Python's file API turns a full disk
    into an OSError (ENOSPC), where torch's C++ writer raises a bare RuntimeError."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


class _Snapshot(AsyncStager):
    """The state dict is already a private CPU copy (``state_dict``): nothing to stage.
    (DCP's default stager deep-copies storages with an ``id()``-keyed memo, which fails on
    DTensors in torch 2.15: "Attempted to call copy_() on an invalid python storage".)"""

    _synchronize_after_execute = False

    def stage(self, state_dict):
        return state_dict

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        pass


@torch.no_grad()
def state_dict(
    stage_module, opt_state: dict, layout: TPLayout, gather=None, keep: bool = True
) -> dict:
    """This rank's share of the checkpoint, copied to CPU (the snapshot: training may change
    the live tensors as soon as this returns): every layer's parameters and AdamW states, keyed
    by layer id (``key``). ``opt_state``: parameter -> AdamW state of this rank's shard.
    ``gather``: the TP shard of a tensor sharded further (FSDP's all-gather; collective), run
    by every member; ``keep=False``: a member that writes nothing joins the gathers only."""
    gather = gather or (lambda t: t)
    out: dict = {}

    def put(k: str, t: torch.Tensor, p: torch.Tensor) -> None:
        whole = gather(t)
        if keep:
            out[k] = layout.as_global(_snapshot(whole), p)

    for lid in stage_module.layer_ids:
        for name, p in stage_module.layer_params(lid).items():
            put(key(lid, "params", name), p, p)
            st = opt_state.get(p, {})
            for kind in STATE_KINDS:
                if kind in st:
                    put(key(lid, kind, name), st[kind], p)
            if keep and "step" in st:  # once per checkpoint, not on the step path
                out[key(lid, "opt_step", name)] = torch.tensor(
                    float(st["step"]), dtype=torch.float64
                )
    return out


class AsyncSaver:
    """``dcp.async_save`` plus the manifest; one save in flight at a time."""

    def __init__(
        self, root: str | Path, rank: int, group, keep: int = 3, generation: int = 0
    ) -> None:
        self.root, self.rank, self.group, self.keep = Path(root), rank, group, keep
        self.generation = generation
        """Checked against the run fence before and at the end of every save (``fence``)."""
        self.last_step = 0
        """The step of the last save started."""
        self._future = None
        self._finalizer: threading.Thread | None = None
        self.error: BaseException | None = None

    def drain(self) -> BaseException | None:
        """Wait for the save in flight; return (and forget) the error of any save so far."""
        try:
            self.wait()
        except BaseException:  # noqa: BLE001 - returned, for the ranks to agree on (savefaults)
            pass
        error, self.error = self.error, None
        return error

    def wait(self) -> None:
        """Block until the save in flight is on disk (and, on rank 0, finalized)."""
        if self._finalizer is not None:
            self._finalizer.join()
            self._finalizer = None
        if self._future is not None:
            future, self._future = self._future, None
            try:
                future.result()
            except BaseException as exc:
                self.error = self.error or exc
        if isinstance(self.error, fence.SupersededError):
            raise self.error
        if self.error is not None:
            raise RuntimeError(f"checkpoint write failed: {self.error}") from self.error

    def save(self, step: int, shard: dict, manifest: dict | None, trainer: dict | None) -> None:
        """Start the save of global step ``step`` (collective over ``group``). ``shard``: this
        rank's ``state_dict`` (may be empty); ``manifest``/``trainer`` on global rank 0 only
        (the finalizer). Returns once the tensors are copied to CPU."""
        self.wait()
        self.last_step = step
        tmp = self.root / fence.tmp_name(step_dir(self.root, step).name, self.generation)
        try:  # a full disk here must not take this rank out of the collective save below
            tmp.mkdir(parents=True, exist_ok=True)
            if trainer is not None:
                durable_write(tmp / "trainer.pt", _serialize(trainer))
        except OSError as exc:
            self.error = self.error or exc
        self._future = dcp.async_save(
            shard,
            storage_writer=dcp.FileSystemWriter(tmp),
            process_group=self.group,
            async_stager=_Snapshot(),
        )
        if manifest is not None:
            self._finalizer = threading.Thread(
                target=self._finalize,
                args=(self._future, step, tmp, manifest),
                daemon=False,
                name="sailor-ckpt-finalizer",
            )
            self._finalizer.start()

    def _finalize(self, future, step: int, tmp: Path, manifest: dict) -> None:
        try:
            future.result()  # every rank's files and .metadata are on disk
            delay = float(os.environ.get(DELAY_ENV, "0") or 0)
            if delay:
                time.sleep(delay)
            files = {
                p.name: integrity.describe(p)
                for p in sorted(tmp.iterdir())
                if p.is_file() and p.name != "manifest.json"
            }
            manifest = dict(manifest, files=files)
            durable_write(tmp / "manifest.json", json.dumps(manifest, indent=1).encode())
            final = step_dir(self.root, step)
            fence.check(self.root, self.generation)  # a newer generation owns the folder now?
            if final.exists():  # an older save of the same step (a rerun): replace it
                remove_step(final)
            os.rename(tmp, final)
            fsync_path(self.root)
            self._prune()
        except BaseException as exc:  # reported by the next wait()
            self.error = exc

    def _prune(self) -> None:
        for old in complete_dirs(self.root)[: -self.keep] if self.keep > 0 else []:
            remove_step(old)


def saved_keys(path: Path) -> set[str]:
    return set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)


def load_into(path: Path, stage_module, optimizer, layout: TPLayout, group) -> None:
    """Reshard on load (collective over ``group``): DCP fills this rank's chunk of every
    tensor of its layers; AdamW states are restored where the checkpoint has them."""
    saved = saved_keys(path)
    target: dict = {}
    for lid in stage_module.layer_ids:
        for name, p in stage_module.layer_params(lid).items():
            for kind in ("params", *STATE_KINDS):
                if key(lid, kind, name) in saved:
                    empty = torch.empty_like(p, device="cpu")
                    target[key(lid, kind, name)] = layout.as_global(empty, p)
            if key(lid, "opt_step", name) in saved:
                target[key(lid, "opt_step", name)] = torch.zeros((), dtype=torch.float64)
    absent = [k for k in _param_keys(stage_module) if k not in saved]
    if absent:
        raise ValueError(f"checkpoint {path} has no {absent[0]}; it is of another model")
    dcp.load(target, storage_reader=dcp.FileSystemReader(path), process_group=group)
    for lid in stage_module.layer_ids:
        for name, p in stage_module.layer_params(lid).items():
            _restore(p, optimizer, {k: target.get(key(lid, k, name)) for k in _KINDS})


_KINDS = ("params", *STATE_KINDS, "opt_step")


def _param_keys(stage_module) -> list[str]:
    return [
        key(lid, "params", name)
        for lid in stage_module.layer_ids
        for name in stage_module.layer_params(lid)
    ]


def _local(t):
    return t.to_local() if isinstance(t, DTensor) else t


@torch.no_grad()
def _restore(p: torch.Tensor, optimizer, loaded: dict) -> None:
    p.copy_(_local(loaded["params"]))
    if loaded["exp_avg"] is None:
        return
    optimizer.state[p] = {
        "step": torch.tensor(
            float(loaded["opt_step"]), dtype=torch.float32, device=_step_device(optimizer, p)
        ),
        "exp_avg": _local(loaded["exp_avg"]).to(p),
        "exp_avg_sq": _local(loaded["exp_avg_sq"]).to(p),
    }


def _step_device(optimizer, p: torch.Tensor) -> torch.device:
    """torch's fused AdamW keeps its step counter on the parameter's device; ours on CPU."""
    fused = getattr(optimizer, "defaults", {}).get("fused")
    return p.device if fused else torch.device("cpu")


def read_full(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint, full size on CPU, by ``key`` (one process, no group:
    tests, tools)."""
    meta = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    out = {
        k: torch.empty(m.size, dtype=m.properties.dtype)
        for k, m in meta.items()
        if hasattr(m, "size")
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(out, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    return out


def read_layers(path: Path) -> dict[int, dict[str, dict[str, torch.Tensor]]]:
    """Every layer's full tensors: ``{layer id: {"params": {name: t}, "exp_avg": ...,
    "exp_avg_sq": ...}}``."""
    out: dict[int, dict[str, dict[str, torch.Tensor]]] = {}
    for k, t in read_full(path).items():
        layer, kind, name = k.split("/", 2)
        entry = out.setdefault(int(layer.removeprefix("layer_")), {})
        entry.setdefault(kind, {})[name] = t
    for entry in out.values():
        for kind in ("params", *STATE_KINDS):
            entry.setdefault(kind, {})
    return out


def rng_state(device: torch.device | None = None) -> dict:
    """CPU and Python generators, and the CUDA generator of a rank on a GPU ``device``. Asked by
    the device, not by ``torch.cuda.is_initialized()``: CUDA seeds are applied lazily, so a
    rank could otherwise save before its first kernel and lose the generator (seen on an H200);
    a CPU rank on a GPU machine never touches CUDA."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(path: Path, device: torch.device | None = None) -> dict:
    """Restore the RNG states saved with the checkpoint into this rank (its CUDA generator when
    ``device`` is a GPU and the checkpoint has one); returns the whole trainer state."""
    state = torch.load(path / "trainer.pt", weights_only=False)
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    saved = state.get("cuda")
    if saved is not None and len(saved) and device is not None and device.type == "cuda":
        # checkpoints before 2026-11-26 held a list, every visible GPU's generator
        torch.cuda.set_rng_state(saved[0] if isinstance(saved, list) else saved, device)
    return state
