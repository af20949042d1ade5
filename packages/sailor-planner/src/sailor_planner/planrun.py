"""`sailor-planner plan`'s run: build the job, inventory and options, search, print.

The typer command in ``cli.py`` parses the flags into ``PlanArgs`` and calls ``run_plan``; this
module never imports the CLI (no import cycle), so other front ends can call it too.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sailor_sim import ExecutionOptions, Inventory, Job, SailorSimError, inputs

from .errors import RequestError, SailorPlannerError
from .request import DEFAULT_MAX_PIPELINE_DEPTH
from .result import PlanResult

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@dataclass(frozen=True)
class PlanArgs:
    model: str
    gbs: int
    seq_len: int | None = None
    """None: the model's maximum, capped (``sailor_sim.make_job``, as every CLI)."""
    dtype: str | None = None
    """None: the config.json's torch_dtype, else fp32 (``make_job``, as every CLI)."""
    gpus: tuple[str, ...] = ()
    inventory_file: Path | None = None
    profile_dir: Path | None = None
    sailor_root: Path | None = None
    objective: str = "throughput"
    max_cost_per_iteration: float | None = None
    max_cost_per_hour: float | None = None
    min_throughput: float | None = None
    top: int = 1
    pareto: int = 0
    allow_cross_region_dp: bool = False
    deadline: float | None = None
    as_json: bool = False
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    """The job's execution options (the flags --zero, --recompute, ...)."""
    search_options: bool = True
    """Also search recompute / ZeRO / SP for the best plans and report the choice."""
    profiled_only: bool = False
    """Refuse configurations the profiles do not cover (see ``provenance``)."""
    fabric: str | None = None
    """``--fabric``: a catalog fabric name or a sailor-cluster/1 file
    (``sailor_sim.catalog.cluster``)
    for the links between nodes; None: the GPU types' catalog defaults."""
    max_pipeline_depth: int = DEFAULT_MAX_PIPELINE_DEPTH


PIPED_WIDTH = 4096
"""Columns rich lays tables out in when stdout is not a terminal (a file, a pipe, a test):
wide enough that no table wraps, so every row stays on one line for grep and awk. (Rich
assumes 80 there and folds values mid-token.)"""


def stdout_console(**kwargs) -> Console:
    """The console of a command's tables: the terminal's width, or ``PIPED_WIDTH`` piped."""
    from rich.console import Console  # here: --json never pays for rich's import

    console = Console(**kwargs)
    if console.is_terminal:
        return console
    return Console(width=PIPED_WIDTH, **kwargs)


def job_of(model: str, gbs: int, seq_len, dtype, options) -> tuple[Job, dict[str, str]]:
    """The job a planner command plans, and the defaults it assumed (field -> why): those
    ``sailor-sim simulate`` and ``sailor run`` take (``make_job``: the model's maximum sequence
    capped at 8192, the config's torch_dtype else fp32); Adam, the optimizer of the original
    Sailor's profiles."""
    from sailor_sim import make_job

    return make_job(model, gbs, seq_len, dtype, "adam", options)


def search(args: PlanArgs) -> tuple[Job, PlanResult, dict[str, str]]:
    """Run the planner for ``args``: the job, the result and the defaults the job assumed;
    raises the sim or planner error family on bad input."""
    from .request import Constraints, SearchOptions
    from .sources import planner_for

    job, assumed = job_of(args.model, args.gbs, args.seq_len, args.dtype, args.options)
    inventory = _inventory(list(args.gpus), args.inventory_file)
    options = SearchOptions(
        objective=args.objective,
        constraints=Constraints(
            args.max_cost_per_iteration, args.max_cost_per_hour, args.min_throughput
        ),
        top_k=args.top,
        allow_cross_region_data_parallel=args.allow_cross_region_dp,
        deadline_s=args.deadline,
        pareto_points=args.pareto,
        search_execution_options=args.search_options,
        profiled_only=args.profiled_only,
        max_pipeline_depth=args.max_pipeline_depth,
    )
    for path, flag in ((args.profile_dir, "--profile-dir"), (args.sailor_root, "--sailor-root")):
        if path is not None:  # named by its flag (the library names its parameter)
            inputs.folder(path, flag)
    profile_dir = str(args.profile_dir) if args.profile_dir else None
    sailor_root = str(args.sailor_root) if args.sailor_root else None
    if args.fabric is None:
        planner = planner_for(profile_dir, sailor_root)
    else:  # a planner of its own: the shared ones serve requests without this cluster
        from sailor_sim import resolve_cluster

        from .planner import Planner
        from .sources import load_simulator

        sim = load_simulator(profile_dir, sailor_root)
        sim.network.set_cluster(resolve_cluster(args.fabric))
        planner = Planner(sim)
    return job, planner.plan(job, inventory, options), assumed


def run_plan(args: PlanArgs, out: Console | None = None, err: Console | None = None) -> int:
    """Search and print; returns the exit status (2 with one `error:` line on bad input).
    The consoles are built only where something is printed through them (rich's import is
    ~20 ms of a --json command's CPU)."""
    start = time.perf_counter()
    try:
        job, result, assumed = search(args)
    except (SailorPlannerError, SailorSimError, OSError) as exc:
        if err is None:
            from rich.console import Console

            err = Console(stderr=True, soft_wrap=True, highlight=False)
        err.print(f"error: {exc}", markup=False)
        return 2
    if args.as_json:
        data = result.to_dict(job)
        data["job"] = job.to_dict()
        data["assumed"] = assumed
        data["command_time_s"] = time.perf_counter() - start
        print(json.dumps(data), file=sys.stdout if out is None else out.file)
    else:
        out = out or stdout_console(soft_wrap=True)
        out.print(job_line(job, assumed), markup=False, highlight=False)
        out.print(plans_table(result.plans))
        for line in extrapolation_notes(result.plans):
            out.print(line, markup=False, highlight=False)
        if result.pareto:
            out.print(
                f"throughput-vs-cost frontier ({len(result.pareto)} points meeting the "
                "constraints, cheapest first; no point beaten on both by another or by a "
                "ranked plan):",
                markup=False,
                highlight=False,
            )
            out.print(plans_table(result.pareto))
        out.print(search_summary(result), markup=False, highlight=False)
    return 0


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
    if inventory.total_gpus == 0:  # named after what was given: --inventory was told 'gpus'
        if inventory_file:
            raise RequestError(
                f"{inventory_file} has no GPUs; list at least one pool with a count above 0",
                field="inventory",
            )
        raise RequestError(
            "the --gpus pools hold no GPUs; give at least one pool a count above 0", field="gpus"
        )
    return inventory


def job_line(job: Job, assumed: dict[str, str]) -> str:
    """The job planned, in one line, with the defaults it assumed (a flag not given)."""
    line = (
        f"job: {job.model.name}, global batch {job.global_batch_size}, sequence "
        f"{job.sequence_length}, {job.dtype}"
    )
    if assumed:
        line += "; assumed " + "; ".join(f"{k} {why}" for k, why in assumed.items())
    return line


def zones_used(plan) -> str:
    """GPUs the plan takes per pool, e.g. 'A100-40@us-central1-b=64': two plans that differ
    only in their zones print differently."""
    counts = plan.gpu_counts()
    return " ".join(f"{g}@{z}={n}" for (g, z), n in sorted(counts.items()))


def figure(value: float, decimals: int) -> str:
    """``value`` with at least ``decimals`` decimals and at least 4 significant digits: with
    fixed decimals a small job's $/iteration printed 0.0000 in every row (the cost objective's
    ranking unreadable) and two frontier points 0.017806 and 0.017818 both printed 0.0178."""
    if value > 0 and math.isfinite(value):
        decimals = max(decimals, 3 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


def plans_table(plans) -> Table:
    """Ranked plans (or frontier points) as a rich table."""
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for name in ("#", "iter/s", "s/iter", "$/iter", "$/hour", "GPUs"):
        table.add_column(name, justify="right")
    table.add_column("zones", overflow="fold")
    table.add_column("plan", overflow="fold")
    table.add_column("options", overflow="fold")
    for i, ranked in enumerate(plans, 1):
        e, p = ranked.estimate, ranked.plan
        chosen = ranked.options.describe() if ranked.options is not None else "defaults"
        table.add_row(
            str(i),
            figure(e.throughput_iters_per_s, 4),
            figure(e.iteration_time_s, 3),
            figure(e.cost_per_iteration_usd, 4),
            f"{e.cost_per_hour_usd:.2f}",
            str(p.num_gpus),
            zones_used(p),
            p.describe() + (" *" if ranked.extrapolated else ""),
            chosen,
        )
    return table


def extrapolation_notes(plans) -> list[str]:
    """One line per ranked plan (marked * in the table) whose estimate rests on profiles
    scaled beyond the measured range."""
    return [
        f"* plan #{i}: profiles extrapolated beyond the measured range: "
        f"{'; '.join(r.extrapolated)} (--profiled-only refuses such plans)"
        for i, r in enumerate(plans, 1)
        if r.extrapolated
    ]


def search_summary(result: PlanResult) -> str:
    s = result.stats
    partial = " (partial: deadline)" if result.partial else ""
    return (
        f"search {result.search_time_s:.3f} s{partial}; "
        f"{s.candidates_evaluated} candidates evaluated ({s.evaluations_per_s:,.0f}/s), "
        f"{s.pruned} pruned, {s.infeasible} infeasible, {s.rescored} re-scored by the simulator"
    )
