"""The ``sailor-planner`` command line: ``plan`` (search once and print) and ``serve`` (gRPC)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

import sailor_planner
from sailor_sim import Inventory, Job, SailorSimError

from .errors import RequestError, SailorPlannerError

app = typer.Typer(no_args_is_help=True, help=sailor_planner.__doc__, pretty_exceptions_enable=False)


def fail(exc: Exception) -> None:
    """One clear line on stderr and exit status 2."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


@app.callback()
def main() -> None:
    # A callback keeps `sailor-planner` a command group.
    pass


@app.command()
def version() -> None:
    """Print the sailor-planner version."""
    typer.echo(sailor_planner.__version__)


def _inventory(gpus: list[str], inventory_file: Path | None) -> Inventory:
    if gpus and inventory_file:
        raise RequestError("give --gpus or --inventory, not both", field="inventory")
    if inventory_file:
        if not inventory_file.is_file():
            raise RequestError(f"{inventory_file} is not a file", field="inventory")
        inventory = Inventory.from_json_file(inventory_file)
    elif gpus:
        inventory = Inventory.parse(gpus)
    else:
        raise RequestError(
            "no GPUs; pass --gpus TYPE@ZONE=COUNT (repeatable) or --inventory FILE", field="gpus"
        )
    if inventory.total_gpus == 0:
        raise RequestError("the inventory has no GPUs", field="gpus")
    return inventory


def _fmt_table(result) -> str:
    lines = [
        f"{'#':>2}  {'iter/s':>8}  {'s/iter':>8}  {'$/iter':>9}  {'$/hour':>9}  {'GPUs':>5}  plan"
    ]
    for i, ranked in enumerate(result.plans, 1):
        e, p = ranked.estimate, ranked.plan
        lines.append(
            f"{i:>2}  {e.throughput_iters_per_s:>8.4f}  {e.iteration_time_s:>8.3f}  "
            f"{e.cost_per_iteration_usd:>9.4f}  {e.cost_per_hour_usd:>9.2f}  {p.num_gpus:>5}  "
            f"{p.describe()}"
        )
    s = result.stats
    lines.append(
        f"search {result.search_time_s:.3f} s{' (partial: deadline)' if result.partial else ''}; "
        f"{s.candidates_evaluated} candidates evaluated ({s.evaluations_per_s:,.0f}/s), "
        f"{s.pruned} pruned, {s.infeasible} infeasible, {s.rescored} re-scored by the simulator"
    )
    return "\n".join(lines)


@app.command()
def plan(
    model: Annotated[str, typer.Option("--model", help="Catalog model, e.g. OPT-350M.")],
    gbs: Annotated[int, typer.Option("--gbs", help="Global batch size (samples per iteration).")],
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="Tokens per sample.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, bf16 or fp16.")] = "fp32",
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
    deadline: Annotated[
        float | None, typer.Option("--deadline", help="Stop after this many s.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Find the best plans for a job on an inventory."""
    start = time.perf_counter()
    try:
        from .request import Constraints, SearchOptions
        from .sources import planner_for

        job = Job.create(model, gbs, seq_len, dtype)
        inventory = _inventory(gpus or [], inventory_file)
        options = SearchOptions(
            objective=objective,
            constraints=Constraints(max_cost_per_iteration, max_cost_per_hour, min_throughput),
            top_k=top,
            allow_cross_region_data_parallel=allow_cross_region_dp,
            deadline_s=deadline,
            pareto_points=pareto,
        )
        planner = planner_for(
            str(profile_dir) if profile_dir else None, str(sailor_root) if sailor_root else None
        )
        result = planner.plan(job, inventory, options)
    except (SailorPlannerError, SailorSimError) as exc:
        fail(exc)
    if as_json:
        out = result.to_dict()
        out["command_time_s"] = time.perf_counter() - start
        typer.echo(json.dumps(out))
    else:
        typer.echo(_fmt_table(result))


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="0 picks a free port (printed).")] = 0,
    workers: Annotated[int, typer.Option("--workers", help="Concurrent requests.")] = 4,
) -> None:
    """Serve sailor.v1.PlannerService (plus health and reflection) over gRPC."""
    from .server import serve as run

    try:
        run(host, port, workers)
    except (SailorPlannerError, SailorSimError) as exc:
        fail(exc)


if __name__ == "__main__":
    app()
