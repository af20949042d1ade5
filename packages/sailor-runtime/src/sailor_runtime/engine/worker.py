"""Rank entry point of the training engine (the launcher starts one per GPU):

    RANK=R python -m sailor_runtime.engine.worker CONFIG.json

CONFIG.json is ``TrainConfig.to_json()`` (``config``): the job, the plan, the rendezvous and
every training knob, written once by whoever starts the ranks and read by each of them. ``RANK``
is this process's rank (ranks are ordered stage-major, then replica, then TP rank:
``topology``). Rank 0 hosts the rendezvous store (``storeserver``) at master_addr:master_port
unless the config says ``store_is_external`` (the launcher hosts it); every rank proves it holds
``store_key`` and sees only the namespace ``store_prefix``. The config file is readable by its
owner only. The rank
resumes from the latest valid checkpoint, trains until ``steps``, saves every
``checkpoint_every`` steps and at the end, and the metrics rank appends one JSON line per step
to ``metrics_path``.

``backend: nccl`` runs one CUDA device per rank (``LOCAL_RANK``, else rank modulo the device
count); gloo runs on CPU. Exit status: 0 done, 2 bad input (one line ``error: FIELD: ...`` on
stderr, before any process group exists), 3 a checkpoint that could not be written with
``on_save_error`` stop (one line; ``savefaults``).
"""

from __future__ import annotations

import logging
import sys

from sailor_sim import SailorSimError, specs

from .config import EngineError, TrainConfig, rank_from_env

USAGE = "usage: RANK=R python -m sailor_runtime.engine.worker CONFIG.json"


def _config(argv: list[str]) -> tuple[TrainConfig, int]:
    if len(argv) != 1 or argv[0].startswith("-"):
        raise EngineError(f"expected one argument, the TrainConfig file ({USAGE})", field="argv")
    cfg = TrainConfig.read(argv[0])
    return cfg, rank_from_env(cfg.world_size)


def _share_threads(world_size: int) -> None:
    import torch

    from ..agent.cputypes import apply_from_env

    if apply_from_env() is None:  # no CPU worker type given: share this machine's threads
        torch.set_num_threads(max(1, int(torch.get_num_threads() // max(1, world_size))))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg, rank = _config(argv)
        logging.basicConfig(
            level=logging.INFO, format=f"%(asctime)s [rank {rank}] %(name)s: %(message)s"
        )
        # the run's settings as this rank received them
        logging.getLogger("sailor.engine").info("run spec: %s", specs.to_dict(cfg.run))
        _share_threads(cfg.world_size)
        from .rank.train import train  # torch and the model zoo: only once the config is valid

        train(cfg.job, cfg.plan, rank, cfg.world_size, cfg)
    except (EngineError, SailorSimError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        from .checkpoints.savefaults import FATAL_EXIT, CheckpointWriteError

        return FATAL_EXIT if isinstance(exc, CheckpointWriteError) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
