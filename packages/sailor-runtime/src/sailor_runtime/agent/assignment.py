"""Validate an Assignment message from the controller before any process starts.

A malformed assignment is refused with an AssignmentError naming the field; the ranks already
running keep running.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sailor_sim import Job, Plan, RunSpec, SailorSimError

from ..engine.config import ON_SAVE_ERROR
from ..errors import AssignmentError, StaleGenerationError
from ..topology import Topology

BACKENDS = ("gloo", "nccl")
MAX_GENERATION = 2**63 - 1
"""Generations are signed 64-bit on every side (a uint64 on the wire)."""
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._/-]{1,128}$")
_KEY_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ValidAssignment:
    """A checked assignment: what the rank launcher needs."""

    generation: int
    job: Job
    plan: Plan
    world_size: int
    ranks: tuple[tuple[int, int], ...]
    """(rank, local device) pairs."""
    master_addr: str
    master_port: int
    store_prefix: str
    store_key: str = field(repr=False)
    """The key of this generation's namespace in the controller's store (hex)."""
    checkpoint_dir: str
    backend: str
    run: RunSpec
    """The run's settings (steps, checkpointing, seed, recipe, options; validated here, the
    options against what the engine runs)."""
    training: dict = field(default_factory=dict)
    """The data (``DATA_KEYS`` of ``engine.config.TRAINING_KEYS``); {} = the generated
    corpus."""
    on_save_error: str = "stop"
    """'stop' or 'continue' when a checkpoint cannot be written (engine.checkpoints.savefaults)."""


def _parse_job_plan(msg) -> tuple[Job, Plan]:
    if not msg.HasField("job"):
        raise AssignmentError("is missing", field="assignment.job")
    if not msg.HasField("plan"):
        raise AssignmentError("is missing", field="assignment.plan")
    try:
        job = Job.from_proto(msg.job)
    except SailorSimError as exc:
        raise AssignmentError(str(exc), field="assignment.job") from None
    try:
        plan = Plan.from_proto(msg.plan).check(job)
    except SailorSimError as exc:
        raise AssignmentError(str(exc), field="assignment.plan") from None
    return job, plan


def _check_ranks(msg, plan: Plan, gpu_type: str, zone: str, num_devices: int):
    topo = Topology(plan)
    if msg.world_size != topo.world_size:
        raise AssignmentError(
            f"{msg.world_size} differs from the plan's {topo.world_size} GPUs",
            field="assignment.world_size",
        )
    if not msg.ranks:
        raise AssignmentError("lists no rank for this node", field="assignment.ranks")
    seen_ranks, seen_devs, pairs = set(), set(), []
    for n, slot in enumerate(msg.ranks):
        where = f"assignment.ranks[{n}]"
        if slot.rank >= topo.world_size or slot.rank in seen_ranks:
            raise AssignmentError(
                f"rank {slot.rank} is out of 0..{topo.world_size - 1} or listed twice",
                field=where,
            )
        if slot.local_device >= num_devices or slot.local_device in seen_devs:
            raise AssignmentError(
                f"device {slot.local_device} is out of 0..{num_devices - 1} or used twice",
                field=f"{where}.local_device",
            )
        spec = topo.replica(topo.slot(slot.rank))
        if (spec.gpu_type, spec.zone) != (gpu_type, zone):
            raise AssignmentError(
                f"rank {slot.rank} needs a {spec.gpu_type}@{spec.zone} GPU but this node has "
                f"{gpu_type}@{zone}",
                field=where,
            )
        seen_ranks.add(slot.rank)
        seen_devs.add(slot.local_device)
        pairs.append((slot.rank, slot.local_device))
    return tuple(pairs)


WILDCARDS = ("0.0.0.0", "::", "[::]")
"""Listen-on-every-interface addresses: where a server listens, never where to dial it."""


def validate_assignment(
    msg,
    *,
    gpu_type: str,
    zone: str,
    num_devices: int,
    current_generation: int,
    controller_host: str = "127.0.0.1",
) -> ValidAssignment:
    """Check ``msg`` (an agent_pb2.Assignment) against this node; raise AssignmentError.
    A wildcard store address (a controller on 0.0.0.0 without --advertise-host) becomes
    ``controller_host``: the store is reached where this node reached the controller."""
    if not 1 <= msg.generation <= MAX_GENERATION:
        raise AssignmentError(
            f"must be in 1..2^63-1, got {msg.generation}", field="assignment.generation"
        )
    if msg.generation < current_generation:
        raise StaleGenerationError(
            f"{msg.generation} is older than the running generation {current_generation}",
            field="assignment.generation",
        )
    job, plan = _parse_job_plan(msg)
    ranks = _check_ranks(msg, plan, gpu_type, zone, num_devices)
    if not msg.master_addr or not 0 < msg.master_port < 65536:
        raise AssignmentError(
            f"{msg.master_addr!r}:{msg.master_port} is not a host and a port in 1..65535",
            field="assignment.master_addr",
        )
    if not _PREFIX_RE.match(msg.store_prefix):
        raise AssignmentError(
            "must be 1-128 characters of letters, digits, '.', '_', '/', '-'",
            field="assignment.store_prefix",
        )
    if not _KEY_RE.fullmatch(msg.store_key):
        raise AssignmentError(
            "must be 64 hex digits (the store key of this generation)",
            field="assignment.store_key",
        )
    if not msg.checkpoint_dir:
        raise AssignmentError("is empty", field="assignment.checkpoint_dir")
    run = _parse_run(msg)
    backend = msg.backend or "gloo"
    if backend not in BACKENDS:
        raise AssignmentError(f"{backend!r} is not one of {BACKENDS}", field="assignment.backend")
    training = _parse_training(msg.training)
    on_save_error = msg.on_save_error or "stop"
    if on_save_error not in ON_SAVE_ERROR:
        raise AssignmentError(
            f"{on_save_error[:40]!r} is not one of {ON_SAVE_ERROR}",
            field="assignment.on_save_error",
        )
    return ValidAssignment(
        msg.generation,
        job,
        plan,
        msg.world_size,
        ranks,
        controller_host if msg.master_addr in WILDCARDS else msg.master_addr,
        msg.master_port,
        msg.store_prefix,
        msg.store_key,
        msg.checkpoint_dir,
        backend,
        run,
        training,
        on_save_error,
    )


def _parse_run(msg) -> RunSpec:
    if not msg.HasField("run"):
        raise AssignmentError("is missing", field="assignment.run")
    from ..engine.options import precision_problem, unsupported_option

    try:
        run = RunSpec.from_proto(msg.run)
    except SailorSimError as exc:
        raise AssignmentError(str(exc), field="assignment.run") from None
    if run.checkpoint_every < 1:
        raise AssignmentError(
            f"checkpoint_every {run.checkpoint_every} must be >= 1",
            field="assignment.run.checkpoint_every",
        )
    reason = precision_problem(run.precision)
    if reason is not None:
        raise AssignmentError(reason.split(": ", 1)[1], field="assignment.run.precision")
    reason = unsupported_option(run.options)
    if reason is not None:
        raise AssignmentError(reason, field="assignment.run.options")
    return run


DATA_KEYS = ("data_dir", "eval_every", "eval_batches", "sample_log_path")
"""The ``training`` keys the wire carries; the recipe and seed travel in ``run``."""


def _parse_training(text: str) -> dict:
    if not text:
        return {}
    from ..engine.config import EngineError, training_overrides

    try:
        data = json.loads(text)
        training_overrides(data)  # the check; the rank parses it again from its config file
        extra = sorted(set(data) - set(DATA_KEYS)) if isinstance(data, dict) else []
        if extra:
            raise ValueError(f"{extra}: the recipe and seed travel in `run`; known: {DATA_KEYS}")
    except (ValueError, EngineError) as exc:  # JSONDecodeError is a ValueError
        raise AssignmentError(str(exc), field="assignment.training") from None
    return data
