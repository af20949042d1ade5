"""``sailor-planner replay``: replay an availability trace and compare re-planning policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sailor_sim import (
    TRAINING_FIELDS,
    RunSpec,
    SailorSimError,
    empty_folder_warning,
    inputs,
    specs,
)

from ..errors import SailorPlannerError
from .reconfig import MIN_CHECKPOINT_INTERVAL_S, check_interval

if TYPE_CHECKING:
    from rich.table import Table


def policy_table(result) -> Table:
    """One row per policy."""
    from rich.table import Table  # here: a plan command never pays for rich

    from ..planrun import figure

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("policy")
    for name in (
        "samples", "$", "$/1M tok", "samples/s", "GPU-h", "re-plans", "reconf.", "reconf. s",
        "lost samples",
    ):  # fmt: skip
        table.add_column(name, justify="right")
    for s in result.summaries:
        # 4 significant digits (planrun.figure): a small model's 0.0031 $/1M tokens printed
        # 0.003, and below 0.0005 a cost of 0.000.
        per_m = figure(s.usd_per_million_tokens, 3) if s.usd_per_million_tokens else "-"
        table.add_row(
            s.policy, f"{s.samples:,.0f}", f"{s.usd:,.2f}", per_m, f"{s.mean_samples_per_s:.2f}",
            f"{s.gpu_hours:,.1f}", str(s.replans), str(s.reconfigurations),
            f"{s.reconfigure_s:.1f}", f"{s.lost_samples:,.0f}",
        )  # fmt: skip
    return table


def notes(result) -> list[str]:
    """The lines under the table: the trace, and the spot advice when it has preemptions."""
    t = result.trace
    lines = [
        f"trace {t.source}: {len(t.states)} states over {t.duration_s / 3600:.1f} h, "
        f"{len(t.pools)} pools, {t.preemptions} with preemptions; "
        f"checkpoint every {result.reconfig.checkpoint_interval_s:g} s; "
        f"replay {result.replay_time_s:.2f} s"
    ]
    if result.spot is not None:
        a = result.spot
        lines.append(
            f"spot ({result.summaries[0].policy}'s first plan): {a.preemptions} preemptions, one "
            f"every {a.mtbf_s / 3600:.2f} h; checkpoint save {a.save_s:.1f} s, restart "
            f"{a.restart_s:.1f} s; expected waste {a.waste:.1%} -> {a.usd_per_million_tokens:.4f}"
            f" $/1M tokens at {a.interval_s:g} s; optimum interval {a.daly_interval_s:.0f} s "
            f"(Daly; Young {a.young_interval_s:.0f} s): waste {a.waste_at_daly:.1%}, "
            f"{a.usd_per_million_tokens_at_daly:.4f} $/1M tokens"
        )
    return lines


def nothing_trained_warning(result, min_throughput, max_cost_per_iteration) -> str | None:
    """One line when no policy held a plan in any state: the table of zeros (exit 0) read like
    an answer, while ``plan`` on the same GPUs says why (no plan fits or meets the
    constraints)."""
    if any(e.gpus_used > 0 for e in result.events):
        return None
    t = result.trace
    if not any(s.inventory.total_gpus for s in t.states):
        return f"warning: no policy trained: trace {t.source} has no GPUs in any state"
    given = [
        flag
        for flag, value in (
            ("--min-throughput", min_throughput),
            ("--max-cost-per-iteration", max_cost_per_iteration),
        )
        if value is not None
    ]
    fix = f"relax {' / '.join(given)} or " if given else ""
    return (
        f"warning: no policy trained: no plan of {result.job.model.name} fits"
        f"{' and meets the constraints' if given else ''} on the GPUs of any state of trace "
        f"{t.source}; {fix}replay a trace with more GPUs"
    )


@specs.with_spec(
    RunSpec,
    exclude=(*TRAINING_FIELDS, "optimizer"),
    defaults={"global_batch_size": 1024},
)
def replay_command(
    spec: RunSpec,
    given: frozenset,
    trace: Annotated[Path, typer.Option("--trace", help="Availability trace (CSV or Parquet).")],
    objective: Annotated[str, typer.Option("--objective", help="throughput or cost.")] = (
        "throughput"
    ),
    min_throughput: Annotated[
        float | None, typer.Option("--min-throughput", help="Iterations per second.")
    ] = None,
    max_cost_per_iteration: Annotated[
        float | None, typer.Option("--max-cost-per-iteration")
    ] = None,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated subset of the policies.")
    ] = "sailor,static,single-type,replan-on-loss",
    checkpoint_interval: Annotated[
        float | None,
        typer.Option(
            "--checkpoint-interval",
            help=f"Seconds between checkpoints (default 1800), at least "
            f"{MIN_CHECKPOINT_INTERVAL_S:g}: a checkpoint takes seconds to save.",
        ),
    ] = None,
    plan_s: Annotated[
        float | None,
        typer.Option(
            "--plan-s",
            help="Seconds charged per re-plan (default: the measured search time, which varies "
            "from run to run; a number makes the replay reproducible).",
        ),
    ] = None,
    hold_last: Annotated[
        float | None,
        typer.Option("--hold-last", help="Seconds the last state lasts (default: it closes)."),
    ] = None,
    sailor_root: Annotated[
        Path | None, typer.Option("--sailor-root", help="Original Sailor checkout (profiles).")
    ] = None,
    profile_dir: Annotated[Path | None, typer.Option("--profile-dir")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Replay a GPU availability trace: samples, dollars and re-plans per policy (the job and
    its options: RunSpec's flags, or a --config TOML file of the same names)."""
    try:
        if "model" not in given:
            raise SailorPlannerError("is required (a flag or a --config key)", field="--model")
        if plot is not None:  # before the replay, not after it
            inputs.output_file(plot, "--plot")
        if checkpoint_interval is not None:
            check_interval(checkpoint_interval, "--checkpoint-interval")
        # Checked under the flags typed: ReconfigModel and the trace reader name their own
        # fields (reconfig.plan_s, hold_last_s), which no CLI user typed.
        if plan_s is not None:
            inputs.positive_number(plan_s, "--plan-s", allow_zero=True)
        if hold_last is not None:
            inputs.positive_number(hold_last, "--hold-last")
        if warning := empty_folder_warning(profile_dir, "--profile-dir"):
            typer.echo(warning, err=True)
        result = run_replay(
            trace, spec.model, spec.global_batch_size, spec.seq_len, spec.precision, objective,
            min_throughput, max_cost_per_iteration, policies, checkpoint_interval, plan_s,
            hold_last, sailor_root, profile_dir, spec.options,
        )  # fmt: skip
        if plot is not None:
            from .plot import plot_replay

            plot_replay(result, plot)
    except (SailorPlannerError, SailorSimError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if warning := nothing_trained_warning(result, min_throughput, max_cost_per_iteration):
        typer.echo(warning, err=True)
    if as_json:
        out = result.to_dict()
        out["plot"] = str(plot) if plot else None
        typer.echo(json.dumps(out))
    else:
        from ..planrun import stdout_console

        out = stdout_console(highlight=False)  # piped: one line per row, never folded
        out.print(policy_table(result))
        for line in notes(result) + ([f"plot: {plot}"] if plot is not None else []):
            out.print(line, markup=False, soft_wrap=True)


def run_replay(
    trace, model, gbs, seq_len, dtype, objective, min_throughput, max_cost_per_iteration,
    policies, checkpoint_interval, plan_s, hold_last, sailor_root, profile_dir, options=None,
):  # fmt: skip
    from ..planrun import job_of
    from ..request import Constraints, SearchOptions
    from ..sources import planner_for
    from .reconfig import ReconfigModel
    from .request import ReplayRequest
    from .run import replay
    from .trace import read_trace

    given = {"checkpoint_interval_s": checkpoint_interval, "plan_s": plan_s}
    reconfig = ReconfigModel(**{k: v for k, v in given.items() if v is not None})
    request = ReplayRequest(
        job=job_of(model, gbs, seq_len, dtype, options)[0],
        trace=read_trace(trace, hold_last),
        options=SearchOptions(objective, Constraints(max_cost_per_iteration, None, min_throughput)),
        reconfig=reconfig,
        policies=_policy_names(policies),
    )
    planner = planner_for(
        str(profile_dir) if profile_dir else None, str(sailor_root) if sailor_root else None
    )
    return replay(planner, request)


def _policy_names(text: str) -> tuple[str, ...]:
    """--policies as names; an empty one (``a,,b``, a trailing comma) is refused, not
    dropped: it is a name left out by mistake."""
    from ..errors import RequestError
    from .policies import KNOWN_POLICIES

    names = tuple(p.strip() for p in text.split(","))
    if any(not p for p in names):
        raise RequestError(
            f"{text!r} has an empty name; list names separated by single commas, some of "
            f"{', '.join(KNOWN_POLICIES)}",
            field="policies",
        )
    return names
