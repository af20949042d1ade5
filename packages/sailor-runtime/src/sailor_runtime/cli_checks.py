"""The checks of the `sailor` commands' options, run before anything starts (issue 24, item 1).

Each command's options go through ``sailor_sim.inputs`` (the layer every Sailor CLI uses):
counts are whole numbers >= 1 (or >= 0 where 0 means "off"), durations finite and > 0,
addresses ``HOST:PORT``, ids one safe path component. A bad value raises ``ValidationError``
naming the flag; the CLI prints that one line and exits 2. The functions are pure, so the
property-based test (tests/test_fuzz_runtime_cli.py) drives them and the commands alike.
"""

from __future__ import annotations

from sailor_sim import RunSpec, ValidationError, inputs

from .agent.cputypes import usable_cpus
from .engine.config import ON_SAVE_ERROR

MAX_SEED = 2**32 - 1
"""numpy's seed range, the narrowest of the generators a rank seeds (torch takes 64 bits)."""
MAX_COUNT = 1 << 31
"""Largest step, worker or core count accepted (grpc and torch fields are 32-bit)."""
LOCAL_WORKERS_PER_CORE = 4
"""Most `sailor run --local` workers per core this process may use (``usable_cpus``). Each
worker is an agent, its rank-forking zygote and a rank, every one a process with torch loaded
(hundreds of MB each), and ranks beyond the cores only time-share them; 4 per core keeps a
2-core machine at the profiler's 8 (``sailor_profiler.cpu_tp_limit``), which bounds the
profiled run. Without it, ``--no-profile --workers 100000`` set out to start 300000 processes."""


def count(value, flag: str, *, minimum: int = 1) -> int:
    return inputs.integral(value, flag, minimum=minimum, maximum=MAX_COUNT)


def seconds(value, flag: str) -> float:
    return inputs.positive_number(value, flag)


def seed(value, flag: str = "--seed") -> int:
    return inputs.integral(value, flag, minimum=0, maximum=MAX_SEED)


def optional_step(value, flag: str) -> int | None:
    """A failure-injection step: 0 = never, else a step >= 1."""
    return count(value, flag, minimum=0) or None


def check_spec(spec: RunSpec) -> None:
    """The run's own settings (a ``RunSpec``, its ``seq_len`` filled in), named by their flags."""
    count(spec.steps, "--steps")
    count(spec.checkpoint_every, "--checkpoint-every")
    count(spec.global_batch_size, "--global-batch-size")
    count(spec.seq_len, "--seq-len")
    seed(spec.seed)


def check_controller(
    spec: RunSpec,
    *,
    planner: str,
    host: str,
    port: int,
    min_workers: int,
    heartbeat: tuple[float, float],
    debounce: float,
    max_failures: int,
    on_save_error: str,
    run_dir,
) -> None:
    """Every option of `sailor controller`: the run's (``spec``, ``check_spec``) and the
    controller's own; ``heartbeat`` is (interval, timeout) in seconds."""
    heartbeat_interval, heartbeat_timeout = heartbeat
    inputs.address(planner, "--planner")
    check_spec(spec)
    inputs.host(host, "--host")
    inputs.port(port, "--port")
    count(min_workers, "--min-workers")
    seconds(heartbeat_interval, "--heartbeat-interval")
    seconds(heartbeat_timeout, "--heartbeat-timeout")
    if heartbeat_timeout <= heartbeat_interval:
        raise ValidationError(
            f"must be longer than --heartbeat-interval ({heartbeat_interval:g} s), got "
            f"{heartbeat_timeout:g}: every node would be declared failed between two beats",
            field="--heartbeat-timeout",
        )
    inputs.positive_number(debounce, "--debounce", allow_zero=True)
    count(max_failures, "--max-failures", minimum=0)
    inputs.positive_number(spec.recipe.lr, "--lr", allow_zero=True)  # 0 = the engine's default
    save_policy(on_save_error)
    inputs.output_folder(run_dir, "--run-dir")  # a read-only folder is refused now


def check_worker(
    *,
    controller: str,
    gpus: int | None,
    zone: str,
    host: str,
    worker_id: str | None,
    threads_per_rank: int,
    first_core: int,
    controller_timeout: float,
) -> None:
    """Every option of `sailor worker`."""
    inputs.address(controller, "--controller")
    if gpus is not None:
        count(gpus, "--gpus")
    inputs.safe_id(zone, "--zone")
    inputs.host(host, "--host")
    if worker_id is not None:
        inputs.safe_id(worker_id, "--worker-id")
    cores = len(usable_cpus())
    if count(threads_per_rank, "--threads-per-rank") > cores:  # each rank's OpenMP pool
        raise ValidationError(
            f"must be at most the {cores} cores this worker may use, got {threads_per_rank}",
            field="--threads-per-rank",
        )
    count(first_core, "--first-core", minimum=0)
    seconds(controller_timeout, "--controller-timeout")


def check_run(
    spec: RunSpec,
    *,
    workers: int,
    gpu_types: str,
    failures: tuple[int, int, int],
    heartbeat_timeout: float,
    timeout: float,
    time_scale: float,
    on_save_error: str,
) -> tuple[str, ...]:
    """Every option of `sailor run`: the run's (``spec``, ``check_spec``) and the local run's;
    ``failures`` is (kill-rank, kill-worker, add-worker) at step. Returns the worker types
    named by ``--gpu-types``."""
    local_workers(workers)
    check_spec(spec)
    for value, flag in zip(failures, FAILURE_FLAGS, strict=True):
        optional_step(value, flag)
    seconds(heartbeat_timeout, "--heartbeat-timeout")
    seconds(timeout, "--timeout")
    seconds(time_scale, "--time-scale")
    save_policy(on_save_error)
    return worker_types(gpu_types)


def local_workers(workers) -> int:
    """``--workers`` of a local run: 1 to ``LOCAL_WORKERS_PER_CORE`` per usable core."""
    cores = len(usable_cpus())
    limit = LOCAL_WORKERS_PER_CORE * cores
    if count(workers, "--workers") > limit:
        raise ValidationError(
            f"must be at most {limit} on this machine ({LOCAL_WORKERS_PER_CORE} per core of the "
            f"{cores} this process may use: each worker is an agent, a zygote and a rank "
            f"process), got {workers}",
            field="--workers",
        )
    return workers


FAILURE_FLAGS = ("--kill-rank-at-step", "--kill-worker-at-step", "--add-worker-at-step")


def save_policy(value: str) -> str:
    if value not in ON_SAVE_ERROR:
        raise ValidationError(
            f"must be one of {', '.join(ON_SAVE_ERROR)}, got {value[:40]!r}",
            field="--on-save-error",
        )
    return value


def worker_types(text: str) -> tuple[str, ...]:
    """The comma-separated ``--gpu-types``: at least one, none empty."""
    names = tuple(t.strip() for t in text.split(","))
    if not names or any(not n for n in names):
        raise ValidationError(
            f"{text[:80]!r} has an empty entry; give e.g. cpu-2t,cpu-1t", field="--gpu-types"
        )
    for name in names:
        inputs.safe_id(name, "--gpu-types")
    return names
