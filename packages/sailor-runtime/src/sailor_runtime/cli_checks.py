"""The checks of the `sailor` commands' options, run before anything starts (issue 24, item 1).

Each command's options go through ``sailor_sim.inputs`` (the layer every Sailor CLI uses):
counts are whole numbers >= 1 (or >= 0 where 0 means "off"), durations finite and > 0,
addresses ``HOST:PORT``, ids one safe path component. A bad value raises ``ValidationError``
naming the flag; the CLI prints that one line and exits 2. The functions are pure, so the
property-based test (tests/test_fuzz_runtime_cli.py) drives them and the commands alike.
"""

from __future__ import annotations

from sailor_sim import ValidationError, inputs

from .engine.config import ON_SAVE_ERROR

MAX_SEED = 2**32 - 1
"""numpy's seed range, the narrowest of the generators a rank seeds (torch takes 64 bits)."""
MAX_COUNT = 1 << 31
"""Largest step, worker or core count accepted (grpc and torch fields are 32-bit)."""


def count(value, flag: str, *, minimum: int = 1) -> int:
    return inputs.integral(value, flag, minimum=minimum, maximum=MAX_COUNT)


def seconds(value, flag: str) -> float:
    return inputs.positive_number(value, flag)


def seed(value, flag: str = "--seed") -> int:
    return inputs.integral(value, flag, minimum=0, maximum=MAX_SEED)


def optional_step(value, flag: str) -> int | None:
    """A failure-injection step: 0 = never, else a step >= 1."""
    return count(value, flag, minimum=0) or None


def check_controller(
    *,
    planner: str,
    steps: int,
    checkpoint_every: int,
    global_batch_size: int,
    seq_len: int,
    host: str,
    port: int,
    min_workers: int,
    heartbeat_interval: float,
    heartbeat_timeout: float,
    debounce: float,
    max_failures: int,
    seed_value: int,
    lr: float,
    on_save_error: str,
    run_dir,
) -> None:
    """Every option of `sailor controller`."""
    inputs.address(planner, "--planner")
    count(steps, "--steps")
    count(checkpoint_every, "--checkpoint-every")
    count(global_batch_size, "--global-batch-size")
    count(seq_len, "--seq-len")
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
    seed(seed_value)
    inputs.positive_number(lr, "--lr", allow_zero=True)  # 0 = the engine's default
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
    count(threads_per_rank, "--threads-per-rank")
    count(first_core, "--first-core", minimum=0)
    seconds(controller_timeout, "--controller-timeout")


def check_run(
    *,
    workers: int,
    gpu_types: str,
    steps: int,
    global_batch_size: int,
    seq_len: int,
    checkpoint_every: int,
    kill_rank_at_step: int,
    kill_worker_at_step: int,
    add_worker_at_step: int,
    heartbeat_timeout: float,
    seed_value: int,
    timeout: float,
    time_scale: float,
    on_save_error: str,
) -> tuple[str, ...]:
    """Every option of `sailor run`; returns the worker types named by ``--gpu-types``."""
    count(workers, "--workers")
    count(steps, "--steps")
    count(global_batch_size, "--global-batch-size")
    count(seq_len, "--seq-len")
    count(checkpoint_every, "--checkpoint-every")
    optional_step(kill_rank_at_step, "--kill-rank-at-step")
    optional_step(kill_worker_at_step, "--kill-worker-at-step")
    optional_step(add_worker_at_step, "--add-worker-at-step")
    seconds(heartbeat_timeout, "--heartbeat-timeout")
    seed(seed_value)
    seconds(timeout, "--timeout")
    seconds(time_scale, "--time-scale")
    save_policy(on_save_error)
    return worker_types(gpu_types)


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
