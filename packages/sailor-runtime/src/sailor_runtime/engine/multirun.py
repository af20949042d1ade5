"""Several training runs, one after the other, in one process per rank (see ``launch_many``).

    python -m sailor_runtime.engine.multirun --runs RUNS.json --world W --master-port PORT

This process imports torch once, then forks one child per rank (0..W-1) and supervises them:
when a child fails the others are killed, and the exit status is 1. RUNS.json is a list of
runs: ``{"job": Job.to_dict(), "plan": Plan.to_dict(), "steps": N, "checkpoint_dir": DIR,
"checkpoint_every": K, "metrics": FILE, "seed": S, "dtype": D, "schedule": "1f1b",
"backend": "gloo", "options": ExecutionOptions.to_dict()}``. Run i
rendezvous under store prefix ``run{i}`` of the external store at 127.0.0.1:PORT; ranks >= the
run's world size sit it out. Children fork before any torch op or thread pool exists.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import traceback

import torch

from sailor_sim.job import Job
from sailor_sim.plan import Plan

from .options import ExecutionOptions
from .topology import Topology
from .train import TrainConfig, train


def run_rank(runs: list[dict], rank: int, port: int) -> int:
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [rank {rank}] %(message)s")
    for i, run in enumerate(runs):
        job, plan = Job.from_dict(run["job"]), Plan.from_dict(run["plan"])
        world = Topology(plan).world_size
        if rank >= world:
            continue
        cfg = TrainConfig(
            steps=run["steps"],
            checkpoint_dir=run.get("checkpoint_dir"),
            checkpoint_every=run.get("checkpoint_every", 0),
            metrics_path=run.get("metrics"),
            seed=run.get("seed", 0),
            dtype=run.get("dtype"),
            schedule=run.get("schedule", "1f1b"),
            backend=run.get("backend", "gloo"),
            options=ExecutionOptions.from_dict(run.get("options")),
            master_port=port,
            memory_probe_step=run.get("memory_probe_step", 0),
            optimizer_impl=run.get("optimizer_impl", "auto"),
            store_prefix=f"run{i}",
            store_is_external=True,
        )
        train(job, plan, rank, world, cfg)
    return 0


def _child(runs: list[dict], rank: int, port: int) -> None:
    code = 1
    try:
        code = run_rank(runs, rank, port)
    except BaseException:  # the supervisor only sees the exit status: print the cause
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def supervise(runs: list[dict], world: int, port: int) -> int:
    children: dict[int, int] = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _child(runs, rank, port)
        children[pid] = rank
    status = 0
    while children:
        pid, raw = os.wait()
        children.pop(pid)
        if os.waitstatus_to_exitcode(raw) != 0 and status == 0:
            status = 1
            for other in children:  # the rest would wait for the dead rank until timeout
                os.kill(other, signal.SIGKILL)
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master-port", type=int, required=True)
    a = p.parse_args(argv)
    with open(a.runs) as f:
        runs = json.load(f)
    return supervise(runs, a.world, a.master_port)


if __name__ == "__main__":
    sys.exit(main())
