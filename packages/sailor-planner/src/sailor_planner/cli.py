"""The ``sailor-planner`` command line (typer): ``plan`` (search once and print), ``serve`` (gRPC).

The console script enters here; ``plan``'s work lives in ``planrun.py``, which never imports
this module.
"""

from __future__ import annotations

import gc
import os
import sys

# Before numpy loads (the search imports it): the planner's arrays never reach BLAS, and on a
# 2-core machine OpenBLAS's idle worker threads cost ~0.1 s CPU of the 0.8 s plan command. A
# value the user set wins; the library (``Planner``) leaves the environment alone.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from pathlib import Path
from typing import Annotated

import typer

import sailor_planner
from sailor_sim import (
    TRAINING_FIELDS,
    FabricFlag,
    RunSpec,
    SailorSimError,
    ValidationError,
    catalog_option,
    empty_folder_warning,
    inputs,
    run_app,
    specs,
    version_option,
)

from .errors import SailorPlannerError
from .replay.cli import replay_command
from .request import DEFAULT_MAX_PIPELINE_DEPTH

# The help is the docstring's first paragraph: the rest is the Python API, not the CLI's.
app = typer.Typer(
    no_args_is_help=True,
    help=sailor_planner.__doc__.split("\n\n")[0],
    pretty_exceptions_enable=False,
)
app.command("replay")(replay_command)


def fail(exc: Exception) -> None:
    """One clear line on stderr and exit status 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


_CATALOG = catalog_option()


@app.callback()
def group(
    version: bool = version_option(sailor_planner.__version__),
    catalog: Path | None = _CATALOG,
) -> None:
    # A callback keeps `sailor-planner` a command group.
    pass


@app.command()
def version() -> None:
    """Print the sailor-planner version."""
    typer.echo(sailor_planner.__version__)


@app.command()
@specs.with_spec(RunSpec, exclude=(*TRAINING_FIELDS, "optimizer"))
def plan(
    spec: RunSpec,
    given: frozenset,
    gpus: Annotated[
        list[str] | None, typer.Option("--gpus", help="TYPE@ZONE=COUNT, repeatable.")
    ] = None,
    inventory_file: Annotated[
        Path | None, typer.Option("--inventory", help="Inventory JSON.")
    ] = None,
    profile_dir: Annotated[
        Path | None, typer.Option("--profile-dir", help="Profile folder.")
    ] = None,
    sailor_root: Annotated[
        Path | None,
        typer.Option("--sailor-root", help="Original Sailor checkout (profiles, network fits)."),
    ] = None,
    objective: Annotated[
        str, typer.Option("--objective", help="throughput or cost.")
    ] = "throughput",
    max_cost_per_iteration: Annotated[
        float | None, typer.Option("--max-cost-per-iteration")
    ] = None,
    max_cost_per_hour: Annotated[float | None, typer.Option("--max-cost-per-hour")] = None,
    min_throughput: Annotated[
        float | None, typer.Option("--min-throughput", help="Iterations per second.")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Number of ranked plans.")] = 1,
    pareto: Annotated[
        int,
        typer.Option("--pareto", help="Also return N points of the throughput-vs-cost frontier."),
    ] = 0,
    allow_cross_region_dp: Annotated[
        bool, typer.Option("--allow-cross-region-dp", help="Let replicas of a stage span regions.")
    ] = False,
    max_pipeline_depth: Annotated[
        int,
        typer.Option(
            "--max-pipeline-depth",
            help="Deepest pipeline considered (1: no pipeline parallelism, e.g. for FSDP).",
        ),
    ] = DEFAULT_MAX_PIPELINE_DEPTH,
    deadline: Annotated[
        float | None, typer.Option("--deadline", help="Stop after this many s.")
    ] = None,
    fabric: FabricFlag = None,
    search_options: Annotated[
        bool,
        typer.Option(
            "--search-options/--fixed-options",
            help="Also try recompute / ZeRO / sequence parallelism on the best plans and "
            "report the choice (--fixed-options: the job's options only).",
        ),
    ] = True,
    profiled_only: Annotated[
        bool,
        typer.Option(
            "--profiled-only",
            help="Refuse microbatch sizes / TP degrees beyond the measured profiles (by default "
            "they are allowed and flagged in the 'profiles' column and JSON 'extrapolated').",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Find the best plans for a job on an inventory (the job and its options: RunSpec's flags,
    or a --config TOML file of the same names)."""
    from .planrun import PlanArgs, run_plan

    for name in ("model", "global_batch_size"):
        if name not in given:
            option = "--model" if name == "model" else "--gbs"
            fail(ValidationError("is required (a flag or a --config key)", field=option))
    if warning := empty_folder_warning(profile_dir, "--profile-dir"):
        typer.echo(warning, err=True)
    code = run_plan(
        PlanArgs(
            spec.model,
            spec.global_batch_size,
            spec.seq_len,
            spec.precision,
            tuple(gpus or ()),
            inventory_file,
            profile_dir,
            sailor_root,
            objective,
            max_cost_per_iteration,
            max_cost_per_hour,
            min_throughput,
            top,
            pareto,
            allow_cross_region_dp,
            deadline,
            as_json,
            spec.options,
            search_options,
            profiled_only,
            fabric=fabric,
            max_pipeline_depth=max_pipeline_depth,
        )
    )
    if code:
        raise typer.Exit(code)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="0 picks a free port (printed; see --port-file).")
    ] = 0,
    port_file: Annotated[
        Path | None, typer.Option("--port-file", help=inputs.PORT_FILE_HELP)
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Searches at once (rest queue).")] = 2,
    token: Annotated[
        str | None, typer.Option("--token", help="Shared token; required beyond loopback.")
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate.")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key.")] = None,
    data_root: Annotated[
        list[Path] | None,
        typer.Option(
            "--data-root",
            help="A folder whose profile folders and model configs requests may name "
            "(repeatable); without one, the server reads no path a client sends.",
        ),
    ] = None,
) -> None:
    """Serve sailor.v1.PlannerService (plus health and reflection) over gRPC."""
    from .service.access import Access, resolve_token
    from .service.paths import DataRoots
    from .service.server import serve as run

    try:
        inputs.claim_port_file(port_file)  # now: a bad path starts nothing
        access = Access(resolve_token(token), tls_cert, tls_key)
        signum = run(host, port, workers, access, DataRoots.of(data_root), port_file)
    except (SailorPlannerError, SailorSimError, OSError) as exc:
        fail(exc)
    raise typer.Exit(128 + signum)  # stopped by SIGINT (130) or SIGTERM (143), drained


SEARCH_GC_THRESHOLD = 20_000
"""Container allocations between young-generation collections in a ``sailor-planner`` process
(CPython's default: 700). A search allocates millions of short-lived tuples while its tables
stay alive, so at the default most collections find nothing to free: 12 % of the 512-GPU
plan command's CPU (bench/planner_search_time.py), none with this threshold. The process is
ours, so the setting is too; the library (``Planner``) leaves the collector alone."""


def main() -> None:
    """The ``sailor-planner`` entry point: any error is one line on stderr, never a traceback."""
    gc.set_threshold(SEARCH_GC_THRESHOLD, *gc.get_threshold()[1:])
    try:
        run_app(app, "sailor-planner")
    except SystemExit as done:
        if sys.argv[1:2] == ["plan"]:
            exit_now(done.code)
        raise


def exit_now(code) -> None:
    """End a finished ``plan`` process without tearing the interpreter down: freeing the
    search's tables object by object took 0.1 s of the 512-GPU command's ~1 s CPU
    (bench/planner_search_time.py). Its output is flushed first; ``plan`` holds no other
    resource (no files, threads or servers), so no exit handler has work left. Other
    commands exit normally."""
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if not isinstance(code, int | None):
        print(code, file=sys.stderr)  # as sys.exit prints a message
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the reader went away
            status = status or inputs.PIPE_CLOSED_EXIT
    os._exit(status)


if __name__ == "__main__":
    main()
