"""Checkpoint save pause vs write time (torch.distributed.checkpoint), and a resharding load.

    uv run python bench/checkpoint_dcp.py [--model OPT-350M] [--layers 1-2]

Two gloo processes hold one stage of ``--model`` on TP 2 with AdamW states (3 tensors per
parameter, fp32). Measured on each rank (the table shows the slowest rank):
- pause: ``checkpoint.state_dict`` (the CPU snapshot) plus ``AsyncSaver.save`` until it
  returns: what training waits for (the second save; the first warms DCP up);
- async total: until the save is on disk and, on rank 0, hashed into the manifest;
- blocking ``dcp.save`` of the same state (the baseline without async);
- load into TP 1 (every rank reads the full tensors: a reshard 2 -> 1), checked element for
  element against the saved shards.

Bar: the pause is at most ``PAUSE_BAR`` of the async total (async hides the writing), and the
resharded load equals what was saved. Exits 1 otherwise, or when a rank fails.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from sailor_profiler.zoo import build_stage, get_split
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.parallel.optim import AdamW

PAUSE_BAR = 0.5
"""Largest share of the async save's total time that training may be paused for."""
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, port: int, root: Path, model: str, first: int, last: int) -> dict:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
    tp = dist.new_group([0, 1])
    group = ckpt.checkpoint_group()
    stage = build_stage(model, first, last, rank, WORLD, tp, seed=0)
    state = {
        p: {"step": torch.tensor(1.0), "exp_avg": p.detach() * 0.5, "exp_avg_sq": p.detach() ** 2}
        for p in stage.parameters()
    }
    layout = ckpt.TPLayout(tp)
    out = {"bytes": sum(3 * p.numel() * p.element_size() for p in stage.parameters())}
    saver = ckpt.AsyncSaver(root / "async", rank, group)
    manifest = {"format": ckpt.FORMAT, "step": 1, "consumed_samples": 0, "model": model}
    for step in (1, 2):  # step 1 warms DCP up (lazy imports, first thread); step 2 counts
        dist.barrier()
        t0 = time.perf_counter()
        shard = ckpt.state_dict(stage, state, layout)
        out["snapshot_s"] = time.perf_counter() - t0
        saver.save(step, shard, dict(manifest, step=step) if rank == 0 else None, None)
        out["pause_s"] = time.perf_counter() - t0
        saver.wait()
    out["async_total_s"] = time.perf_counter() - t0
    dist.barrier()
    t0 = time.perf_counter()
    dcp.save(
        ckpt.state_dict(stage, state, layout), checkpoint_id=root / "sync", process_group=group
    )
    out["blocking_s"] = time.perf_counter() - t0
    dist.barrier()
    full = build_stage(model, first, last, seed=None)
    t0 = time.perf_counter()
    ckpt.load_into(
        ckpt.step_dir(root / "async", 2),
        full,
        AdamW(full.parameters(), lr=1e-3),
        ckpt.TPLayout(None),
        group,
    )
    out["load_s"] = time.perf_counter() - t0
    mine = dict(stage.named_parameters())
    out["load_exact"] = all(
        torch.equal(p.chunk(WORLD, get_split(p)[0])[rank] if get_split(p) else p, mine[name])
        for name, p in full.named_parameters()
    )
    dist.destroy_process_group()
    return out


def _child(rank, port, root, model, first, last) -> None:
    code = 1
    try:
        result = rank_main(rank, port, root, model, first, last)
        (root / f"rank{rank}.json").write_text(json.dumps(result))
        code = 0
    except BaseException:
        traceback.print_exc()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="OPT-350M")
    p.add_argument("--layers", default="1-2", help="first-last layer id of the stage")
    a = p.parse_args(argv)
    first, last = (int(x) for x in a.layers.split("-"))
    with tempfile.TemporaryDirectory() as tmp:
        root, port = Path(tmp), free_port()
        ctx = mp.get_context("fork")
        procs = [
            ctx.Process(target=_child, args=(r, port, root, a.model, first, last))
            for r in range(WORLD)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=500)
        if any(proc.exitcode != 0 for proc in procs):
            print("checkpoint bench: a rank failed", file=sys.stderr)
            return 1
        ranks = [json.loads((root / f"rank{r}.json").read_text()) for r in range(WORLD)]
    keys = ("snapshot_s", "pause_s", "async_total_s", "blocking_s", "load_s")
    worst = {k: max(r[k] for r in ranks) for k in keys}
    mb = sum(r["bytes"] for r in ranks) / 1e6
    print(
        f"{a.model} layers {first}-{last}, TP {WORLD}, gloo, {mb:.0f} MB of parameters + "
        "AdamW states (slowest rank)\n"
    )
    print("| measure | seconds |\n| --- | --- |")
    for name, key in [
        ("CPU snapshot (state_dict)", "snapshot_s"),
        ("pause (save returns)", "pause_s"),
        ("async save on disk + manifest", "async_total_s"),
        ("blocking dcp.save", "blocking_s"),
        ("load into TP 1 (reshard)", "load_s"),
    ]:
        print(f"| {name} | {worst[key]:.3f} |")
    share = worst["pause_s"] / worst["async_total_s"]
    exact = all(r["load_exact"] for r in ranks)
    print(f"\npause / async total = {share:.2f} (bar <= {PAUSE_BAR}); reshard exact: {exact}")
    return 0 if share <= PAUSE_BAR and exact else 1


if __name__ == "__main__":
    sys.exit(main())
