"""The torch.distributed backend of a plan: gloo for CPU worker types, NCCL for GPU types.

A plan's ranks all join one world (the global-norm all-reduce) and its DP and TP groups, so one
backend serves the whole plan: NCCL cannot reach a CPU rank and gloo would leave the GPUs idle
(and copy every tensor through the host). A plan that mixes CPU and GPU worker types is
therefore refused with one line, at planning time by the controller and again by every rank.
"""

from __future__ import annotations

from sailor_sim import Plan, get_gpu

from .config import EngineError

AUTO = "auto"


class BackendError(EngineError):
    """A plan whose ranks cannot share one torch.distributed backend."""


def is_cpu_type(gpu_type: str) -> bool:
    return get_gpu(gpu_type).platform == "cpu"


def plan_backend(plan: Plan) -> str:
    """``gloo`` when every rank is a CPU worker type, ``nccl`` when every rank is a GPU."""
    types = {r.gpu_type for stage in plan.stages for r in stage.replicas}
    cpu = sorted(t for t in types if is_cpu_type(t))
    gpu = sorted(types - set(cpu))
    if cpu and gpu:
        raise BackendError(
            f"mixes CPU workers ({', '.join(cpu)}) and GPUs ({', '.join(gpu)}) in one "
            "job, which no backend runs (NCCL cannot reach CPU ranks); plan them as separate "
            "jobs or register the workers with one kind",
            field="plan",
        )
    return "gloo" if cpu else "nccl"


def resolve_backend(asked: str, plan: Plan) -> str:
    """``auto`` -> the plan's backend; an explicit one must agree with the plan's workers."""
    backend = plan_backend(plan)
    if asked not in (AUTO, backend):
        raise BackendError(
            f"{asked!r} does not run this plan's {'CPU' if backend == 'gloo' else 'GPU'} "
            f"ranks; use {backend!r} or 'auto'",
            field="backend",
        )
    return backend


def check_backend(backend: str, plan: Plan, cuda_devices: int) -> None:
    """What every rank checks before joining: one kind of worker in the plan, NCCL only for
    GPU types and only where CUDA devices exist. gloo on GPU types stays allowed: launchers
    that emulate a plan's GPUs on CPU processes (tests, benches) ask for it explicitly."""
    kind = plan_backend(plan)
    if backend == "nccl" and kind == "gloo":
        raise BackendError("nccl cannot run CPU worker types; use gloo", field="backend")
    if backend == "nccl" and cuda_devices == 0:
        types = sorted({r.gpu_type for s in plan.stages for r in s.replicas})
        raise BackendError(
            f"nccl needs a CUDA device for the plan's {', '.join(types)} ranks and this node "
            "has none; register CPU workers (sailor worker --gpu-type cpu-1t) to train on CPU",
            field="backend",
        )
