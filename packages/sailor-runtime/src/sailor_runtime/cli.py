"""The `sailor` command line: `run`, `controller`, `worker`."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

import sailor_runtime
from sailor_sim import (
    Job,
    RunSpec,
    SailorError,
    SailorSimError,
    default_dtype,
    get_gpu,
    inputs,
    specs,
    version_option,
)

from . import cli_checks
from .datacli import data_app
from .errors import SailorRuntimeError

# The help is the docstring's first paragraph: the rest is the Python API, not the CLI's.
app = typer.Typer(
    no_args_is_help=True,
    help=sailor_runtime.__doc__.split("\n\n")[0],
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data")


@app.callback()
def main(version: bool = version_option(sailor_runtime.__version__)) -> None:
    # A callback keeps `sailor` a command group.
    pass


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


@app.command()
def version() -> None:
    """Print the sailor-runtime version."""
    typer.echo(sailor_runtime.__version__)


def _local_gpu() -> tuple[str, int] | None:
    """This machine's CUDA GPUs as (catalog type, count) (nvidia-smi), or None."""
    from .agent.gpus import detect_cuda

    try:
        found = detect_cuda()
    except SailorRuntimeError:  # a GPU the catalog lacks: only CPU types are usable here
        return None
    return (found[0], found[1]) if found else None


def _cpu_type(name: str):
    from .agent.cputypes import cpu_worker_type

    try:
        return cpu_worker_type(name)
    except SailorRuntimeError as exc:
        _fail(exc)


RUN_DEFAULTS = {"model": "tiny-gpt", "seq_len": 64, "steps": 20, "checkpoint_every": 5}
"""`sailor run`'s own defaults for RunSpec fields: a tiny model trained briefly on CPUs. No
precision: RunSpec's documented default (the config's torch_dtype, else fp32) holds."""
CONTROLLER_DEFAULTS = {**RUN_DEFAULTS, "global_batch_size": 8, "seq_len": 32}


def _with_default_precision(spec: RunSpec) -> tuple[RunSpec, str]:
    """``spec`` with its precision decided, and why: as given, else the model's config.json
    ``torch_dtype`` (bfloat16 -> bf16, float16 -> fp16, float32 -> fp32), else fp32, on CPU
    worker types as on GPUs. Decided once here, so the planner's job and every rank train in
    the same one."""
    if spec.precision is not None:
        return spec, "given by --precision (or --config)"
    dtype, reason = default_dtype(spec.model)
    return dataclasses.replace(spec, precision=dtype), f"the default: {reason}"


def _engine_options(spec: RunSpec):
    """``spec``'s options, once the engine is known to run them and its precision; else the
    command ends (exit 2) naming the field and the fix."""
    from .engine.options import OptionsError, check_run

    try:
        check_run(spec)
    except OptionsError as exc:
        _fail(exc)
    return spec.options


def _exit_if_trained(checkpoint_dir: Path, steps: int) -> None:
    """End the command (exit 0, one line) when the run's checkpoint is already at or past
    ``steps``: a rerun asking for fewer steps than were trained has nothing to do. Damaged
    checkpoints are warned about, and a folder of nothing but damaged ones is refused."""
    from .controller.checkpoints import already_trained, resume_step

    try:
        step = resume_step(checkpoint_dir)
    except SailorRuntimeError as exc:
        _fail(exc)
    if step >= steps:
        typer.echo(already_trained(step, steps, checkpoint_dir), err=True)
        raise typer.Exit(0)


def run(
    spec: RunSpec,
    local: bool = typer.Option(False, "--local", help="Run everything on this machine."),
    workers: int = typer.Option(4, help="Worker agents (nodes) to start."),
    gpu_types: str = typer.Option(
        "cpu-1t",
        help="Comma-separated CPU worker type of each worker (cycled): cpu-<N>t is a rank with "
        "N threads pinned to N cores, profiled as such, e.g. cpu-2t,cpu-1t.",
    ),
    kill_rank_at_step: int = typer.Option(
        0,
        help="Failure injection: kill -9 the highest rank's process (its node lives on) once "
        "this step is reached (0 = never).",
    ),
    kill_worker_at_step: int = typer.Option(
        0, help="Failure injection: kill -9 a worker once this step is reached (0 = never)."
    ),
    add_worker_at_step: int = typer.Option(
        0, help="Add one more worker once this step is reached (0 = never)."
    ),
    run_dir: Annotated[
        Path | None, typer.Option(help="Folder for checkpoints, logs and the profile.")
    ] = None,
    heartbeat_timeout: float = typer.Option(
        3.0, help="Seconds of silence that mark a node failed."
    ),
    data: Annotated[
        Path | None,
        typer.Option(
            help="Token shards from `sailor data prepare` (default: a generated "
            "byte corpus, no validation split)."
        ),
    ] = None,
    eval_every: int = typer.Option(0, help="Validation loss every N steps (needs --data)."),
    eval_batches: int = typer.Option(2, help="Global batches of validation data per eval."),
    timeout: float = typer.Option(900.0, help="Give up after this many seconds."),
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the summary as JSON here.")
    ] = None,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
    trace: Annotated[
        Path | None,
        typer.Option(help="Drive joins and leaves from this availability trace (zone local)."),
    ] = None,
    time_scale: float = typer.Option(1.0, help="Trace seconds per wall-clock second."),
    on_save_error: str = typer.Option(
        "stop",
        help="A checkpoint that cannot be written (a full disk): 'stop' the run with one line "
        "(the last checkpoint stays loadable), or 'continue' training without saving.",
    ),
    profile: bool = typer.Option(
        True,
        "--profile/--no-profile",
        help="Measure this machine's layers and links before planning, or plan on the built-in "
        "analytic profiles (a quick smoke run; its prediction is not this machine's).",
    ),
) -> None:
    """Train a model end to end: planner server, controller and worker agents. The run's
    settings (model, batch, options, steps, recipe, seed) are RunSpec's flags, or a --config
    TOML file of the same names.

    Precision: --precision, else the model config.json's torch_dtype, else fp32, the same
    default as sailor-sim and sailor-planner, on CPU worker types too (bf16 and fp16 run as
    autocast on CPU ranks; give --precision fp32 to train them in full precision). The summary
    says which precision it trained in and why."""
    from .run.local import LocalRunConfig, run_local
    from .run.summary import render

    _logging(verbose)
    spec, precision_reason = _with_default_precision(spec)
    if not local:
        _fail(SailorRuntimeError(
            "only --local is built in; for several machines start `sailor controller` and "
            "point `sailor worker --controller HOST:PORT` at it", field="--local"))  # fmt: skip
    steps, seq_len = spec.steps, spec.seq_len or RUN_DEFAULTS["seq_len"]
    try:
        types = cli_checks.check_run(
            dataclasses.replace(spec, seq_len=seq_len), workers=workers, gpu_types=gpu_types,
            failures=(kill_rank_at_step, kill_worker_at_step, add_worker_at_step),
            heartbeat_timeout=heartbeat_timeout, timeout=timeout, time_scale=time_scale,
            on_save_error=on_save_error,
        )  # fmt: skip
    except SailorSimError as exc:
        _fail(exc)
    options = _engine_options(spec)
    if options.sequence_parallel:  # else the planner finds no plan and the run waits
        _fail(SailorRuntimeError(
            "a local run's workers hold one rank each, so no plan has the tp > 1 that "
            "sequence parallelism needs; drop the flag (multi-GPU workers, `sailor worker "
            "--gpus N`, run it)", field="--sequence-parallel"))  # fmt: skip
    asked_gpus = [t for t in types if t != "CPU" and _cpu_type(t) is None]
    local_gpu = _local_gpu() if asked_gpus else None  # (catalog type, count) or None
    for t in asked_gpus:
        if local_gpu is None or t.lower() != local_gpu[0].lower():
            seen = f"this machine's GPUs are {local_gpu[1]}x {local_gpu[0]}" if local_gpu else (
                "this machine has no CUDA GPU")  # fmt: skip
            _fail(SailorRuntimeError(
                f"{t} is neither a CPU worker type nor this machine's GPU ({seen}); use "
                "cpu-1t, cpu-2t, ... (N threads on N cores) or the detected GPU type",
                field="--gpu-types"))  # fmt: skip
    if asked_gpus and len(asked_gpus) != len(types):
        _fail(SailorRuntimeError(
            "mixes CPU worker types and GPUs; NCCL cannot reach CPU ranks: use one kind",
            field="--gpu-types"))  # fmt: skip
    if asked_gpus and workers + bool(add_worker_at_step) > local_gpu[1]:
        _fail(SailorRuntimeError(
            f"{workers + bool(add_worker_at_step)} GPU workers need as many GPUs; this "
            f"machine has {local_gpu[1]}", field="--workers"))  # fmt: skip
    if profile:  # the links are measured with one process per worker (run.profile.measure)
        from sailor_profiler import cpu_tp_limit

        if workers > cpu_tp_limit():
            _fail(SailorRuntimeError(
                f"{workers} workers are more processes than the profiler measures links "
                f"with on one machine ({cpu_tp_limit()}); use fewer --workers, --no-profile, "
                "or set SAILOR_PROFILER_MAX_CPU_TP", field="--workers"))  # fmt: skip
    try:  # fail now, not after the workers were refused and the run waited for them
        for t in types:
            get_gpu(t)
        job = Job.create(spec.model, spec.global_batch_size, seq_len)
        run_dir = inputs.output_folder(run_dir, "--run-dir") if run_dir else None
        if json_out is not None:
            inputs.output_file(json_out, "--json")
    except SailorSimError as exc:
        _fail(exc)
    if run_dir is not None:  # a rerun: nothing starts when there is nothing to train
        _exit_if_trained(run_dir / "checkpoints", steps)
    if add_worker_at_step and add_worker_at_step >= steps:
        typer.echo(
            f"warning: --add-worker-at-step {add_worker_at_step} is not before --steps {steps}: "
            "the run ends before the worker could join, so it will not be used",
            err=True,
        )
    from .run.recipeopts import training_json

    try:
        training = training_json(
            data, eval_every, eval_batches, job.model.vocab_size, job.sequence_length
        )
    except (SailorRuntimeError, SailorSimError) as exc:
        _fail(exc)
    availability = None
    if trace is not None:  # read before a run folder exists: a bad trace leaves nothing behind
        from sailor_planner import SailorPlannerError, read_trace

        try:
            availability = read_trace(trace)
        except (SailorPlannerError, SailorSimError) as exc:
            _fail(exc)
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix="sailor-run-"))
    cfg = LocalRunConfig.from_run(
        dataclasses.replace(spec, seq_len=seq_len),
        run_dir=run_dir,
        workers=workers,
        gpu_types=types or ("CPU",),
        kill_worker_at_step=kill_worker_at_step or None,
        kill_rank_at_step=kill_rank_at_step or None,
        add_worker_at_step=add_worker_at_step or None,
        heartbeat_timeout_s=heartbeat_timeout,
        timeout_s=timeout,
        training=training,
        profile=profile,
        on_save_error=on_save_error,
        precision_reason=precision_reason,
    )
    typer.echo(f"run folder: {run_dir}", err=True)
    if availability is not None:
        from .run.tracecli import run_trace_command

        raise typer.Exit(run_trace_command(cfg, trace.name, availability, time_scale, json_out))
    try:
        summary = run_local(cfg)
    except (SailorRuntimeError, SailorSimError) as exc:
        _fail(exc)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (inputs.Terminated)
        typer.echo(_stopped_line(run_dir), err=True)
        raise typer.Exit(inputs.interrupt_exit(exc)) from None
    typer.echo(render(summary))
    for warning in summary.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if json_out:
        json_out.write_text(json.dumps(summary.to_dict(), indent=2))
    if summary.state != "DONE":
        raise typer.Exit(1)


def controller(
    spec: RunSpec,
    planner: str = typer.Option(..., help="HOST:PORT of the planner server."),
    run_dir: Annotated[Path, typer.Option(help="Checkpoints (shared by all nodes).")] = Path(
        "sailor-run"
    ),
    profile_dir: str = typer.Option("", help="Profile folder the planner should use."),
    host: str = typer.Option(
        "127.0.0.1", help="Address the controller and its rendezvous store listen on."
    ),
    port: int = typer.Option(0, help="Port (0 = any free one; see --port-file)."),
    port_file: Annotated[Path | None, typer.Option(help=inputs.PORT_FILE_HELP)] = None,
    store_port: int = typer.Option(0, help="Rendezvous store port (0 = any free one)."),
    advertise_host: str = typer.Option(
        "",
        help="Where ranks reach the store when --host is 0.0.0.0 and the agents should not "
        "use the host they reached the controller at (the default).",
    ),
    tls_cert: Annotated[Path | None, typer.Option(help="Serve TLS with this PEM chain.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM key of --tls-cert.")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(help="Dial the agents over TLS, trusting this PEM CA.")
    ] = None,
    tls_server_name: str = typer.Option(
        "", help="Name the agents' certificate carries (default: the address dialed)."
    ),
    min_workers: int = typer.Option(1, help="Workers to wait for before the first plan."),
    heartbeat_interval: float = typer.Option(1.0),
    heartbeat_timeout: float = typer.Option(5.0),
    debounce: float = typer.Option(1.0, help="Seconds without change before re-planning."),
    max_failures: int = typer.Option(5),
    data: Annotated[
        Path | None,
        typer.Option(help="Token shards from `sailor data prepare`, on a path every node sees."),
    ] = None,
    eval_every: int = typer.Option(0, help="Validation loss every N steps (needs --data)."),
    eval_batches: int = typer.Option(2, help="Global batches of validation data per eval."),
    token: str = typer.Option(None, help="Shared token (or $SAILOR_TOKEN)."),
    backend: str = typer.Option(
        "auto", help="auto (gloo for CPU worker types, nccl for GPUs), gloo or nccl."
    ),
    planner_token: str = typer.Option(
        None, help="Token of the planner server (or $SAILOR_PLANNER_TOKEN; default: --token)."
    ),
    planner_ca: Annotated[
        Path | None,
        typer.Option(help="PEM CA certificate to trust: the planner server speaks TLS."),
    ] = None,
    on_save_error: str = typer.Option(
        "stop",
        help="A checkpoint that cannot be written: 'stop' the run, or 'continue' without saving.",
    ),
    verbose: bool = typer.Option(True, "--verbose/--quiet"),
) -> None:
    """Run the controller until the job finishes (or fails). The run's settings are RunSpec's
    flags (the same as `sailor run`'s), or a --config TOML file of the same names; every node
    receives them as one message."""
    from sailor_planner import resolve_token as resolve_planner_token
    from sailor_planner import trusted_ca

    from .controller.controller import Controller, ControllerConfig
    from .controller.service import create_controller_server
    from .run.recipeopts import training_json
    from .security import check_bind, resolve_token

    _logging(verbose)
    token = resolve_token(token)
    spec, precision_reason = _with_default_precision(spec)
    seq_len = spec.seq_len or CONTROLLER_DEFAULTS["seq_len"]
    try:
        cli_checks.check_controller(
            dataclasses.replace(spec, seq_len=seq_len), planner=planner, host=host, port=port,
            min_workers=min_workers, heartbeat=(heartbeat_interval, heartbeat_timeout),
            debounce=debounce, max_failures=max_failures, on_save_error=on_save_error,
            run_dir=run_dir,
        )  # fmt: skip
        check_bind(host, token, "the controller")
        inputs.port(port, "--port")
        # now, not once the run folder is locked and torch loaded (~15 s), nor as a store error
        inputs.listenable(f"{inputs.host(host, '--host')}:{port}", "--port")
        _optional_hosts(advertise_host=advertise_host, tls_server_name=tls_server_name)
        inputs.claim_port_file(port_file)  # now, not after the server started
        if backend not in ("auto", "gloo", "nccl"):
            raise SailorRuntimeError(f"{backend!r}: use auto, gloo or nccl", field="--backend")
        inputs.port(store_port, "--store-port")
        tls = _tls_files(tls_cert, tls_key, tls_ca, tls_server_name)
        if planner_ca is not None:
            trusted_ca(planner_ca, "--planner-ca")  # a bad CA file now, not at the first plan
        _engine_options(spec)
        job = Job.create(
            spec.model, spec.global_batch_size, seq_len, spec.precision, "adam",
            spec.options,
        )  # fmt: skip
        training = training_json(
            data, eval_every, eval_batches, job.model.vocab_size, job.sequence_length
        )
        cfg = ControllerConfig.from_run(
            dataclasses.replace(spec, seq_len=seq_len), job, run_dir=run_dir,
            planner_address=planner, profile_dir=profile_dir, min_workers=min_workers,
            heartbeat_interval_s=heartbeat_interval, heartbeat_timeout_s=heartbeat_timeout,
            debounce_s=debounce, max_failures=max_failures, store_host=host,
            store_port=store_port, advertise_host=advertise_host, token=token, tls=tls,
            backend=backend, planner_token=resolve_planner_token(planner_token),
            planner_ca=planner_ca, on_save_error=on_save_error, training=training,
        )  # fmt: skip
        c = Controller(cfg)
        if c.resume_step >= spec.steps:
            c.close()
            _exit_if_trained(cfg.checkpoint_dir, spec.steps)
        server, bound = create_controller_server(c, f"{host}:{port}", token, tls)
    except SailorError as exc:
        _fail(exc)
    server.start()
    c.start()
    inputs.write_port_file(port_file, bound)
    typer.echo(f"controller listening on {host}:{bound}", err=True)
    # once every check passed: a refused start stays one line on stderr
    logging.getLogger("sailor.controller").info("precision %s: %s", spec.precision,
                                                precision_reason)  # fmt: skip
    stop = threading.Event()
    stopped_with = inputs.SIGTERM_EXIT  # what a signal that stops it exits with
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    interrupted = False
    try:
        while not c.finished and not stop.wait(0.5):
            pass
    except KeyboardInterrupt as exc:
        stopped_with = inputs.interrupt_exit(exc)
    finally:
        interrupted = not c.finished
        if interrupted:  # stopped by a signal: the ranks must not train on without us
            c.shutdown("the controller was stopped")
        time.sleep(3 * heartbeat_interval)  # let agents hear `shutdown` and send their metrics
        c.close()
        server.stop(grace=0.5)
    if interrupted:
        typer.echo(_stopped_line(run_dir), err=True)
        raise typer.Exit(stopped_with)
    typer.echo(f"controller: {c.state.name}: {c.message}", err=True)
    if c.state.name != "DONE":
        raise typer.Exit(1)


def _stopped_line(run_dir: Path) -> str:
    """What `sailor run` and `sailor controller` say when a signal stopped them: where the
    run resumes."""
    from .controller.checkpoints import latest_checkpoint_step

    step = latest_checkpoint_step(run_dir / "checkpoints")
    if not step:
        return f"stopped by a signal before the first checkpoint; nothing to resume in {run_dir}"
    return (
        f"stopped by a signal; the last checkpoint is step {step} in {run_dir}/checkpoints "
        f"(run again with --run-dir {run_dir} to resume from it)"
    )


def add_run_commands(target: typer.Typer, spec_cls: type[RunSpec] = RunSpec) -> typer.Typer:
    """Register `run` and `controller` on ``target`` with the flags of ``spec_cls``: a RunSpec
    subclass's new fields become flags and config keys, and reach every rank in the
    assignment's ``run`` (``TrainConfig.run``) with no other declaration."""
    target.command("run")(specs.with_spec(spec_cls, defaults=RUN_DEFAULTS)(run))
    target.command("controller")(
        specs.with_spec(spec_cls, defaults=CONTROLLER_DEFAULTS)(controller)
    )
    return target


add_run_commands(app)


def _optional_hosts(**names: str) -> None:
    """Host-name flags whose "" means "the default": a given one must be a host name."""
    for name, value in names.items():
        if value:
            inputs.host(value, f"--{name.replace('_', '-')}")


@app.command()
def worker(
    controller: str = typer.Option(..., help="HOST:PORT of the controller."),
    gpu_type: str = typer.Option(
        None,
        help="Declare the device type (a CPU worker type cpu-<N>t, or a GPU type); else "
        "detect CUDA.",
    ),
    gpus: int = typer.Option(None, help="GPUs on this node (default 1 when declared)."),
    zone: str = typer.Option("local", help="Zone of this node."),
    host: str = typer.Option("127.0.0.1", help="Address the agent listens on."),
    port: int = typer.Option(0, help="Port the agent listens on (0 = any free one)."),
    port_file: Annotated[Path | None, typer.Option(help=inputs.PORT_FILE_HELP)] = None,
    advertise_host: str = typer.Option(
        "",
        help="Where the controller dials this agent (default --host; with --host 0.0.0.0 the "
        "address the controller sees the registration come from).",
    ),
    tls_cert: Annotated[Path | None, typer.Option(help="Serve TLS with this PEM chain.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM key of --tls-cert.")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(help="Dial the controller over TLS, trusting this PEM CA.")
    ] = None,
    tls_server_name: str = typer.Option(
        "", help="Name the controller's certificate carries (default: the address dialed)."
    ),
    worker_id: str = typer.Option(None, help="Unique node name (default host-pid)."),
    workdir: Annotated[Path, typer.Option(help="Rank logs and metrics.")] = Path("sailor-worker"),
    threads_per_rank: int = typer.Option(1, help="OMP threads per rank process."),
    first_core: int = typer.Option(
        0, help="A CPU worker type's ranks are pinned to cores from this one on (wrapping)."
    ),
    warm: bool = typer.Option(
        True,
        "--warm/--cold",
        help="Import torch (in the rank-forking zygote) before registering, or with the first "
        "assignment; restarts fork from it either way.",
    ),
    controller_timeout: float = typer.Option(
        300.0,
        help="Stop the ranks and exit 1 after this many seconds without the controller (at "
        "the start too: a worker may start first and waits this long for it).",
    ),
    token: str = typer.Option(None, help="Shared token (or $SAILOR_TOKEN)."),
    verbose: bool = typer.Option(True, "--verbose/--quiet"),
) -> None:
    """Run a worker agent: register with the controller and run the ranks it assigns. Exit
    status: 0 once the run finished, 1 after --controller-timeout without the controller, 2 on
    bad input or a refused registration, 3 when the controller ended the run unfinished (it
    was stopped, or the run failed)."""
    from .agent.agent import UNFINISHED_EXIT, WorkerAgent
    from .agent.gpus import node_gpus
    from .errors import ControllerUnreachableError
    from .security import check_bind, resolve_token

    _logging(verbose)
    token = resolve_token(token)
    try:
        cli_checks.check_worker(
            controller=controller, gpus=gpus, zone=zone, host=host, worker_id=worker_id,
            threads_per_rank=threads_per_rank, first_core=first_core,
            controller_timeout=controller_timeout,
        )  # fmt: skip
        check_bind(host, token, "the worker agent")
        inputs.port(port, "--port")
        _optional_hosts(advertise_host=advertise_host, tls_server_name=tls_server_name)
        inputs.output_folder(workdir, "--workdir")  # now, not after the agent registered
        inputs.claim_port_file(port_file)
        tls = _tls_files(tls_cert, tls_key, tls_ca, tls_server_name)
        node = node_gpus(gpu_type, gpus, zone)
        agent = WorkerAgent(
            controller, node, workdir, host=host, port=port, advertise_host=advertise_host,
            token=token, tls=tls, worker_id=worker_id,
            threads_per_rank=threads_per_rank, warm=warm, controller_timeout_s=controller_timeout,
            first_core=first_core,
        )  # fmt: skip
        agent.start()
        inputs.write_port_file(port_file, agent.port)
    except ControllerUnreachableError as exc:  # its whole grace period without the controller
        agent.close()
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except SailorError as exc:
        _fail(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. a refused registration (gRPC error)
        details = exc.details() if hasattr(exc, "details") else str(exc)
        _fail(SailorRuntimeError(f"registration failed: {details}", field="controller"))
    signal.signal(signal.SIGTERM, lambda *_: agent.leave("SIGTERM"))
    try:
        agent.done.wait()
    except KeyboardInterrupt:
        agent.leave("interrupted")
    finally:
        agent.close()
    if agent.unfinished:
        typer.echo(f"worker: the run ended unfinished (the controller was stopped, or the run "
                   f"failed); exit {UNFINISHED_EXIT}", err=True)  # fmt: skip
    sys.exit(1 if agent.lost_controller else UNFINISHED_EXIT if agent.unfinished else 0)


@app.command("slurm-node")
def slurm_node(
    node: str = typer.Option(
        "", help="Slurm node name (default $SLURMD_NODENAME, else this host's short name)."
    ),
) -> None:
    """Print `--gpu-type T --gpus N` for this Slurm node, from its GRES (deploy/slurm)."""
    import os
    import socket

    from .slurm import gres_gpus, node_gres

    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        gpu_type, count = gres_gpus(node_gres(name))
    except SailorError as exc:
        _fail(exc)
    typer.echo(f"--gpu-type {gpu_type} --gpus {count}")


def _tls_files(cert: Path | None, key: Path | None, ca: Path | None, server_name: str):
    """The TLS files of a controller or agent, each checked to be a readable file now."""
    from .security import TlsFiles

    for path, flag in ((cert, "--tls-cert"), (key, "--tls-key"), (ca, "--tls-ca")):
        if path is not None:
            inputs.read_text(path, flag, max_bytes=1 << 20)
    return TlsFiles(cert, key, ca, server_name or None).check()


def entry() -> None:
    """The ``sailor`` console script: every error one line on stderr, never a traceback."""
    inputs.run_app(app, "sailor")


if __name__ == "__main__":
    entry()
