"""`sailor-planner plan` without typer: its arguments, its run, and a fast argparse entry point.

The console script enters through ``main`` here: ``plan`` is parsed with argparse (typer builds a
pydantic adapter per option, which costs more than the search on a 512-GPU inventory), every
other command and ``--help`` go to the typer app in ``cli.py``. Both build the same ``PlanArgs``
and call ``run_plan``; a test checks that both accept the same flags.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sailor_sim import Inventory, Job, SailorSimError

from .errors import RequestError, SailorPlannerError


@dataclass(frozen=True)
class PlanArgs:
    model: str
    gbs: int
    seq_len: int | None = None
    dtype: str = "fp32"
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


def run_plan(args: PlanArgs, echo: Callable[..., None] | None = None) -> int:
    """Search and print; returns the exit status (2 with one `error:` line on bad input)."""
    echo = echo or _echo
    start = time.perf_counter()
    try:
        from .request import Constraints, SearchOptions
        from .sources import planner_for

        job = Job.create(args.model, args.gbs, args.seq_len, args.dtype)
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
        )
        planner = planner_for(
            str(args.profile_dir) if args.profile_dir else None,
            str(args.sailor_root) if args.sailor_root else None,
        )
        result = planner.plan(job, inventory, options)
    except (SailorPlannerError, SailorSimError, OSError) as exc:
        echo(f"error: {exc}", err=True)
        return 2
    if args.as_json:
        out = result.to_dict()
        out["command_time_s"] = time.perf_counter() - start
        echo(json.dumps(out))
    else:
        echo(_fmt_table(result))
    return 0


def _echo(message: str, err: bool = False) -> None:
    print(message, file=sys.stderr if err else sys.stdout)


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit status 2, as every Sailor CLI
        raise RequestError(message, field="arguments")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sailor-planner plan", exit_on_error=False)
    p.add_argument("--model", required=True)
    p.add_argument("--gbs", type=int, required=True)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--gpus", action="append", default=[])
    p.add_argument("--inventory", type=Path)
    p.add_argument("--profile-dir", type=Path)
    p.add_argument("--sailor-root", type=Path)
    p.add_argument("--objective", default="throughput")
    p.add_argument("--max-cost-per-iteration", type=float)
    p.add_argument("--max-cost-per-hour", type=float)
    p.add_argument("--min-throughput", type=float)
    p.add_argument("--top", type=int, default=1)
    p.add_argument("--pareto", type=int, default=0)
    p.add_argument("--allow-cross-region-dp", action="store_true")
    p.add_argument("--deadline", type=float)
    p.add_argument("--json", action="store_true")
    return p


def main() -> None:
    """Console-script entry: fast path for `plan`, typer for everything else."""
    argv = sys.argv[1:]
    if argv[:1] == ["plan"] and not {"-h", "--help"} & set(argv):
        try:
            ns = parser().parse_args(argv[1:])
        except (argparse.ArgumentError, RequestError) as exc:
            _echo(f"error: {exc}", err=True)
            sys.exit(2)
        sys.exit(
            run_plan(
                PlanArgs(
                    ns.model,
                    ns.gbs,
                    ns.seq_len,
                    ns.dtype,
                    tuple(ns.gpus),
                    ns.inventory,
                    ns.profile_dir,
                    ns.sailor_root,
                    ns.objective,
                    ns.max_cost_per_iteration,
                    ns.max_cost_per_hour,
                    ns.min_throughput,
                    ns.top,
                    ns.pareto,
                    ns.allow_cross_region_dp,
                    ns.deadline,
                    ns.json,
                )
            )
        )
    from sailor_sim.inputs import run_app

    from .cli import app

    run_app(app, "sailor-planner")
