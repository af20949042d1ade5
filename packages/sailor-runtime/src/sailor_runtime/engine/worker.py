"""Rank entry point of the training engine (the control plane launches one per GPU):

    python -m sailor_runtime.engine.worker --job JOB.json --plan PLAN.json --rank R \\
        --world-size W --master-addr HOST --master-port PORT [--store-prefix GEN] \\
        [--store-is-external] --checkpoint-dir DIR --steps N [--checkpoint-every K] \\
        [--metrics FILE.jsonl] [--seed S] [--backend gloo|nccl] [--lr F] \\
        [--schedule 1f1b|gpipe] [--dtype fp32|fp64|bf16|fp16] [--options OPTIONS.json]

JOB.json is ``Job.to_dict()``, PLAN.json ``Plan.to_json()``. Ranks are ordered stage-major,
then replica, then TP rank (``topology``). Rank 0 hosts the TCPStore at HOST:PORT unless
``--store-is-external`` (then someone else, e.g. the controller, hosts it); all keys live under
the prefix GEN (default 'sailor'). The worker resumes from the latest valid checkpoint in DIR,
trains until global step N, saves every K steps and at step N, and appends one JSON line per
step to FILE from the metrics rank (TP rank 0 of replica 0 of the last stage): step, loss,
grad_norm, lr, iteration_time_s, samples_per_s, consumed_samples, peak_memory_bytes.
OPTIONS.json is ``ExecutionOptions.to_dict()`` (precision, recompute, flash attention, ZeRO).

``--backend nccl`` runs one CUDA device per rank (``LOCAL_RANK``, else rank modulo the device
count); gloo runs on CPU. Exit status: 0 done, 2 bad input (one line ``error: ...``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch

from sailor_sim.errors import SailorSimError
from sailor_sim.job import Job
from sailor_sim.plan import Plan

from .optim import LRSchedule
from .options import ExecutionOptions, OptionsError
from .train import EngineError, TrainConfig, train


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sailor_runtime.engine.worker",
        description="Run one rank of a Sailor training plan.",
    )
    p.add_argument("--job", required=True, help="JOB.json (Job.to_dict())")
    p.add_argument("--plan", required=True, help="PLAN.json (Plan.to_json())")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--store-prefix", default="sailor", help="rendezvous generation prefix")
    p.add_argument(
        "--store-is-external",
        action="store_true",
        help="the TCPStore is hosted by someone else (rank 0 does not host it)",
    )
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--steps", type=int, required=True, help="train until this global step")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--metrics", default=None, help="JSON-lines metrics file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    p.add_argument("--dtype", default=None, help="override the job dtype (fp32, fp64, ...)")
    p.add_argument(
        "--options",
        default=None,
        help="OPTIONS.json (ExecutionOptions.to_dict(): precision, recompute, ...)",
    )
    p.add_argument(
        "--memory-probe-step",
        type=int,
        default=0,
        help="measure tensor memory of the Nth step this process runs (0: never)",
    )
    p.add_argument("--timeout-s", type=float, default=300.0)
    return p.parse_args(argv)


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise EngineError(f"cannot read {path} ({exc.strerror})", field=what) from None


def _options(path: str | None) -> ExecutionOptions:
    if not path:
        return ExecutionOptions()
    try:
        return ExecutionOptions.from_dict(json.loads(_read(path, "options")))
    except json.JSONDecodeError as exc:
        raise EngineError(f"{path} is not valid JSON ({exc})", field="options") from None
    except (OptionsError, TypeError) as exc:
        raise EngineError(str(exc), field="options") from None


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        steps=a.steps,
        checkpoint_dir=a.checkpoint_dir,
        checkpoint_every=a.checkpoint_every,
        metrics_path=a.metrics,
        seed=a.seed,
        backend=a.backend,
        schedule=a.schedule,
        lr=LRSchedule(max_lr=a.lr, min_lr=a.lr / 10),
        dtype=a.dtype,
        master_addr=a.master_addr,
        master_port=a.master_port,
        store_prefix=a.store_prefix,
        store_is_external=a.store_is_external,
        timeout_s=a.timeout_s,
        options=_options(a.options),
        memory_probe_step=a.memory_probe_step,
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s [rank {a.rank}] %(name)s: %(message)s"
    )
    from ..agent.cputypes import apply_from_env

    if apply_from_env() is None:  # no CPU worker type given: share this machine's threads
        torch.set_num_threads(max(1, int(torch.get_num_threads() // max(1, a.world_size))))
    try:
        try:
            job = Job.from_dict(json.loads(_read(a.job, "job")))
        except json.JSONDecodeError as exc:
            raise EngineError(f"{a.job} is not valid JSON ({exc})", field="job") from None
        plan = Plan.from_json(_read(a.plan, "plan"))
        cfg = config_from_args(a)
        train(job, plan, a.rank, a.world_size, cfg)
    except (EngineError, SailorSimError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
