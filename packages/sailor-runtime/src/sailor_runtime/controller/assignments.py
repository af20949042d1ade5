"""Build the per-node Assignment messages of one generation."""

from __future__ import annotations

import json

from sailor_sim import Plan

from ..engine.backend import resolve_backend
from ..engine.storeserver import namespace_key
from ..proto import agent_pb2
from .placement import Placement


def store_prefix(generation: int) -> str:
    """Rendezvous keys of a generation live in their own namespace of the controller's store,
    so a straggler of an older generation can never meet a newer one."""
    return f"gen-{generation}"


def store_key(generation: int, run_secret: str) -> str:
    """The key of a generation's namespace (hex), derived from the run secret: the store
    answers only clients that hold it, and it opens that generation's keys and no other."""
    return namespace_key(run_secret, store_prefix(generation)).hex()


def build_assignments(
    cfg,
    generation: int,
    plan: Plan,
    placement: Placement,
    store_port: int,
    run_secret: str = "",
    sessions: dict[str, str] | None = None,
) -> dict[str, agent_pb2.Assignment]:
    job_msg, plan_msg, run_msg = cfg.job.to_proto(), plan.to_proto(), cfg.run.to_proto()
    return {
        worker_id: agent_pb2.Assignment(
            generation=generation,
            job=job_msg,
            plan=plan_msg,
            world_size=plan.num_gpus,
            ranks=[agent_pb2.RankSlot(rank=r, local_device=d) for r, d in slots],
            master_addr=cfg.advertise_host or cfg.store_host,
            master_port=store_port,
            store_prefix=store_prefix(generation),
            store_key=store_key(generation, run_secret),
            checkpoint_dir=str(cfg.checkpoint_dir.resolve()),
            backend=resolve_backend(cfg.backend, plan),
            session=(sessions or {}).get(worker_id, ""),
            training=json.dumps(cfg.training) if cfg.training else "",
            run=run_msg,
            on_save_error=cfg.on_save_error,
        )
        for worker_id, slots in placement.items()
    }
