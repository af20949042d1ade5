"""Checkpoints through torch.distributed.checkpoint, on 4 gloo processes and real files: async
save (the manifest only after every rank's files are down; tensors changed after ``save``
returns do not leak in), per-rank files, content hashes, a corrupted newer checkpoint skipped by
name, and a load into another plan (other stage ranges, TP 2 -> 1, TP 1 -> 2, two replicas of
different TP degree) that gives every rank exactly its shard of the saved tensors.

Layout A (saves): stage 0 = layers 0..3 on TP 2 (ranks 0, 1); stage 1 = layers 4..7 on TP 1
(rank 2) and a second replica (rank 3, writes nothing).
Layout B (loads): layers 0..5 on TP 1 (rank 0); layers 6..7 on TP 2 (ranks 1, 2) and on TP 1
(rank 3).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from sailor_profiler.zoo import build_stage, get_split, shard
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.parallel.optim import AdamW
from sailor_testing import free_port

WORLD = 4
MODEL = "tiny-gpt"
# rank -> (first layer, last layer, tp rank, tp size, which TP group)
LAYOUT_A = {
    0: (0, 3, 0, 2, "a"),
    1: (0, 3, 1, 2, "a"),
    2: (4, 7, 0, 1, None),
    3: (4, 7, 0, 1, None),
}
LAYOUT_B = {
    0: (0, 5, 0, 1, None),
    1: (6, 7, 0, 2, "b"),
    2: (6, 7, 1, 2, "b"),
    3: (6, 7, 0, 1, None),
}
WRITERS_A = (0, 1, 2)  # replica 0 of each stage


def reference():
    """The full model after one AdamW step with non-uniform gradients (non-trivial states)."""
    model = build_stage(MODEL, 0, 7, seed=3)
    opt = AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = p.detach().sin() + 0.01
    opt.step()
    return model, opt


def build(layout, rank: int, groups: dict, ref_model, ref_opt):
    """This rank's stage of ``layout`` holding its shards of the reference, and an optimizer
    holding its shards of the reference's states."""
    first, last, tp_rank, tp_size, g = layout[rank]
    stage = build_stage(MODEL, first, last, tp_rank, tp_size, groups.get(g), seed=None)
    opt = AdamW(stage.parameters(), lr=1e-3)
    full = dict(ref_model.named_parameters())
    with torch.no_grad():
        for name, p in stage.named_parameters():
            split = get_split(p)
            p.copy_(shard(full[name], split, tp_rank))
            st = ref_opt.state[full[name]]
            opt.state[p] = {
                "step": st["step"].clone(),
                "exp_avg": shard(st["exp_avg"], split, tp_rank),
                "exp_avg_sq": shard(st["exp_avg_sq"], split, tp_rank),
            }
    return stage, opt, ckpt.TPLayout(groups.get(g))


def save(saver, rank, stage, opt, layout, step):
    shard_sd = ckpt.state_dict(stage, opt.state, layout) if rank in WRITERS_A else {}
    manifest = trainer = None
    if rank == 0:
        manifest = {
            "format": ckpt.FORMAT,
            "step": step,
            "consumed_samples": 8 * step,
            "model": MODEL,
        }
        trainer = ckpt.rng_state()
    saver.save(step, shard_sd, manifest, trainer)


def scenario(rank: int, port: int, root: Path) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
    groups = {"a": dist.new_group([0, 1]), "b": dist.new_group([1, 2])}
    group = ckpt.checkpoint_group()
    ref_model, ref_opt = reference()
    stage, opt, layout = build(LAYOUT_A, rank, groups, ref_model, ref_opt)
    saver = ckpt.AsyncSaver(root, rank, group)

    # Step 1, asynchronously: the finalizer holds the manifest back (delay knob) while
    # training changes the weights; neither may show in the checkpoint.
    os.environ[ckpt.DELAY_ENV] = "1.0"
    save(saver, rank, stage, opt, layout, 1)
    with torch.no_grad():
        for p in stage.parameters():
            p.add_(1000.0)
    if rank == 0:
        assert not ckpt.step_dir(root, 1).exists(), "finalized before the save completed"
    saver.wait()
    os.environ[ckpt.DELAY_ENV] = "0"
    dist.barrier()
    assert ckpt.latest(root)[0] == ckpt.step_dir(root, 1)

    # Step 2 saves the changed weights; rank 0 then corrupts rank 1's file of it.
    save(saver, rank, stage, opt, layout, 2)
    saver.wait()
    dist.barrier()
    victim = ckpt.step_dir(root, 2) / "__1_0.distcp"
    if rank == 0:
        data = bytearray(victim.read_bytes())
        mid = len(data) // 2
        data[mid : mid + 32] = bytes(b ^ 0xFF for b in data[mid : mid + 32])
        victim.write_bytes(bytes(data))
    dist.barrier()
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("sailor.checkpoint").addHandler(handler)
    path, manifest = ckpt.latest(root)
    assert manifest["step"] == 1, manifest["step"]
    assert any("__1_0.distcp" in w and "skipped" in w for w in warnings), warnings

    # Load step 1 into layout B: every rank gets exactly its shard of the reference.
    target, target_opt, target_layout = build(LAYOUT_B, rank, groups, ref_model, ref_opt)
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    target_opt.state.clear()
    ckpt.load_into(path, target, target_opt, target_layout, group)
    want, want_opt, _ = build(LAYOUT_B, rank, groups, ref_model, ref_opt)
    got = dict(target.named_parameters())
    for name, p in want.named_parameters():
        assert torch.equal(got[name], p), name
        st, want_st = target_opt.state[got[name]], want_opt.state[p]
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(st[k], want_st[k]), (name, k)
    dist.barrier()
    dist.destroy_process_group()


def _child(rank: int, port: int, root: Path) -> None:
    code = 1
    try:
        scenario(rank, port, root)
        code = 0
    except BaseException:
        traceback.print_exc()
    os._exit(code)


def test_dcp_async_save_corruption_and_reshard(tmp_path):
    port = free_port()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_child, args=(r, port, tmp_path)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert codes == [0] * WORLD, codes

    # On disk: one DCP file per rank, DCP's metadata, the trainer state, all hashed.
    step1 = ckpt.step_dir(tmp_path, 1)
    manifest = json.loads((step1 / "manifest.json").read_text())
    assert {".metadata", "trainer.pt"} | {f"__{r}_0.distcp" for r in range(WORLD)} == set(
        manifest["files"]
    )
    assert all(len(e["sha256"]) == 64 for e in manifest["files"].values())
    # Read back offline (no process group): the full tensors are the reference's.
    ref_model, ref_opt = reference()
    layers = ckpt.read_layers(step1)
    assert sorted(layers) == list(range(8))
    for lid in range(8):
        for name, p in ref_model.layer_params(lid).items():
            assert torch.equal(layers[lid]["params"][name], p), (lid, name)
            assert torch.equal(layers[lid]["exp_avg"][name], ref_opt.state[p]["exp_avg"])
