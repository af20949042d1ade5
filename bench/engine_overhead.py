"""Engine overhead: our engine against plain PyTorch DDP, same model, batch and processes.

    uv run python bench/engine_overhead.py [--model tiny-llama] [--gbs 8] [--seq 128]
                                           [--ranks 2] [--steps 8] [--trials 2] [--bar 1.10]

``--ranks`` processes (gloo on CPU; NCCL, one GPU each, when that many GPUs are visible) each
run, alternately, ``--trials`` times: the engine on the plan PP 1 x DP ``ranks`` (TP 1, one
microbatch of ``gbs / ranks`` per replica: ``engine.rank.train``, as ``sailor run`` runs it), and
plain ``torch.nn.parallel.DistributedDataParallel`` over the same model (the zoo's full model,
the same initial weights), the same samples, the same AdamW (torch's fused kernel on CUDA;
on CPU ours against torch's default), with the same clipping by the global norm. Each step is
timed on rank 0 from the batch read to the loss on the host; the first 2 steps of each trial
are warm-up. Alternating the trials spreads the machine's load over both.

Prints the median step time of each side and their ratio; exit 1 when the ratio is over
``--bar`` (default 1.10) or a figure is missing, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

WARMUP = 2


def _rank_main(args: argparse.Namespace) -> None:
    """One rank: the trials, alternating engine and DDP; rank 0 writes its step times."""
    import torch
    import torch.distributed as dist

    from sailor_runtime.engine.config import TrainConfig
    from sailor_runtime.engine.rank.train import train

    rank, world = int(os.environ["RANK"]), args.ranks
    backend = "nccl" if torch.cuda.device_count() >= world else "gloo"
    job, plan = _job_and_plan(args, _gpu_type(backend))
    times: dict[str, list[float]] = {"engine": [], "ddp": []}
    for trial in range(args.trials):
        metrics = Path(args.out) / f"engine{trial}.jsonl"
        cfg = TrainConfig.for_job(
            job=job,
            plan=plan,
            steps=args.steps,
            metrics_path=str(metrics),
            backend=backend,
            master_port=args.port,
            store_prefix=f"engine{trial}",
            store_key=_store_key(f"engine{trial}"),
            store_is_external=True,
        )
        train(job, plan, rank, world, cfg)
        if rank == 0:
            rows = [json.loads(x) for x in metrics.read_text().splitlines()]
            times["engine"] += [r["iteration_time_s"] for r in rows[WARMUP:]]
        times["ddp"] += _ddp(job, rank, world, backend, args, f"ddp{trial}")[WARMUP:]
    if rank == 0:
        (Path(args.out) / "times.json").write_text(json.dumps(dict(times, backend=backend)))
    del dist


def _ddp(job, rank: int, world: int, backend: str, args, prefix: str) -> list[float]:
    """Plain DDP on the same model, samples and optimizer settings; step times (rank 0)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from sailor_profiler.zoo import build_stage
    from sailor_runtime.engine.config import LRSchedule, OptimConfig
    from sailor_runtime.engine.rank.data import TextDataset

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    from sailor_runtime.engine.rendezvous import RendezvousStore

    key = bytes.fromhex(_store_key(prefix))
    store = RendezvousStore("127.0.0.1", args.port, prefix, key, timedelta(seconds=300))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    try:
        last = job.model.num_layer_ids - 1
        model = build_stage(job.model, 0, last, device=device, seed=0)
        ddp = DistributedDataParallel(model, device_ids=[rank] if backend == "nccl" else None)
        optim, lr = OptimConfig(), LRSchedule()
        opt = torch.optim.AdamW(
            model.parameters(),
            lr=lr.lr(0),
            betas=optim.betas,
            eps=optim.eps,
            weight_decay=optim.weight_decay,
            fused=device.type == "cuda" or None,
        )
        data, per_rank = TextDataset(job.sequence_length, 0), job.global_batch_size // world
        out = []
        for step in range(args.steps):
            t0 = time.perf_counter()
            first = step * job.global_batch_size + rank * per_rank
            x, y = (t.to(device) for t in data.batch(first, per_rank))
            loss = ddp(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
            for group in opt.param_groups:
                group["lr"] = lr.lr(step)
            opt.step()
            opt.zero_grad(set_to_none=False)
            loss.item()
            out.append(time.perf_counter() - t0)
        return out
    finally:
        dist.destroy_process_group()


def _gpu_type(backend: str) -> str:
    """The plan's worker type: this machine's GPU (catalog name) on NCCL, else CPU."""
    if backend != "nccl":
        return "CPU"
    from sailor_profiler.devices import local_gpu_type

    return local_gpu_type(0)


def _job_and_plan(args, gpu_type: str):
    from sailor_sim.spec.job import Job
    from sailor_sim.spec.plan import Plan, Replica, Stage

    job = Job.create(args.model, args.gbs, args.seq)
    rep = Replica(gpu_type, "local", 1, args.gbs // args.ranks, 1)
    last = job.model.num_layer_ids - 1
    return job, Plan((Stage(0, last, (rep,) * args.ranks),)).check(job)


def _store_key(prefix: str) -> str:
    """The key of ``prefix`` in the launcher's store (its secret comes in the environment)."""
    from sailor_runtime.engine.storeserver import namespace_key

    return namespace_key(bytes.fromhex(os.environ[STORE_SECRET_ENV]), prefix).hex()


STORE_SECRET_ENV = "SAILOR_BENCH_STORE_SECRET"


def _launch(args: argparse.Namespace) -> dict:
    """Start ``--ranks`` copies of this script as ranks around one rendezvous store; their
    times."""
    from sailor_runtime.engine.launch import host_store

    secret = os.urandom(32)
    store = host_store(secret)
    procs = []
    for rank in range(args.ranks):
        env = {**os.environ, "RANK": str(rank), "OMP_NUM_THREADS": "1"}
        env[STORE_SECRET_ENV] = secret.hex()
        # the same arguments; --out as resolved here (the ranks write where the parent reads)
        cmd = [sys.executable, __file__, *args.argv, "--out", args.out]
        cmd += ["--rank-of", str(store.port)]
        log = open(Path(args.out) / f"rank{rank}.log", "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=1800) for p in procs]
    times = Path(args.out) / "times.json"
    if any(codes) or not times.exists():
        logs = "".join(
            (Path(args.out) / f"rank{r}.log").read_text()[-1500:] for r in range(len(procs))
        )
        raise SystemExit(f"error: ranks failed (exit codes {codes}):\n{logs}")
    return json.loads(times.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--gbs", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--bar", type=float, default=1.10)
    p.add_argument("--out", default=None)
    p.add_argument("--rank-of", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.ranks < 1 or args.gbs % args.ranks or args.steps <= WARMUP or args.trials < 1:
        p.error(f"need --gbs divisible by --ranks, --steps > {WARMUP}, --trials >= 1")
    if args.rank_of is not None:  # a rank started by _launch
        args.port = args.rank_of
        _rank_main(args)
        return 0
    args.out = args.out or tempfile.mkdtemp(prefix="sailor-overhead-")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    times = _launch(args)
    engine, ddp = times.get("engine") or [], times.get("ddp") or []
    if not engine or not ddp:
        print(f"MISS a side has no step times: engine {len(engine)}, ddp {len(ddp)}")
        return 1
    e, d = statistics.median(engine), statistics.median(ddp)
    ratio = e / d
    print(
        f"{args.model}, gbs {args.gbs}, seq {args.seq}, {args.ranks} ranks ({times['backend']}), "
        f"{args.trials} trials x {args.steps - WARMUP} timed steps each"
    )
    print(f"{'side':8} {'median step (ms)':>17} {'steps':>6}")
    print(f"{'engine':8} {e * 1e3:17.2f} {len(engine):6d}")
    print(f"{'DDP':8} {d * 1e3:17.2f} {len(ddp):6d}")
    print(f"ratio engine / DDP: {ratio:.3f} (bar {args.bar:.2f})")
    if ratio > args.bar:
        print(f"MISS engine / DDP step time ratio {ratio:.3f} is over the bar {args.bar:.2f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
