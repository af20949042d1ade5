"""Several training runs, one after the other, in one process per rank (see ``launch_many``).

    python -m sailor_runtime.engine.multirun RUNS.json

This process imports torch once, then forks one child per rank of the largest run and
supervises them: when a child fails the others are killed, and the exit status is 1. RUNS.json
is a list of ``TrainConfig.to_dict()``, each with its own store prefix on the launcher's store;
ranks >= a run's world size sit it out. Children fork before any torch op or thread pool exists. Bad
input (a config that does not validate) exits 2 with one line, before any child starts.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import traceback

import torch

from .config import EngineError, TrainConfig
from .rank.train import train


def run_rank(runs: list[TrainConfig], rank: int) -> int:
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [rank {rank}] %(message)s")
    for cfg in runs:
        if rank < cfg.world_size:
            train(cfg.job, cfg.plan, rank, cfg.world_size, cfg)
    return 0


def _child(runs: list[TrainConfig], rank: int) -> None:
    code = 1
    try:
        code = run_rank(runs, rank)
    except BaseException:  # the supervisor only sees the exit status: print the cause
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def supervise(runs: list[TrainConfig], world: int) -> int:
    children: dict[int, int] = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _child(runs, rank)
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


def read_runs(path: str) -> list[TrainConfig]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read {path} ({exc})", field="runs") from None
    if not isinstance(data, list) or not data:
        raise EngineError("must be a non-empty JSON list of TrainConfig objects", field="runs")
    return [TrainConfig.from_dict(run) for run in data]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 1:
            raise EngineError("expected one argument, the RUNS.json file", field="argv")
        runs = read_runs(argv[0])
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return supervise(runs, max(cfg.world_size for cfg in runs))


if __name__ == "__main__":
    sys.exit(main())
